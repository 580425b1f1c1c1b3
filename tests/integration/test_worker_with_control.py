"""The worker and the control plane together (R-C-4, R-C-5), both real servers on port 0.

The worker registers its contract and key, scores under the organization's certificate,
forwards privacy-safe receipts through its durable outbox (exactly once, even when control is
down while it scores) and follows the signed revocation list: a revocation, a rolled-back list
or no list at all each stop receipts from being certified.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from support.mockmed_episodes import descriptor, write_triage
from support.worker_stack import RunningStack, stop_stack

from rewardseal.client import AsyncWorkerClient
from rewardseal.scoring import revocation_unknown_sentence
from rewardseal.signing import TrustSet
from rewardseal.v1 import control_service_pb2 as cpb
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2_grpc import ControlPlaneServiceStub
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    CertificateState,
    RewardOutcome,
)
from rewardseal_control.app import ControlApp, start_control
from rewardseal_control.settings import resolve_settings as control_settings
from rewardseal_worker.app import start_worker
from rewardseal_worker.calibration import summary_from_json
from rewardseal_worker.settings import resolve_settings as worker_settings

ADMIN_TOKEN = "admin-token-" + "a" * 32
CLIENT_TOKEN = "client-token-" + "c" * 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_control_plane(tmp_path: Path, port: int = 0) -> ControlApp:
    settings = control_settings(
        data_dir=tmp_path / "control",
        port=port,
        env={
            "REWARDSEAL_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
            "REWARDSEAL_CONTROL_TOKEN": CLIENT_TOKEN,
        },
    )
    return await start_control(settings)


async def start_linked_worker(data_dir: Path, target: str) -> RunningStack:
    settings = worker_settings(
        data_dir=data_dir,
        port=0,
        control_target=target,
        env={
            "REWARDSEAL_WORKER_CONTROL_TOKEN": CLIENT_TOKEN,
            "REWARDSEAL_WORKER_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
        },
    )
    app = await start_worker(dataclasses.replace(settings))
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([app.key.public_key]),
        timeout=20.0,
    )
    return RunningStack(app=app, client=client, data_dir=data_dir)


def control_stub(control: ControlApp) -> tuple[grpc.aio.Channel, ControlPlaneServiceStub]:
    channel = grpc.aio.insecure_channel(control.target)
    return channel, ControlPlaneServiceStub(channel)


ADMIN = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
CLIENT = (("authorization", f"Bearer {CLIENT_TOKEN}"),)


async def issue_certificate(control: ControlApp, data_dir: Path, digest: str) -> str:
    """Register the MockMed contract and issue an organization certificate from its calibration."""
    channel, stub = control_stub(control)
    bundle = data_dir / "contracts" / "mockmed"
    try:
        contract = json_format.Parse((bundle / "contract.json").read_text(), RewardContract())
        await stub.RegisterContract(
            cpb.RegisterContractRequest(contract=contract, reward_contract_digest=digest),
            metadata=CLIENT,
        )
        summary = summary_from_json(json.loads((bundle / "calibration.json").read_text()))
        answer = await stub.IssueCertificate(
            cpb.IssueCertificateRequest(
                reward_contract_digest=digest,
                calibration=summary,
                calibration_scope=CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
                issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
                issuer_key_id=control.key.key_id,
                issued_at_policy_update=0,
                reason="integration test",
            ),
            metadata=ADMIN,
        )
    finally:
        await channel.close()
    return str(answer.certificate.certificate_id)


async def control_receipts(control: ControlApp, digest: str) -> list[str]:
    channel, stub = control_stub(control)
    try:
        answer = await stub.ListReceipts(
            cpb.ListReceiptsRequest(reward_contract_digest=digest, page_size=500), metadata=CLIENT
        )
    finally:
        await channel.close()
    return [r.receipt_id for r in answer.receipts]


async def eventually(predicate, *, within: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it holds; fail after ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while not await predicate():  # noqa: ASYNC110 - polls state in other processes
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"condition not met within {within}s")


async def score_honest(stack: RunningStack, index: int):  # type: ignore[no-untyped-def]
    patient = f"patient-linked-{index:04d}"
    episode_id = f"episode.linked.{index:04d}"
    await stack.client.begin(episode_id, stack.digest, {"patient_id": patient})
    write_triage(stack.database, patient)
    return await stack.client.score(descriptor(stack.digest, episode_id))


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlApp]:
    app = await start_control_plane(tmp_path)
    yield app
    await app.stop()


async def test_receipts_are_certified_forwarded_and_revocation_stops_certification(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target)
    try:
        await stop_stack(stack)
        # Issue the organization's certificate, then restart so the worker adopts it.
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        stack = await start_linked_worker(data_dir, control.target)
        link = stack.app.control
        assert link is not None
        await asyncio.wait_for(link.registered.wait(), 20)
        await eventually(lambda: _fresh(link, certificate_id))
        first = await score_honest(stack, 1)
        assert first.receipt.certificate_id == certificate_id
        assert first.receipt.certified, first.receipt.certification_refusals
        assert first.receipt.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC

        async def forwarded() -> bool:
            return first.receipt.receipt_id in await control_receipts(control, stack.digest)

        await eventually(forwarded)

        channel, stub = control_stub(control)
        try:
            await stub.RevokeCertificate(
                cpb.RevokeCertificateRequest(certificate_id=certificate_id, reason="key leak"),
                metadata=ADMIN,
            )
        finally:
            await channel.close()

        async def revoked() -> bool:
            return link.revocation(certificate_id).value == "revoked"

        await eventually(revoked)
        second = await score_honest(stack, 2)
        assert second.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
        assert second.scalar == 1.0
        assert second.receipt.certified is False
        assert second.receipt.certificate_state == CertificateState.CERTIFICATE_STATE_REVOKED
        assert f"certificate {certificate_id} is revoked" in second.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def _fresh(link, certificate_id: str) -> bool:  # type: ignore[no-untyped-def]
    return link.revocation(certificate_id).value == "not_revoked"


async def test_rolled_back_revocation_list_makes_certification_unknown(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target)
    try:
        await stop_stack(stack)
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        stack = await start_linked_worker(data_dir, control.target)
        link = stack.app.control
        assert link is not None
        await eventually(lambda: _fresh(link, certificate_id))
        # A newer list exists once control re-signs; then feed the worker the older one.
        old = control.store.revocation_head()
        assert old is not None
        head = await asyncio.to_thread(
            control.store.publish_revocation_list, sign=control.servicer._sign_list
        )
        await control.servicer._advance(head)

        async def newer() -> bool:
            follower = link._follower
            return follower is not None and follower.version > old.version

        await eventually(newer)
        link._accept(old.envelope)
        got = await score_honest(stack, 3)
        assert got.receipt.certified is False
        assert revocation_unknown_sentence(certificate_id) in got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_control_down_scoring_unaffected_then_outbox_drains_exactly_once(
    tmp_path: Path, data_dir: Path
) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    stack = await start_linked_worker(data_dir, target)
    control: ControlApp | None = None
    try:
        receipts = [await score_honest(stack, 10 + i) for i in range(5)]
        # Scored and answered while control is unreachable; not certified (no fresh list).
        assert all(
            r.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED for r in receipts
        )
        assert all(not r.receipt.certified for r in receipts)
        assert stack.app.store.outbox_size() == 5
        control = await start_control_plane(tmp_path, port=port)

        async def drained() -> bool:
            return stack.app.store.outbox_size() == 0

        await eventually(drained, within=60)
        stored = await control_receipts(control, stack.digest)
        assert sorted(stored) == sorted(r.receipt.receipt_id for r in receipts)
        # Forwarding again (a resend after a crash) stores nothing twice.
        assert len(stored) == len(set(stored))
    finally:
        await stop_stack(stack)
        if control is not None:
            await control.stop()
