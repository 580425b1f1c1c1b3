"""The worker credential at control: a third token with role ``worker``, scoped to what a reward
worker does (register its contract and its own WORKER key, forward receipts, read certificates,
issuer keys and revocations) and never more (issue, revoke, retire, or add an ORGANIZATION key).
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from support.control import (
    ADMIN,
    TRAINER,
    WORKER,
    WORKER_TOKEN,
    ControlStack,
    start_control,
    stop_control,
    wire_error,
)
from support.control_store import list_audit

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.key_possession import sign_registration
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1 import integrity_pb2
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.server import ADMIN_METHODS, ROLES_BY_METHOD, roles_by_method
from rewardseal_control.service import WORKER_ROLE
from rewardseal_control.settings import (
    ADMIN_TOKEN_ENV,
    TOKEN_ENV,
    WORKER_TOKEN_ENV,
    WORKER_TOKEN_FILE,
    resolve_settings,
)
from rewardseal_kit.mockmed import mockmed_contract

CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.db'}")
    yield stack
    await stop_control(stack)


def key_request(
    role: IssuerKeyRole.ValueType, control: ControlStack | None = None
) -> pb.RegisterIssuerKeyRequest:
    """A registration of a fresh key; signed by it (proof of possession, R-C-10) at control's
    clock when ``control`` is given."""
    key = SigningKey.generate()
    request = pb.RegisterIssuerKeyRequest(
        key=IssuerKey(public_key=key.public_key, role=role, display_name="a key"),
        reason="worker start",
    )
    if control is not None:
        sign_registration(request, key, control.clock.now)
    return request


def test_every_rpc_of_the_services_has_its_roles() -> None:
    services = (
        pb.DESCRIPTOR.services_by_name["ControlPlaneService"],
        integrity_pb2.DESCRIPTOR.services_by_name["RewardIntegrityService"],
    )
    names = [method.name for service in services for method in service.methods]
    assert len(names) == len(set(names)) == len(ROLES_BY_METHOD)
    assert set(names) == set(ROLES_BY_METHOD)
    assert set(ADMIN_METHODS) == {
        "RetireIssuerKey",
        "ApproveIssuerKey",
        "UnbindIssuerKey",
        "CreateEnrollment",
        "IssueCertificate",
        "RevokeCertificate",
        "CreateRewardSystem",
        "CreateRetentionProtocol",
        "CreateIntegrityProfile",
        "CancelAudit",
        "RetryAudit",
        "ReviewDecision",
        "ListAuditLog",
    }
    assert all(roles for roles in roles_by_method().values())
    # The worker has no part in reward integrity.
    integrity = {m.name for m in services[1].methods}
    assert all(WORKER_ROLE not in ROLES_BY_METHOD[name] for name in integrity)


@pytest.mark.parametrize(
    "method",
    [
        "IssueCertificate",
        "RevokeCertificate",
        "RetireIssuerKey",
        "ApproveIssuerKey",
        "UnbindIssuerKey",
        "CreateEnrollment",
    ],
)
async def test_worker_credential_cannot_issue_revoke_or_retire(
    control: ControlStack, method: str
) -> None:
    request = getattr(pb, f"{method}Request")()
    code, reason, _, message = await wire_error(control, method, request, metadata=WORKER)
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied")
    assert "worker credential" in message
    assert WORKER_TOKEN not in message


@pytest.mark.parametrize(
    "role",
    [IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION, IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED],
    ids=["organization", "unspecified"],
)
async def test_worker_credential_cannot_register_an_organization_key(
    control: ControlStack, role: IssuerKeyRole.ValueType
) -> None:
    request = key_request(role)
    code, reason, _, message = await wire_error(
        control, "RegisterIssuerKey", request, metadata=WORKER
    )
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied")
    assert "WORKER keys only" in message
    listed = await control.stub().ListIssuerKeys(pb.ListIssuerKeysRequest(), metadata=ADMIN)
    assert request.key.public_key not in {k.public_key for k in listed.keys}


async def test_worker_credential_registers_its_worker_key_and_is_audited(
    control: ControlStack,
) -> None:
    answer = await control.stub().RegisterIssuerKey(
        key_request(IssuerKeyRole.ISSUER_KEY_ROLE_WORKER, control), metadata=WORKER
    )
    assert answer.key.role == IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
    audit = list_audit(control.store, action="issuer_key.register").items
    assert [entry.actor for entry in audit if entry.target == answer.key.key_id] == [WORKER_ROLE]


async def test_worker_credential_does_what_a_worker_does(control: ControlStack) -> None:
    stub = control.stub()
    await stub.RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=WORKER,
    )
    await stub.GetContract(pb.GetContractRequest(reward_contract_digest=DIGEST), metadata=WORKER)
    await stub.ListIssuerKeys(pb.ListIssuerKeysRequest(), metadata=WORKER)
    await stub.ListCertificates(pb.ListCertificatesRequest(), metadata=WORKER)
    await stub.GetRevocationList(pb.GetRevocationListRequest(), metadata=WORKER)
    await stub.RecordReceipts(pb.RecordReceiptsRequest(), metadata=WORKER)


@pytest.mark.parametrize("method", ["ListReceipts", "GetReceiptSummary"])
async def test_worker_credential_does_not_read_the_receipt_index(
    control: ControlStack, method: str
) -> None:
    request = getattr(pb, f"{method}Request")()
    code, _, _, _ = await wire_error(control, method, request, metadata=WORKER)
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_trainer_credential_registers_no_key(control: ControlStack) -> None:
    request = key_request(IssuerKeyRole.ISSUER_KEY_ROLE_WORKER)
    code, _, _, _ = await wire_error(control, "RegisterIssuerKey", request, metadata=TRAINER)
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_worker_token_file_is_made_0600_and_differs(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path, env={})
    path = tmp_path / WORKER_TOKEN_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len({settings.admin_token, settings.token, settings.worker_token}) == 3
    assert settings.worker_token not in repr(settings)
    assert settings.worker_token_source == str(path)
    again = resolve_settings(data_dir=tmp_path, env={})
    assert again.worker_token == settings.worker_token


@pytest.mark.parametrize("other", [ADMIN_TOKEN_ENV, TOKEN_ENV])
def test_worker_token_equal_to_another_is_refused(tmp_path: Path, other: str) -> None:
    env = {
        ADMIN_TOKEN_ENV: "admin-" + "a" * 24,
        TOKEN_ENV: "client-" + "c" * 24,
    }
    env[WORKER_TOKEN_ENV] = env[other]
    with pytest.raises(ValidationError, match="worker token must differ"):
        resolve_settings(data_dir=tmp_path, env=env)
