"""A real control plane and a seeded worker joined to it (both on port 0), for the control-link
tests: tokens per role, the organization key the worker pins, issuing and revoking over gRPC."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from rewardseal.core.contract import contract_digest
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.control_client import (
    AsyncControlClient,
    ReceiptQuery,
    issue_certificate_request,
)
from rewardseal.rpc.tls import ClientTls, aio_channel
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2_grpc import ControlPlaneServiceStub
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer
from rewardseal_control.app import ControlApp, start_control
from rewardseal_control.settings import KEY_FILE as CONTROL_KEY_FILE
from rewardseal_control.settings import resolve_settings as control_settings
from rewardseal_kit.mockmed import mockmed_contract
from rewardseal_worker.app import start_worker
from rewardseal_worker.calibration import summary_from_json
from rewardseal_worker.control_link import ControlLink
from rewardseal_worker.settings import ENROLLMENT_ENV
from rewardseal_worker.settings import resolve_settings as worker_settings
from support.mockmed_episodes import descriptor, write_triage
from support.worker_stack import RunningStack

ADMIN_TOKEN = "admin-token-" + "a" * 32
CLIENT_TOKEN = "client-token-" + "c" * 32
WORKER_TOKEN = "worker-token-" + "w" * 32
CONTROL_ENV = {
    "REWARDSEAL_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
    "REWARDSEAL_CONTROL_TOKEN": CLIENT_TOKEN,
    "REWARDSEAL_CONTROL_WORKER_TOKEN": WORKER_TOKEN,
}
POLL_SECONDS = 0.2
"""The certificate poll interval the linked workers use in tests (the default is 30 s)."""


def organization_key(tmp_path: Path) -> SigningKey:
    """Control's organization key under ``tmp_path`` (made now if control has not started yet,
    so a worker can pin it before control runs)."""
    return SigningKey.load_or_create(tmp_path / "control" / CONTROL_KEY_FILE)


async def start_control_plane(
    tmp_path: Path, port: int = 0, *, directory: str = "control", **flags: Any
) -> ControlApp:
    """Control over SQLite in ``tmp_path/<directory>`` with the three test tokens; ``flags`` go
    to its settings (``tls_cert=``, ``revocation_ttl=``, ...)."""
    settings = control_settings(data_dir=tmp_path / directory, port=port, env=CONTROL_ENV, **flags)
    return await start_control(settings)


async def start_linked_worker(
    data_dir: Path,
    target: str,
    pinned: SigningKey | str,
    *,
    db_url: str | None = None,
    env: Mapping[str, str] | None = None,
    primary: bool = True,
    enroll: bool = True,
    tls: ClientTls | None = None,
    **flags: Any,
) -> RunningStack:
    """A seeded worker joined to control at ``target`` with the worker credential, pinning
    ``pinned`` (a key, or a --trust-org-key value), polling certificates every 0.2 s.
    ``primary=False``: one of the other processes of ``serve --processes N`` (follows
    certificates, neither registers nor forwards). ``enroll``: the admin makes a one-time
    enrollment credential for the seeded contract first (as the local stack does), so the
    worker's key is admitted when it registers (R-C-11); ``tls`` for that call."""
    value = pinned.public_key.hex() if isinstance(pinned, SigningKey) else pinned
    if enroll and primary and ENROLLMENT_ENV not in (env or {}):
        env = {**(env or {}), **(await enrollment(target, tls=tls))}
    settings = worker_settings(
        data_dir=data_dir,
        port=0,
        db_url=db_url,
        control_target=target,
        trust_org_keys=[value],
        env={
            "REWARDSEAL_WORKER_CONTROL_TOKEN": WORKER_TOKEN,
            "REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS": str(POLL_SECONDS),
            **(env or {}),
        },
        **flags,
    )
    app = await start_worker(settings, primary=primary)
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([app.key.public_key]),
        timeout=20.0,
    )
    return RunningStack(app=app, client=client, data_dir=data_dir)


SEEDED_DIGEST = contract_digest(mockmed_contract())
"""The digest of the contract a seeded worker serves by default (the tier-2 sql bundle)."""


async def enrollment(
    target: str,
    digests: Sequence[str] = (),
    *,
    tls: ClientTls | None = None,
    accept_bundle_certificate: bool = False,
) -> dict[str, str]:
    """A one-time enrollment credential made with the admin credential, as the worker's
    environment variable: for ``digests``, or (none given) for the contract the worker
    registers, whichever bundle it serves; ``accept_bundle_certificate``: it accepts the
    bundle certificate the worker registers with (control lists it, R-C-11)."""
    async with control_client(target, ADMIN_TOKEN, tls) as admin:
        answer = await admin.create_enrollment(
            digests,
            reason="integration test",
            any_contract=not digests,
            accept_bundle_certificate=accept_bundle_certificate,
        )
    return {ENROLLMENT_ENV: answer.enrollment_credential}


async def approve(
    control: ControlApp, stack: RunningStack, *, accept_bundle_certificate: bool = False
) -> Sequence[str]:
    """Wait for the worker to register, then admit its key for its contract as an admin does
    (``rewardseal-control keys approve [--accept-bundle-certificate]``); the bundle
    certificates the approval accepted."""
    await asyncio.wait_for(link_of(stack).registered.wait(), 60)
    async with control_client(control.target, ADMIN_TOKEN) as admin:
        answer = await admin.approve_issuer_key(
            stack.app.key.key_id,
            [stack.digest],
            reason="test",
            accept_bundle_certificate=accept_bundle_certificate,
        )
    return list(answer.accepted_certificate_ids)


def link_of(stack: RunningStack) -> ControlLink:
    """The worker's control link (the stack was started joined to control)."""
    link = stack.app.control
    assert link is not None
    return link


def control_stub(
    target: str, tls: ClientTls | None = None
) -> tuple[grpc.aio.Channel, ControlPlaneServiceStub]:
    """A raw stub, for tests that check what control says on the wire."""
    channel = aio_channel(target, tls)
    return channel, ControlPlaneServiceStub(channel)


def control_client(target: str, token: str, tls: ClientTls | None = None) -> AsyncControlClient:
    return AsyncControlClient(target, token=token, timeout=20.0, tls=tls)


async def register_contract(
    target: str, data_dir: Path, digest: str, tls: ClientTls | None = None
) -> None:
    """Register the seeded MockMed contract with control (as a trainer would)."""
    contract = json_format.Parse(
        (data_dir / "contracts" / "mockmed" / "contract.json").read_text(), RewardContract()
    )
    async with control_client(target, CLIENT_TOKEN, tls) as control:
        await control.register_contract(contract, digest)


async def issue_certificate(
    control: ControlApp,
    data_dir: Path,
    digest: str,
    *,
    issued_at_policy_update: int = 0,
    certificate_id: str = "",
    tls: ClientTls | None = None,
) -> str:
    """Register the MockMed contract and issue an organization certificate from its calibration
    (admin credential); the new certificate's id."""
    await register_contract(control.target, data_dir, digest, tls)
    bundle = data_dir / "contracts" / "mockmed"
    summary = summary_from_json(json.loads((bundle / "calibration.json").read_text()))
    async with control_client(control.target, ADMIN_TOKEN, tls) as admin:
        answer = await admin.issue_certificate(
            issue_certificate_request(
                digest,
                summary,
                calibration_scope=CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
                issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
                issuer_key_id=control.key.key_id,
                issued_at_policy_update=issued_at_policy_update,
                certificate_id=certificate_id,
                reason="integration test",
            )
        )
    return str(answer.certificate.certificate_id)


async def revoke(control: ControlApp, certificate_id: str, tls: ClientTls | None = None) -> int:
    """Revoke ``certificate_id`` at control; the new revocation list version."""
    async with control_client(control.target, ADMIN_TOKEN, tls) as admin:
        answer = await admin.revoke_certificate(certificate_id, reason="key leak")
    return int(answer.version)


async def revoke_every_certificate(
    control: ControlApp, *, contract: str = "", checker: str = "", tls: ClientTls | None = None
) -> int:
    """Revoke every certificate of a contract or checker configuration (R-C-13); the new
    revocation list version."""
    async with control_client(control.target, ADMIN_TOKEN, tls) as admin:
        answer = await admin.revoke_every_certificate(
            reason="checker found broken", contract=contract, checker=checker
        )
    return int(answer.version)


async def control_receipts(
    control: ControlApp, digest: str, tls: ClientTls | None = None
) -> list[str]:
    """The receipt ids control's index holds for ``digest`` (every page)."""
    async with control_client(control.target, CLIENT_TOKEN, tls) as trainer:
        receipts = await trainer.list_receipts(ReceiptQuery(reward_contract_digest=digest))
    return [r.receipt_id for r in receipts]


async def eventually(predicate: Callable[[], Awaitable[bool]], *, within: float = 20.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while not await predicate():  # noqa: ASYNC110 - polls state in other tasks
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"condition not met within {within}s")


def in_use(stack: RunningStack) -> str | None:
    """The id of the certificate the worker scores under now (None: no certificate)."""
    certificate = stack.app.scorer.certificate
    return certificate.certificate_id if certificate is not None else None


async def scoring_under(stack: RunningStack, certificate_id: str | None) -> None:
    """Wait until the worker scores under ``certificate_id``."""

    async def adopted() -> bool:
        return in_use(stack) == certificate_id

    await eventually(adopted)


async def polled_after(stack: RunningStack) -> None:
    """Wait for two more complete certificate polls (the first may have begun before now)."""
    link = link_of(stack)
    target = link.polls + 2

    async def done() -> bool:
        return link.polls >= target

    await eventually(done)


async def score_honest(stack: RunningStack, index: int, *, update: int = 0) -> VerifiedReceipt:
    """Begin, write the one Triage row the contract wants, score: a VERIFIED episode."""
    patient = f"patient-linked-{index:04d}"
    episode_id = f"episode.linked.{index:04d}"
    await stack.client.begin(episode_id, stack.digest, {"patient_id": patient})
    write_triage(stack.database, patient)
    return await stack.client.score(descriptor(stack.digest, episode_id, update=update))
