"""Contract tests for ControlPlaneService on a real grpc.aio server (port 0), SQLite and PostgreSQL.

Every RPC and every refusal (docs/spec.md §9, R-MSG-5, R-CAL-4, section 8). Errors are read
straight off the wire (status code + google.rpc.Status ErrorInfo), not through a client's
decoder, so the tests would catch a mapping bug on either side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.builders import ISSUED_AT_UPDATE, make_certificate, make_facts
from support.control import (
    ADMIN,
    TRAINER,
    ControlStack,
    bearer,
    calibration_summary,
    start_control,
    stop_control,
    wire_error,
)
from support.control_store import list_audit

from rewardseal.core.calibration import clopper_pearson_upper
from rewardseal.core.contract import certificate_digest, contract_digest
from rewardseal.core.errors import SignatureError, StaleRevocationList
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.revocation import RevocationFollower, open_revocation_list
from rewardseal.core.signing import (
    RECEIPT_PAYLOAD_TYPE,
    SigningKey,
    sign_envelope,
    verify_certificate,
)
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2_grpc import ControlPlaneServiceStub
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

SERVICE = "rewardseal.v1.ControlPlaneService"
SYNTHETIC = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
PRODUCTION = CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
ORGANIZATION = CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION
SELF_SIGNED = CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
WORKER_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
ORGANIZATION_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
FAILED = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
# support.builders signs its self-signed certificates with this seed: the worker's key here.
WORKER_KEY = SigningKey.from_seed(bytes(range(32)))
CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
EPSILON_0_OF_300 = clopper_pearson_upper(0, 300, 0.05)


@pytest.fixture
async def unkeyed(store_url: str) -> AsyncIterator[ControlStack]:
    """A control plane whose organization key is NOT in its issuer key registry."""
    stack = await start_control(store_url, register_key=False)
    yield stack
    await stop_control(stack)


# --- helpers ---


async def register_contract(stack: ControlStack, contract: RewardContract = CONTRACT) -> str:
    digest = contract_digest(contract)
    answer = await stack.stub().RegisterContract(
        pb.RegisterContractRequest(contract=contract, reward_contract_digest=digest),
        metadata=TRAINER,
    )
    return str(answer.reward_contract_digest)


async def register_worker_key(stack: ControlStack, key: SigningKey = WORKER_KEY) -> IssuerKey:
    """The admin registers ``key`` admitted for the contract (R-C-10), with the self-signed
    certificate certified receipts name as its bundle certificate; the contract is registered
    first when it is not."""
    not_before = Timestamp()
    not_before.FromDatetime(stack.clock.now - timedelta(days=1))
    await register_contract(stack)
    answer = await stack.stub().RegisterIssuerKey(
        pb.RegisterIssuerKeyRequest(
            key=IssuerKey(
                public_key=key.public_key,
                role=WORKER_ROLE,
                display_name="worker 1",
                not_before=not_before,
            ),
            reason="worker enrolled",
            reward_contract_digests=[DIGEST],
            bundle_certificate=make_certificate(CONTRACT),
        ),
        metadata=ADMIN,
    )
    return answer.key


def issue_request(**overrides: object) -> pb.IssueCertificateRequest:
    fields: dict[str, object] = {
        "reward_contract_digest": DIGEST,
        "calibration": calibration_summary(DIGEST),
        "calibration_scope": SYNTHETIC,
        "issuer": ORGANIZATION,
        "issued_at_policy_update": ISSUED_AT_UPDATE,
        "expiry_policy_updates": 50,
        "reason": "quarterly calibration",
    }
    fields.update(overrides)
    return pb.IssueCertificateRequest(**fields)  # type: ignore[arg-type]


async def issue(stack: ControlStack, **overrides: object) -> pb.IssueCertificateResponse:
    return await stack.stub().IssueCertificate(issue_request(**overrides), metadata=ADMIN)


def sealed(
    episode: str,
    outcome: RewardOutcome.ValueType = VERIFIED,
    *,
    key: SigningKey = WORKER_KEY,
    policy_update: int = ISSUED_AT_UPDATE,
    certified: bool = False,
    contract: RewardContract = CONTRACT,
) -> SignedEnvelope:
    """A receipt for ``episode`` signed by ``key`` (certified against a self-signed cert)."""
    receipt = build_receipt(
        make_facts(outcome, episode_id=episode, policy_update=policy_update),
        contract=contract,
        certificate=make_certificate(contract) if certified else None,
        issuer_key_id=key.key_id,
    )
    return seal_receipt(receipt, key)


# --- health and authentication ---


async def test_health_serving_without_a_token(control: ControlStack) -> None:
    channel = grpc.aio.insecure_channel(control.target)
    try:
        for service in ("", SERVICE):
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=10
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await channel.close()


EVERY_RPC: list[tuple[str, object]] = [
    ("RegisterContract", pb.RegisterContractRequest()),
    ("GetContract", pb.GetContractRequest()),
    ("ListContracts", pb.ListContractsRequest()),
    ("RegisterIssuerKey", pb.RegisterIssuerKeyRequest()),
    ("ListIssuerKeys", pb.ListIssuerKeysRequest()),
    ("RetireIssuerKey", pb.RetireIssuerKeyRequest()),
    ("IssueCertificate", pb.IssueCertificateRequest()),
    ("GetCertificate", pb.GetCertificateRequest()),
    ("ListCertificates", pb.ListCertificatesRequest()),
    ("RevokeCertificate", pb.RevokeCertificateRequest()),
    ("GetRevocationList", pb.GetRevocationListRequest()),
    ("WatchRevocations", pb.WatchRevocationsRequest()),
    ("RecordReceipts", pb.RecordReceiptsRequest()),
    ("ListReceipts", pb.ListReceiptsRequest()),
    ("GetReceiptSummary", pb.GetReceiptSummaryRequest()),
]
ADMIN_RPCS = {"RegisterIssuerKey", "RetireIssuerKey", "IssueCertificate", "RevokeCertificate"}


@pytest.mark.parametrize(("method", "request_message"), EVERY_RPC, ids=[m for m, _ in EVERY_RPC])
@pytest.mark.parametrize("presented", ["none", "wrong"])
async def test_unauthenticated_without_a_known_token(
    control: ControlStack, method: str, request_message: pb.ListContractsRequest, presented: str
) -> None:
    metadata = () if presented == "none" else bearer("x" * 43)
    code, reason, _, _ = await wire_error(control, method, request_message, metadata=metadata)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")


@pytest.mark.parametrize("method", sorted(ADMIN_RPCS))
async def test_trainer_token_on_an_admin_rpc_is_permission_denied(
    control: ControlStack, method: str
) -> None:
    request = dict(EVERY_RPC)[method]
    code, reason, _, _ = await wire_error(control, method, request, metadata=TRAINER)  # type: ignore[arg-type]
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied")


async def test_trainer_token_is_enough_for_every_other_rpc(control: ControlStack) -> None:
    stub = control.stub()
    await stub.ListContracts(pb.ListContractsRequest(), metadata=TRAINER)
    await stub.ListIssuerKeys(pb.ListIssuerKeysRequest(), metadata=TRAINER)
    await stub.ListCertificates(pb.ListCertificatesRequest(), metadata=TRAINER)
    await stub.GetRevocationList(pb.GetRevocationListRequest(), metadata=TRAINER)
    await stub.ListReceipts(pb.ListReceiptsRequest(), metadata=TRAINER)
    await stub.RecordReceipts(pb.RecordReceiptsRequest(), metadata=TRAINER)


# --- contracts (R-C-1) ---


async def test_register_get_and_list_a_contract(control: ControlStack) -> None:
    stub = control.stub()
    first = await stub.RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=TRAINER,
    )
    again = await stub.RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=TRAINER,
    )
    assert (first.reward_contract_digest, first.created) == (DIGEST, True)
    assert (again.reward_contract_digest, again.created) == (DIGEST, False)
    got = await stub.GetContract(
        pb.GetContractRequest(reward_contract_digest=DIGEST), metadata=TRAINER
    )
    assert got.contract.reward_contract_digest == DIGEST
    assert contract_digest(got.contract.contract) == DIGEST
    assert got.contract.HasField("registered_at")
    listed = await stub.ListContracts(pb.ListContractsRequest(), metadata=TRAINER)
    assert [c.reward_contract_digest for c in listed.contracts] == [DIGEST]
    assert listed.next_page_token == ""


async def test_register_refuses_a_digest_mismatch(control: ControlStack) -> None:
    other = "sha256:" + "0" * 64
    code, reason, metadata, message = await wire_error(
        control,
        "RegisterContract",
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=other),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "contract_mismatch")
    assert metadata["reward_contract_digest"] == DIGEST
    assert "does not match" in message
    # Nothing was registered.
    code, reason, _, _ = await wire_error(
        control, "GetContract", pb.GetContractRequest(reward_contract_digest=DIGEST)
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")


@pytest.mark.parametrize(
    "request_message",
    [
        pb.RegisterContractRequest(reward_contract_digest=DIGEST),
        pb.RegisterContractRequest(contract=CONTRACT),
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest="sha256:xyz"),
        pb.RegisterContractRequest(
            contract=RewardContract(contract_id="bad id"), reward_contract_digest=DIGEST
        ),
    ],
    ids=["no-contract", "no-digest", "malformed-digest", "invalid-contract"],
)
async def test_register_refuses_malformed_requests(
    control: ControlStack, request_message: pb.RegisterContractRequest
) -> None:
    code, _, _, _ = await wire_error(control, "RegisterContract", request_message)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_get_contract_unknown_and_malformed(control: ControlStack) -> None:
    code, reason, _, _ = await wire_error(
        control, "GetContract", pb.GetContractRequest(reward_contract_digest="sha256:" + "1" * 64)
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    code, reason, _, _ = await wire_error(
        control, "GetContract", pb.GetContractRequest(reward_contract_digest="nope")
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")


async def test_list_contracts_pages_through_every_contract_once(control: ControlStack) -> None:
    digests = set()
    for index in range(5):
        contract = mockmed_contract()
        contract.contract_id = f"mockmed.variant.{index:04d}"
        digests.add(await register_contract(control, contract))
        control.clock.advance(timedelta(seconds=1))
    stub = control.stub()
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListContracts(
            pb.ListContractsRequest(page_size=2, page_token=token), metadata=TRAINER
        )
        pages += 1
        assert len(page.contracts) <= 2
        seen.extend(c.reward_contract_digest for c in page.contracts)
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(digests)
    assert len(seen) == len(set(seen))
    code, _, _, _ = await wire_error(
        control, "ListContracts", pb.ListContractsRequest(page_token="not a token!")
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# --- issuer keys (R-C-2) ---


async def test_register_list_and_retire_issuer_keys(control: ControlStack) -> None:
    worker = await register_worker_key(control)
    assert worker.key_id == WORKER_KEY.key_id
    assert (worker.role, worker.retired) == (WORKER_ROLE, False)
    stub = control.stub()
    workers = await stub.ListIssuerKeys(
        pb.ListIssuerKeysRequest(role=WORKER_ROLE), metadata=TRAINER
    )
    assert [k.key_id for k in workers.keys] == [WORKER_KEY.key_id]
    organizations = await stub.ListIssuerKeys(
        pb.ListIssuerKeysRequest(role=ORGANIZATION_ROLE), metadata=TRAINER
    )
    assert [k.key_id for k in organizations.keys] == [control.key.key_id]
    everything = await stub.ListIssuerKeys(pb.ListIssuerKeysRequest(page_size=1), metadata=TRAINER)
    assert len(everything.keys) == 1
    assert everything.next_page_token
    retired = await stub.RetireIssuerKey(
        pb.RetireIssuerKeyRequest(key_id=WORKER_KEY.key_id, reason="host decommissioned"),
        metadata=ADMIN,
    )
    assert retired.key.retired
    audit = list_audit(control.store).items
    assert [(e.actor, e.action, e.target) for e in audit if e.actor == "admin"] == [
        ("admin", "issuer_key.register", WORKER_KEY.key_id),
        ("admin", "issuer_key.retire", WORKER_KEY.key_id),
    ]
    assert audit[-1].reason == "host decommissioned"


async def test_issuer_key_refusals(control: ControlStack) -> None:
    mismatched = IssuerKey(
        key_id=SigningKey.generate().key_id, public_key=WORKER_KEY.public_key, role=WORKER_ROLE
    )
    code, reason, _, _ = await wire_error(
        control, "RegisterIssuerKey", pb.RegisterIssuerKeyRequest(key=mismatched)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    short = IssuerKey(public_key=b"\x01" * 31, role=WORKER_ROLE)
    code, _, _, _ = await wire_error(
        control, "RegisterIssuerKey", pb.RegisterIssuerKeyRequest(key=short)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    no_role = IssuerKey(public_key=WORKER_KEY.public_key)
    code, _, _, _ = await wire_error(
        control, "RegisterIssuerKey", pb.RegisterIssuerKeyRequest(key=no_role)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, reason, _, _ = await wire_error(
        control,
        "RetireIssuerKey",
        pb.RetireIssuerKeyRequest(key_id=SigningKey.generate().key_id, reason="gone"),
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    code, _, _, _ = await wire_error(
        control, "RetireIssuerKey", pb.RetireIssuerKeyRequest(key_id=control.key.key_id)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT  # a reason is required


# --- certificates (R-C-3, R-MSG-5, R-CAL-4) ---


async def test_issue_get_and_list_a_certificate(control: ControlStack) -> None:
    await register_contract(control)
    answer = await issue(control, certificate_id="cert.mockmed.0001")
    certificate = answer.certificate
    assert certificate.certificate_id == "cert.mockmed.0001"
    assert certificate.reward_contract_digest == DIGEST
    assert certificate.issuer == ORGANIZATION
    assert certificate.calibration_scope == SYNTHETIC
    assert certificate.issuer_key_id == control.key.key_id
    assert certificate.delta == 0.05
    assert (certificate.issued_at_policy_update, certificate.expiry_policy_updates) == (
        ISSUED_AT_UPDATE,
        50,
    )
    assert verify_certificate(certificate, control.trust) == control.key.key_id
    assert answer.certificate_digest == certificate_digest(certificate)
    stub = control.stub()
    got = await stub.GetCertificate(
        pb.GetCertificateRequest(certificate_id="cert.mockmed.0001"), metadata=TRAINER
    )
    assert got.certificate == certificate
    assert (got.certificate_digest, got.revoked) == (answer.certificate_digest, False)
    listed = await stub.ListCertificates(
        pb.ListCertificatesRequest(reward_contract_digest=DIGEST), metadata=TRAINER
    )
    assert [c.certificate_id for c in listed.certificates] == ["cert.mockmed.0001"]
    audit = list_audit(control.store, action="certificate.issue").items
    assert [(e.actor, e.target, e.reason) for e in audit] == [
        ("admin", "cert.mockmed.0001", "quarterly calibration")
    ]


async def test_issue_mints_an_id_and_defaults_expiry_to_the_contract_maximum(
    control: ControlStack,
) -> None:
    await register_contract(control)
    answer = await issue(control, expiry_policy_updates=0)
    assert answer.certificate.certificate_id.startswith("cert.")
    assert answer.certificate.expiry_policy_updates == (
        CONTRACT.certificate_policy.max_expiry_policy_updates
    )


async def test_issue_recomputes_epsilon_ignoring_a_submitted_one(control: ControlStack) -> None:
    await register_contract(control)
    answer = await issue(control, epsilon=1e-9)
    assert answer.certificate.epsilon == pytest.approx(EPSILON_0_OF_300, abs=1e-12)
    assert answer.certificate.epsilon != 1e-9
    # And from the counts, not the trial total alone: 1 false accept in 300 gives R-CAL-1's 0.0157.
    other = await issue(control, calibration=calibration_summary(DIGEST, false_accepts=1))
    assert other.certificate.epsilon == pytest.approx(0.0157146, abs=1e-6)


async def test_issue_production_needs_organization_issuer_and_held_out_summary(
    control: ControlStack,
) -> None:
    await register_contract(control)
    answer = await issue(
        control,
        calibration_scope=PRODUCTION,
        calibration=calibration_summary(DIGEST, held_out=True),
    )
    assert answer.certificate.calibration_scope == PRODUCTION
    assert answer.certificate.issuer == ORGANIZATION
    code, reason, _, message = await wire_error(
        control, "IssueCertificate", issue_request(calibration_scope=PRODUCTION)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "held-out" in message


async def test_issue_refuses_self_signed_with_production_scope(control: ControlStack) -> None:
    await register_contract(control)
    code, reason, metadata, message = await wire_error(
        control,
        "IssueCertificate",
        issue_request(
            issuer=SELF_SIGNED,
            calibration_scope=PRODUCTION,
            calibration=calibration_summary(DIGEST, held_out=True),
        ),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert metadata["rule"] == "R-MSG-5"
    assert "SELF_SIGNED" in message
    # Self-signed with synthetic scope is fine.
    answer = await issue(control, issuer=SELF_SIGNED)
    assert answer.certificate.issuer == SELF_SIGNED


async def test_issue_refuses_production_without_a_registered_organization_key(
    unkeyed: ControlStack,
) -> None:
    await register_contract(unkeyed)
    code, reason, metadata, message = await wire_error(
        unkeyed,
        "IssueCertificate",
        issue_request(
            calibration_scope=PRODUCTION, calibration=calibration_summary(DIGEST, held_out=True)
        ),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert metadata["issuer_key_id"] == unkeyed.key.key_id
    assert "not registered" in message
    assert "PRODUCTION" in message
    assert unkeyed.store.certificates.list_certificates().items == []


async def test_issue_refuses_a_summary_for_another_corpus(control: ControlStack) -> None:
    await register_contract(control)
    code, reason, _, message = await wire_error(
        control,
        "IssueCertificate",
        issue_request(calibration=calibration_summary(DIGEST, corpus_digest="sha256:" + "9" * 64)),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "corpus" in message


async def test_issue_refuses_a_summary_for_another_contract(control: ControlStack) -> None:
    await register_contract(control)
    code, reason, _, _ = await wire_error(
        control,
        "IssueCertificate",
        issue_request(calibration=calibration_summary("sha256:" + "8" * 64)),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "contract_mismatch")


async def test_issue_refuses_an_unknown_contract(control: ControlStack) -> None:
    code, reason, _, _ = await wire_error(control, "IssueCertificate", issue_request())
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")


async def test_issue_refuses_a_certificate_the_contract_policy_would_not_take(
    control: ControlStack,
) -> None:
    await register_contract(control)
    # 0 of 15 bounds epsilon at 0.18: above the contract's 0.05.
    code, reason, _, message = await wire_error(
        control,
        "IssueCertificate",
        issue_request(calibration=calibration_summary(DIGEST, trials=15)),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "epsilon 0.181036 is above" in message
    code, reason, _, message = await wire_error(
        control, "IssueCertificate", issue_request(expiry_policy_updates=1001)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "expiry" in message
    # delta is 1 - confidence (0.10 here) and the contract allows 0.05 at most.
    code, reason, _, message = await wire_error(
        control,
        "IssueCertificate",
        issue_request(calibration=calibration_summary(DIGEST, confidence=0.90)),
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "delta" in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"delta": 0.01}, "does not match the summary's confidence"),
        ({"calibration_scope": 0}, "calibration_scope"),
        ({"issuer": 0}, "issuer"),
        ({"certificate_id": "bad id"}, "certificate_id"),
        ({"issuer_key_id": "not-a-key"}, "issuer_key_id"),
        ({"calibration": None}, "calibration"),
    ],
    ids=["delta", "scope", "issuer", "certificate-id", "key-id", "no-calibration"],
)
async def test_issue_refuses_malformed_requests(
    control: ControlStack, overrides: dict[str, object], expected: str
) -> None:
    await register_contract(control)
    request = issue_request(**{k: v for k, v in overrides.items() if v is not None})
    if overrides.get("calibration", 0) is None:
        request.ClearField("calibration")
    code, reason, _, message = await wire_error(control, "IssueCertificate", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    assert expected in message


async def test_issue_refuses_a_wrong_calibration_method(control: ControlStack) -> None:
    await register_contract(control)
    summary = calibration_summary(DIGEST)
    summary.method = "wilson"
    code, _, _, message = await wire_error(
        control, "IssueCertificate", issue_request(calibration=summary)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "clopper_pearson_one_sided" in message


async def test_retired_key_cannot_issue(control: ControlStack) -> None:
    await register_contract(control)
    await issue(control)  # the key works while active
    await control.stub().RetireIssuerKey(
        pb.RetireIssuerKeyRequest(key_id=control.key.key_id, reason="rotated out"),
        metadata=ADMIN,
    )
    control.clock.advance(timedelta(seconds=1))
    for scope, summary in (
        (SYNTHETIC, calibration_summary(DIGEST)),
        (PRODUCTION, calibration_summary(DIGEST, held_out=True)),
    ):
        code, reason, metadata, message = await wire_error(
            control,
            "IssueCertificate",
            issue_request(calibration_scope=scope, calibration=summary),
        )
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
        assert metadata["issuer_key_id"] == control.key.key_id
        assert "retired" in message
    assert len(control.store.certificates.list_certificates().items) == 1


async def test_issue_refuses_a_registered_key_this_service_does_not_hold(
    control: ControlStack,
) -> None:
    await register_contract(control)
    other = SigningKey.generate()
    await control.stub().RegisterIssuerKey(
        pb.RegisterIssuerKeyRequest(
            key=IssuerKey(public_key=other.public_key, role=ORGANIZATION_ROLE)
        ),
        metadata=ADMIN,
    )
    code, reason, _, message = await wire_error(
        control, "IssueCertificate", issue_request(issuer_key_id=other.key_id)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "signs only with its own" in message
    # A worker key is no organization key.
    await register_worker_key(control)
    code, reason, _, message = await wire_error(
        control, "IssueCertificate", issue_request(issuer_key_id=WORKER_KEY.key_id)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert "not ORGANIZATION" in message


async def test_get_certificate_unknown_and_malformed(control: ControlStack) -> None:
    code, reason, _, _ = await wire_error(
        control, "GetCertificate", pb.GetCertificateRequest(certificate_id="cert.unknown.0001")
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    code, _, _, _ = await wire_error(
        control, "GetCertificate", pb.GetCertificateRequest(certificate_id="../etc/passwd")
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# --- revocation (R-C-4) ---


async def revocation_list(stack: ControlStack) -> SignedEnvelope:
    answer = await stack.stub().GetRevocationList(pb.GetRevocationListRequest(), metadata=TRAINER)
    return answer.revocation_list


async def test_revoke_publishes_a_new_signed_list(control: ControlStack) -> None:
    await register_contract(control)
    await issue(control, certificate_id="cert.mockmed.0001")
    before = open_revocation_list(await revocation_list(control), control.trust)
    assert before.entries == []
    stub = control.stub()
    answer = await stub.RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id="cert.mockmed.0001", reason="key leaked"),
        metadata=ADMIN,
    )
    assert answer.version == before.version + 1
    after = open_revocation_list(answer.revocation_list, control.trust)
    assert after.version == answer.version
    assert [(e.certificate_id, e.reason) for e in after.entries] == [
        ("cert.mockmed.0001", "key leaked")
    ]
    assert after.issuer_key_id == control.key.key_id
    assert (await revocation_list(control)) == answer.revocation_list
    got = await stub.GetCertificate(
        pb.GetCertificateRequest(certificate_id="cert.mockmed.0001"), metadata=TRAINER
    )
    assert got.revoked
    # Revoking again changes nothing.
    again = await stub.RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id="cert.mockmed.0001", reason="again"),
        metadata=ADMIN,
    )
    assert again.version == answer.version
    audit = list_audit(control.store, action="certificate.revoke").items
    assert next((e.actor, e.target, e.reason) for e in audit) == (
        "admin",
        "cert.mockmed.0001",
        "key leaked",
    )


async def test_revoke_refusals(control: ControlStack) -> None:
    code, reason, _, _ = await wire_error(
        control,
        "RevokeCertificate",
        pb.RevokeCertificateRequest(certificate_id="cert.unknown.0001", reason="x"),
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    await register_contract(control)
    await issue(control, certificate_id="cert.mockmed.0001")
    code, _, _, message = await wire_error(
        control,
        "RevokeCertificate",
        pb.RevokeCertificateRequest(certificate_id="cert.mockmed.0001", reason=""),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "reason" in message


async def test_revocation_list_rollback_rejected(control: ControlStack) -> None:
    await register_contract(control)
    await issue(control, certificate_id="cert.mockmed.0001")
    old = await revocation_list(control)  # signed by the service, before the revocation
    answer = await control.stub().RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id="cert.mockmed.0001", reason="key leaked"),
        metadata=ADMIN,
    )
    follower = RevocationFollower(control.trust)
    follower.accept(answer.revocation_list, control.clock.now)
    assert follower.is_revoked("cert.mockmed.0001")
    # An attacker replays the older, validly signed list to un-revoke the certificate.
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(old, control.clock.now)
    assert caught.value.metadata["problem"] == "rollback"
    assert follower.is_revoked("cert.mockmed.0001")
    assert follower.version == answer.version


async def test_revocation_list_freeze_rejected_after_expiry(control: ControlStack) -> None:
    envelope = await revocation_list(control)
    current = RevocationList.FromString(envelope.payload)
    expiry = current.expires_at.ToDatetime(tzinfo=control.clock.now.tzinfo)
    assert expiry == current.issued_at.ToDatetime(tzinfo=expiry.tzinfo) + control.ttl
    follower = RevocationFollower(control.trust)
    follower.accept(envelope, control.clock.now)
    # An attacker withholds every newer list: at expiry the follower is no longer fresh, and
    # the frozen list is refused when fed again.
    assert not follower.fresh(expiry)
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(envelope, expiry)
    assert caught.value.metadata["problem"] == "expired"
    # The service itself never hands out a frozen list: past half-life it re-signs.
    control.clock.advance(control.ttl / 2)
    renewed = await revocation_list(control)
    fresh = follower.accept(renewed, control.clock.now)
    assert fresh.version == current.version + 1
    assert follower.fresh(control.clock.now)


async def test_revocation_list_forged_by_another_key_is_refused(control: ControlStack) -> None:
    envelope = await revocation_list(control)
    forged = SignedEnvelope()
    forged.CopyFrom(envelope)
    impostor = SigningKey.generate()
    forged.signatures[0].sig = impostor.sign(b"anything")
    with pytest.raises(SignatureError):
        RevocationFollower(control.trust).accept(forged, control.clock.now)


async def test_watch_revocations_pushes_each_new_signed_list(control: ControlStack) -> None:
    await register_contract(control)
    await issue(control, certificate_id="cert.mockmed.0001")
    await issue(control, certificate_id="cert.mockmed.0002")
    follower = RevocationFollower(control.trust)
    stream = control.stub().WatchRevocations(
        pb.WatchRevocationsRequest(known_version=0), metadata=TRAINER, timeout=30
    )
    first = await asyncio.wait_for(stream.read(), 10)
    head = follower.accept(first.revocation_list, control.clock.now)
    assert head.entries == []
    stub = control.stub()
    for certificate_id in ("cert.mockmed.0001", "cert.mockmed.0002"):
        await stub.RevokeCertificate(
            pb.RevokeCertificateRequest(certificate_id=certificate_id, reason="compromised"),
            metadata=ADMIN,
        )
        pushed = await asyncio.wait_for(stream.read(), 10)
        follower.accept(pushed.revocation_list, control.clock.now)
        assert follower.is_revoked(certificate_id)
    assert follower.version == head.version + 2
    stream.cancel()


async def test_watch_revocations_from_a_known_version_waits_for_a_newer_one(
    control: ControlStack,
) -> None:
    await register_contract(control)
    await issue(control, certificate_id="cert.mockmed.0001")
    known = RevocationList.FromString((await revocation_list(control)).payload).version
    stream = control.stub().WatchRevocations(
        pb.WatchRevocationsRequest(known_version=known), metadata=TRAINER, timeout=30
    )
    pending = asyncio.ensure_future(stream.read())
    await asyncio.sleep(0.3)
    assert not pending.done(), "nothing newer than the known version exists yet"
    await control.stub().RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id="cert.mockmed.0001", reason="compromised"),
        metadata=ADMIN,
    )
    pushed = await asyncio.wait_for(pending, 10)
    assert RevocationList.FromString(pushed.revocation_list.payload).version == known + 1
    stream.cancel()


async def test_watch_revocations_pushes_re_signed_heads(store_url: str) -> None:
    stack = await start_control(
        store_url, ttl=timedelta(seconds=3600), refresh_interval=timedelta(milliseconds=50)
    )
    try:
        follower = RevocationFollower(stack.trust)
        stream = stack.stub().WatchRevocations(
            pb.WatchRevocationsRequest(), metadata=TRAINER, timeout=30
        )
        first = follower.accept(
            (await asyncio.wait_for(stream.read(), 10)).revocation_list, stack.clock.now
        )
        stack.clock.advance(timedelta(seconds=1800))  # half the lifetime: due for re-signing
        pushed = await asyncio.wait_for(stream.read(), 10)
        renewed = follower.accept(pushed.revocation_list, stack.clock.now)
        assert renewed.version == first.version + 1
        assert renewed.expires_at.ToDatetime() > first.expires_at.ToDatetime()
        stream.cancel()
    finally:
        await stop_control(stack)


# --- receipts (R-C-5) ---


async def record(stack: ControlStack, *envelopes: SignedEnvelope) -> list[pb.RecordReceiptResult]:
    answer = await stack.stub().RecordReceipts(
        pb.RecordReceiptsRequest(receipts=list(envelopes)), metadata=TRAINER
    )
    assert len(answer.results) == len(envelopes)
    return list(answer.results)


async def test_record_receipts_is_idempotent_by_receipt_id(control: ControlStack) -> None:
    await register_contract(control)
    await register_worker_key(control)
    envelopes = [sealed("episode.0001"), sealed("episode.0002", WRONG)]
    first = await record(control, *envelopes)
    assert [(r.receipt_id, r.recorded, r.duplicate) for r in first] == [
        ("rcpt.episode.0001", True, False),
        ("rcpt.episode.0002", True, False),
    ]
    assert not any(r.HasField("error") for r in first)
    again = await record(control, *envelopes)
    assert [(r.recorded, r.duplicate) for r in again] == [(True, True), (True, True)]


async def test_receipt_with_unregistered_key_rejected(control: ControlStack) -> None:
    await register_contract(control)
    await register_worker_key(control)
    stranger = SigningKey.generate()
    results = await record(control, sealed("episode.0001", key=stranger), sealed("episode.0002"))
    refused, accepted = results
    assert not refused.recorded
    assert refused.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert refused.error.reason == "signature_invalid"
    assert accepted.recorded  # one bad item never fails the batch
    stored = control.store.receipts.list_receipts().items
    assert [s.receipt.episode_id for s in stored] == ["episode.0002"]


async def test_receipt_with_record_contents_rejected(control: ControlStack) -> None:
    await register_contract(control)
    await register_worker_key(control)
    honest = sealed("episode.0001")
    # A worker (or someone holding its key) smuggles record text in an unknown field (99,
    # length-delimited) and re-signs: the signature is valid, the payload is still refused.
    record_text = b"patient 4711: chest pain, note: takes warfarin"
    smuggled = honest.payload + bytes([0x9A, 0x06, len(record_text)]) + record_text
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, smuggled, WORKER_KEY)
    (result,) = await record(control, envelope)
    assert not result.recorded
    assert result.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert result.error.reason == "invalid_argument"
    assert "does not know" in result.error.message
    assert control.store.receipts.list_receipts().items == []


async def test_receipt_refusals_per_item(control: ControlStack) -> None:
    await register_contract(control)
    worker = await register_worker_key(control)
    assert worker.key_id == WORKER_KEY.key_id
    other_contract = mockmed_contract()
    other_contract.contract_id = "mockmed.unregistered.0001"
    not_a_receipt = sign_envelope("application/octet-stream", b"hello", WORKER_KEY)
    sealed_twice = sealed("episode.0003")
    claims_seal = SignedEnvelope()
    claims_seal.CopyFrom(sealed("episode.0004"))
    claims_seal.execute_seal = True
    results = await record(
        control,
        sealed("episode.0001", contract=other_contract),
        not_a_receipt,
        sealed_twice,
        claims_seal,
    )
    assert [(r.recorded, r.error.reason) for r in results] == [
        (False, "not_found"),
        (False, "signature_invalid"),
        (True, ""),
        (False, "invalid_argument"),
    ]
    # The same episode under another receipt id: ALREADY_EXISTS with the existing receipt.
    other = build_receipt(
        make_facts(VERIFIED, episode_id="episode.0003"),
        contract=CONTRACT,
        certificate=None,
        issuer_key_id=WORKER_KEY.key_id,
    )
    other.receipt_id = "rcpt.another.0003"
    (duplicate,) = await record(control, seal_receipt(other, WORKER_KEY))
    assert duplicate.error.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    assert duplicate.error.reason == "duplicate_episode"
    assert duplicate.error.metadata["receipt_id"] == "rcpt.episode.0003"


async def test_receipt_envelope_flags_signatures_and_fields_refused(control: ControlStack) -> None:
    """What sits outside the signed payload: flags that say more than it, no signature, a field
    this schema does not know (the index would store it). One refusal each, never a batch."""
    await register_contract(control)
    await register_worker_key(control)
    seal = SignedEnvelope()
    seal.CopyFrom(sealed("episode.0001"))
    seal.execute_seal = True
    flag = SignedEnvelope()
    flag.CopyFrom(sealed("episode.0002"))
    flag.unscored = True
    unsigned = SignedEnvelope(payload_type=RECEIPT_PAYLOAD_TYPE, payload=flag.payload)
    envelope_field = SignedEnvelope.FromString(
        sealed("episode.0003").SerializeToString() + b"\xf8\x3f\x01"
    )
    results = await record(control, seal, flag, unsigned, envelope_field, sealed("episode.0004"))
    assert [(r.recorded, r.receipt_id, r.error.reason) for r in results] == [
        (False, "", "invalid_argument"),
        (False, "", "invalid_argument"),
        (False, "", "signature_invalid"),
        (False, "", "invalid_argument"),
        (True, "rcpt.episode.0004", ""),
    ]
    assert "does not know" in results[3].error.message
    stored = control.store.receipts.list_receipts().items
    assert [s.receipt.episode_id for s in stored] == ["episode.0004"]


async def test_receipts_from_a_retired_worker_key_rejected(control: ControlStack) -> None:
    await register_contract(control)
    await register_worker_key(control)
    await control.stub().RetireIssuerKey(
        pb.RetireIssuerKeyRequest(key_id=WORKER_KEY.key_id, reason="host compromised"),
        metadata=ADMIN,
    )
    control.clock.advance(timedelta(seconds=1))
    (result,) = await record(control, sealed("episode.0001"))
    assert (result.recorded, result.error.reason) == (False, "signature_invalid")


async def test_record_receipts_refuses_an_oversized_batch(control: ControlStack) -> None:
    envelope = sealed("episode.0001")
    code, _, _, message = await wire_error(
        control,
        "RecordReceipts",
        pb.RecordReceiptsRequest(receipts=[envelope] * 1025),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 1024" in message


async def seed_receipts(stack: ControlStack) -> None:
    await register_contract(stack)
    await register_worker_key(stack)
    envelopes = [
        sealed(f"episode.{i:04d}", VERIFIED, policy_update=ISSUED_AT_UPDATE + i, certified=True)
        for i in range(6)
    ]
    envelopes += [sealed("episode.0100", WRONG, policy_update=ISSUED_AT_UPDATE + 10)]
    envelopes += [sealed("episode.0101", FAILED, policy_update=ISSUED_AT_UPDATE + 11)]
    results = await record(stack, *envelopes)
    assert all(r.recorded for r in results)


async def test_list_receipts_filters_and_pages(control: ControlStack) -> None:
    await seed_receipts(control)
    stub = control.stub()
    seen: list[str] = []
    token = ""
    while True:
        page = await stub.ListReceipts(
            pb.ListReceiptsRequest(reward_contract_digest=DIGEST, page_size=3, page_token=token),
            metadata=TRAINER,
        )
        assert len(page.receipts) <= 3
        seen.extend(r.episode_id for r in page.receipts)
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == 8 == len(set(seen))
    # Ordered by policy update.
    assert seen[:6] == [f"episode.{i:04d}" for i in range(6)]

    async def episodes(**filters: object) -> list[str]:
        answer = await stub.ListReceipts(pb.ListReceiptsRequest(**filters), metadata=TRAINER)  # type: ignore[arg-type]
        return [r.episode_id for r in answer.receipts]

    assert await episodes(reward_outcome=WRONG) == ["episode.0100"]
    assert len(await episodes(certified=True)) == 6
    assert await episodes(certified=False) == ["episode.0100", "episode.0101"]
    assert await episodes(
        min_policy_update=ISSUED_AT_UPDATE + 2, max_policy_update=ISSUED_AT_UPDATE + 3
    ) == ["episode.0002", "episode.0003"]
    # Privacy-safe: the listed receipt is the signed one, and it carries no evidence.
    answer = await stub.ListReceipts(pb.ListReceiptsRequest(page_size=1), metadata=TRAINER)
    assert answer.receipts[0].evidence_digest.startswith("sha256:")
    code, _, _, _ = await wire_error(
        control,
        "ListReceipts",
        pb.ListReceiptsRequest(min_policy_update=5, max_policy_update=4),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    # A page token is bound to its listing's filters.
    first = await stub.ListReceipts(pb.ListReceiptsRequest(page_size=1), metadata=TRAINER)
    code, _, _, message = await wire_error(
        control,
        "ListReceipts",
        pb.ListReceiptsRequest(reward_outcome=WRONG, page_token=first.next_page_token),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "other filters" in message


async def test_receipt_summary_counts_outcomes_and_shares(control: ControlStack) -> None:
    await seed_receipts(control)
    summary = await control.stub().GetReceiptSummary(
        pb.GetReceiptSummaryRequest(reward_contract_digest=DIGEST), metadata=TRAINER
    )
    assert summary.reward_contract_digest == DIGEST
    assert summary.total == 8
    assert {c.reward_outcome: c.count for c in summary.counts} == {
        VERIFIED: 6,
        WRONG: 1,
        FAILED: 1,
    }
    assert summary.certified_share == pytest.approx(6 / 8)
    assert summary.unscored_share == pytest.approx(1 / 8)


async def test_receipt_summary_of_an_unknown_contract_is_not_found(control: ControlStack) -> None:
    code, reason, _, _ = await wire_error(
        control,
        "GetReceiptSummary",
        pb.GetReceiptSummaryRequest(reward_contract_digest="sha256:" + "2" * 64),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    code, _, _, _ = await wire_error(
        control, "GetReceiptSummary", pb.GetReceiptSummaryRequest(), metadata=TRAINER
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# --- server conventions ---


async def test_reflection_lists_the_service_when_enabled(store_url: str) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stack = await start_control(store_url, reflection=True)
    channel = grpc.aio.insecure_channel(stack.target)
    try:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        answer = await call.read()
        names = {s.name for s in answer.list_services_response.service}
        assert SERVICE in names
        call.cancel()
    finally:
        await channel.close()
        await stop_control(stack)


async def test_stop_ends_open_watch_streams(store_url: str) -> None:
    stack = await start_control(store_url)
    channel = grpc.aio.insecure_channel(stack.target)
    try:
        stream = ControlPlaneServiceStub(channel).WatchRevocations(
            pb.WatchRevocationsRequest(), metadata=TRAINER, timeout=30
        )
        await asyncio.wait_for(stream.read(), 10)
        started = time.monotonic()
        # A generous grace: if the stream did not end by itself, stop() would wait it out.
        await stack.running.stop(grace=5)
        assert time.monotonic() - started < 4
        assert await asyncio.wait_for(stream.read(), 5) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
    finally:
        await channel.close()
        stack.store.close()
