"""``rewardseal.rpc.control_client`` against a real control plane on port 0: every method, sync and
asyncio; listings read through every page; refusals arrive as the rewardseal error classes;
retries only for idempotent calls answered UNAVAILABLE; TLS and mutual TLS."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from support.builders import ISSUED_AT_UPDATE, make_facts
from support.control import (
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    WORKER_TOKEN,
    ControlStack,
    calibration_summary,
    start_control,
    stop_control,
)
from support.linked_stack import CLIENT_TOKEN as LINKED_CLIENT_TOKEN
from support.linked_stack import start_control_plane
from support.tls_certs import TlsWorld

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import (
    NotFound,
    PermissionDenied,
    ReceiptMismatch,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.revocation import open_revocation_list
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.control_client import (
    AsyncControlClient,
    ControlClient,
    ReceiptQuery,
    issue_certificate_request,
)
from rewardseal.rpc.control_protocol import ControlProtocol
from rewardseal.rpc.tls import ClientTls
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole, RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
WORKER_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
ORGANIZATION_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
CERTIFICATES = 57
"""More than one page at PAGE (and than one of control's default 50-item pages)."""
PAGE = 10


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.db'}")
    yield stack
    await stop_control(stack)


def admin(stack: ControlStack, **settings: object) -> AsyncControlClient:
    return AsyncControlClient(stack.target, token=ADMIN_TOKEN, timeout=20, **settings)  # type: ignore[arg-type]


def sealed(episode: str, key: SigningKey, outcome: RewardOutcome.ValueType) -> SignedEnvelope:
    receipt = build_receipt(
        make_facts(outcome, episode_id=episode, policy_update=ISSUED_AT_UPDATE),
        contract=CONTRACT,
        certificate=None,
        issuer_key_id=key.key_id,
    )
    return seal_receipt(receipt, key)


async def register_worker(client: AsyncControlClient, stack: ControlStack) -> SigningKey:
    key = SigningKey.generate()
    not_before = stack.clock.now - timedelta(days=1)
    entry = IssuerKey(public_key=key.public_key, role=WORKER_ROLE, display_name="worker 1")
    entry.not_before.FromDatetime(not_before)
    registered = await client.register_issuer_key(entry, reason="worker enrolled")
    assert registered.key_id == key.key_id
    return key


async def issue_many(client: AsyncControlClient, count: int) -> list[str]:
    summary = calibration_summary(DIGEST)
    issued = []
    for n in range(count):
        answer = await client.issue_certificate(
            issue_certificate_request(
                DIGEST,
                summary,
                issued_at_policy_update=ISSUED_AT_UPDATE,
                certificate_id=f"cert.page.{n:03d}",
                reason="paging",
            )
        )
        issued.append(answer.certificate.certificate_id)
    return issued


async def test_every_async_method(control: ControlStack) -> None:
    async with admin(control, page_size=PAGE) as client:
        registered = await client.register_contract(CONTRACT, DIGEST)
        assert (registered.reward_contract_digest, registered.created) == (DIGEST, True)
        assert not (await client.register_contract(CONTRACT, DIGEST)).created
        stored = await client.get_contract(DIGEST)
        assert stored.reward_contract_digest == DIGEST
        assert contract_digest(stored.contract) == DIGEST
        assert [c.reward_contract_digest for c in await client.list_contracts()] == [DIGEST]

        worker = await register_worker(client, control)
        workers = await client.list_issuer_keys(role=WORKER_ROLE)
        assert [k.key_id for k in workers] == [worker.key_id]
        organization = await client.list_issuer_keys(role=ORGANIZATION_ROLE)
        assert [k.key_id for k in organization] == [control.key.key_id]
        every = {k.key_id async for k in client.issuer_keys(page_size=1)}
        assert every == {worker.key_id, control.key.key_id}

        issued = await issue_many(client, CERTIFICATES)
        listed = await client.list_certificates(reward_contract_digest=DIGEST)
        assert [c.certificate_id for c in listed] == issued
        one = await client.get_certificate(issued[0])
        assert (one.certificate.certificate_id, one.revoked) == (issued[0], False)

        revoked = await client.revoke_certificate(issued[0], reason="key leak")
        assert revoked.version >= 1
        assert (await client.get_certificate(issued[0])).revoked
        current = await client.get_revocation_list()
        held = open_revocation_list(current, control.trust)
        assert held.version == revoked.version
        assert [e.certificate_id for e in held.entries] == [issued[0]]
        async with contextlib.aclosing(client.watch_revocations(0)) as stream:
            pushed = await asyncio.wait_for(anext(stream), 10)
        assert open_revocation_list(pushed, control.trust).version == revoked.version

        envelopes = [
            sealed(f"episode.{n:04d}", worker, VERIFIED if n % 3 else WRONG) for n in range(23)
        ]
        # Registered by the admin before its contract was: admitted for it now (R-C-10).
        approved = await client.approve_issuer_key(worker.key_id, [DIGEST], reason="rack 3")
        assert list(approved.admission.reward_contract_digests) == [DIGEST]
        enrollment = await client.create_enrollment([DIGEST], ttl_seconds=60)
        assert enrollment.enrollment_credential.startswith("rse-enroll.")
        results = await client.record_receipts(envelopes)
        assert all(r.recorded and not r.duplicate for r in results)
        again = await client.record_receipts(envelopes[:2])
        assert all(r.recorded and r.duplicate for r in again)
        stored = await client.list_receipts(ReceiptQuery(reward_contract_digest=DIGEST))
        assert len(stored) == 23
        wrong = await client.list_receipts(
            ReceiptQuery(reward_contract_digest=DIGEST, reward_outcome=WRONG), page_size=2
        )
        assert len(wrong) == 8
        assert {r.reward_outcome for r in wrong} == {WRONG}
        assert await client.list_receipts(ReceiptQuery(certified=True)) == []
        summary = await client.receipt_summary(DIGEST)
        assert summary.total == 23

        retired = await client.retire_issuer_key(worker.key_id, reason="decommissioned")
        assert retired.retired


async def test_every_sync_method(control: ControlStack) -> None:
    """The blocking client, in a thread (the server runs on this event loop)."""
    async with admin(control) as setup:
        worker = await register_worker(setup, control)

    def session() -> None:
        with ControlClient(control.target, token=ADMIN_TOKEN, timeout=20, page_size=PAGE) as client:
            assert client.register_contract(CONTRACT, DIGEST).created
            assert client.get_contract(DIGEST).reward_contract_digest == DIGEST
            assert [c.reward_contract_digest for c in client.contracts()] == [DIGEST]
            assert [k.key_id for k in client.issuer_keys(role=WORKER_ROLE)] == [worker.key_id]
            assert len(client.list_issuer_keys(page_size=1)) == 2
            summary = calibration_summary(DIGEST)
            issued = [
                client.issue_certificate(
                    issue_certificate_request(
                        DIGEST,
                        summary,
                        issued_at_policy_update=ISSUED_AT_UPDATE,
                        certificate_id=f"cert.sync.{n:03d}",
                    )
                ).certificate.certificate_id
                for n in range(CERTIFICATES)
            ]
            assert [c.certificate_id for c in client.certificates()] == issued
            assert client.list_certificates(reward_contract_digest="sha256:" + "0" * 64) == []
            assert client.get_certificate(issued[-1]).certificate_digest
            version = client.revoke_certificate(issued[-1], reason="x").version
            assert open_revocation_list(client.get_revocation_list(), control.trust).version == (
                version
            )
            stream = client.watch_revocations(0)
            assert open_revocation_list(next(stream), control.trust).version == version
            stream.close()
            envelopes = [sealed(f"episode.sync.{n}", worker, VERIFIED) for n in range(12)]
            assert not any(r.recorded for r in client.record_receipts(envelopes))  # not admitted
            assert client.approve_issuer_key(worker.key_id, [DIGEST]).admission.admitted
            assert client.create_enrollment([DIGEST]).enrollment_id
            assert all(r.recorded for r in client.record_receipts(envelopes))
            unbound = client.unbind_issuer_key(worker.key_id, [DIGEST], reason="moved")
            assert list(unbound.admission.reward_contract_digests) == []
            assert len(client.list_receipts(page_size=5)) == 12
            assert [
                r.receipt_id for r in client.receipts(ReceiptQuery(min_policy_update=10**9))
            ] == []
            assert client.receipt_summary(DIGEST).total == 12
            assert client.retire_issuer_key(worker.key_id, reason="done").retired

    await asyncio.to_thread(session)


async def test_listings_follow_every_page(control: ControlStack) -> None:
    """57 certificates and 5 contracts over pages of 10 and 2: every item once, in order."""
    async with admin(control) as client:
        await client.register_contract(CONTRACT, DIGEST)
        digests = [DIGEST]
        for index in range(4):
            variant = mockmed_contract()
            variant.contract_id = f"mockmed.variant.{index:04d}"
            control.clock.advance(timedelta(seconds=1))
            digests.append(
                (
                    await client.register_contract(variant, contract_digest(variant))
                ).reward_contract_digest
            )
        issued = await issue_many(client, CERTIFICATES)
        # Control's default page is 50: the newest certificates are on the second page.
        first = await control.stub().ListCertificates(
            pb.ListCertificatesRequest(reward_contract_digest=DIGEST),
            metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),),
        )
        assert first.next_page_token
        assert len(first.certificates) < CERTIFICATES
        assert [c.certificate_id for c in await client.list_certificates()] == issued
        paged = [c.certificate_id async for c in client.certificates(page_size=PAGE)]
        assert paged == issued
        contracts = await client.list_contracts(page_size=2)
        assert [c.reward_contract_digest for c in contracts] == digests
    # max_pages stops a listing that would not end, keeping what was read.
    async with admin(control, page_size=PAGE, max_pages=2) as bounded:
        assert len(await bounded.list_certificates()) == 2 * PAGE


async def test_refusals_arrive_as_rewardseal_errors(control: ControlStack) -> None:
    async with AsyncControlClient(control.target, token="not-a-token", timeout=20) as stranger:
        with pytest.raises(Unauthenticated):
            await stranger.list_contracts()
    async with AsyncControlClient(control.target, token=WORKER_TOKEN, timeout=20) as worker:
        with pytest.raises(PermissionDenied):
            await worker.revoke_certificate("cert.none", reason="x")
        with pytest.raises(Unauthenticated):
            async with contextlib.aclosing(
                AsyncControlClient(control.target, token="bad", timeout=20).watch_revocations()
            ) as stream:
                await anext(stream)
    async with admin(control) as client:
        with pytest.raises(NotFound):
            await client.get_contract("sha256:" + "0" * 64)
        with pytest.raises(NotFound):
            await client.get_certificate("cert.none")

    def sync_refusals() -> None:
        with ControlClient(control.target, token=CLIENT_TOKEN, timeout=20) as trainer:
            with pytest.raises(PermissionDenied):
                trainer.retire_issuer_key(control.key.key_id, reason="x")
            with pytest.raises(NotFound):
                trainer.get_contract("sha256:" + "0" * 64)
        stranger = ControlClient(control.target, token="nope", timeout=20)
        with stranger, pytest.raises(Unauthenticated):
            list(stranger.certificates())

    await asyncio.to_thread(sync_refusals)


async def test_local_refusals() -> None:
    with pytest.raises(ValidationError, match="bearer token"):
        ControlClient("127.0.0.1:1", token="")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    with pytest.raises(ValidationError, match="not both"):
        AsyncControlClient("127.0.0.1:1", token="t", channel=channel, tls=ClientTls())
    await channel.close()


def test_retry_only_idempotent_calls_on_unavailable() -> None:
    protocol = ControlProtocol("t", 1.0, 2, 0, None, None, None)

    class Failed(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

    down = Failed(grpc.StatusCode.UNAVAILABLE)
    assert protocol.retry_delay("ListCertificates", down, 0) is not None
    assert protocol.retry_delay("RecordReceipts", down, 1) is not None
    assert protocol.retry_delay("ListCertificates", down, 2) is None  # retries spent
    for rpc in (
        "IssueCertificate",
        "RevokeCertificate",
        "RegisterIssuerKey",
        "RetireIssuerKey",
        "ApproveIssuerKey",
        "UnbindIssuerKey",
        "CreateEnrollment",
    ):
        assert protocol.retry_delay(rpc, down, 0) is None
    assert protocol.retry_delay("GetContract", Failed(grpc.StatusCode.NOT_FOUND), 0) is None
    answer = pb.RecordReceiptsResponse(results=[pb.RecordReceiptResult(recorded=True)])
    with pytest.raises(ReceiptMismatch):
        protocol.recorded(answer, pb.RecordReceiptsRequest())


async def test_unreachable_control_is_unavailable_after_retries() -> None:
    async with AsyncControlClient("127.0.0.1:1", token="t", timeout=2, retries=1) as client:
        with pytest.raises(Unavailable):
            await client.list_contracts()


async def test_mutual_tls(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    control = await start_control_plane(
        tmp_path,
        tls_cert=world.server.cert,
        tls_key=world.server.key,
        tls_client_ca=world.ca.cert,
    )
    try:
        async with AsyncControlClient(
            control.target, token=LINKED_CLIENT_TOKEN, timeout=20, tls=world.client_tls()
        ) as client:
            assert (await client.register_contract(CONTRACT, DIGEST)).created
        with ControlClient(
            control.target, token=LINKED_CLIENT_TOKEN, timeout=20, tls=world.client_tls()
        ) as sync:
            listed = await asyncio.to_thread(sync.list_contracts)
        assert [c.reward_contract_digest for c in listed] == [DIGEST]
        # No client certificate, or plaintext: refused, as a rewardseal error.
        for tls in (world.client_tls(with_certificate=False), None):
            async with AsyncControlClient(
                control.target, token=LINKED_CLIENT_TOKEN, timeout=5, retries=0, tls=tls
            ) as refused:
                with pytest.raises(Unavailable):
                    await refused.list_contracts()
    finally:
        await control.stop()
