"""The typed ``RewardIntegrityService`` clients, sync and asyncio, against a real control plane on
port 0: every listing read across pages, refusals mapped to rewardseal errors, audits followed
to their decision, and the retry rule (docs/spec.md §12)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from support.control import ADMIN_TOKEN, CLIENT_TOKEN, ControlStack, start_control, stop_control
from support.integrity_builders import CONTRACT_A
from support.integrity_specs import capture, spec

from rewardseal.core.errors import (
    DecisionSuperseded,
    IntegritySpecInvalid,
    NotFound,
    PermissionDenied,
    ReviewRefused,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from rewardseal.core.integrity import BUILTIN_PROFILES, BUILTIN_PROTOCOLS, parse_reward_system
from rewardseal.core.integrity.messages import spec_struct, struct_document
from rewardseal.rpc.integrity_client import (
    AsyncIntegrityClient,
    IntegrityClient,
    RewardSystemQuery,
    SampleQuery,
)
from rewardseal.rpc.integrity_protocol import IntegrityProtocol
from rewardseal.rpc.tls import ClientTls
from rewardseal.v1 import integrity_pb2 as ipb

DONE = ipb.AuditState.AUDIT_STATE_DONE
CONTINUE = ipb.ReviewAction.REVIEW_ACTION_CONTINUE
FORK = ipb.ReviewAction.REVIEW_ACTION_FORK


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    yield stack
    await stop_control(stack)


def admin(stack: ControlStack, **settings: object) -> AsyncIntegrityClient:
    return AsyncIntegrityClient(stack.target, token=ADMIN_TOKEN, timeout=20, **settings)  # type: ignore[arg-type]


def trainer(stack: ControlStack, **settings: object) -> AsyncIntegrityClient:
    return AsyncIntegrityClient(stack.target, token=CLIENT_TOKEN, timeout=20, **settings)  # type: ignore[arg-type]


def three_specs() -> list[dict[str, object]]:
    """Three distinct valid specs (thresholds differ), the last with a correlated sentinel."""
    return [spec(threshold=0.4), spec(threshold=0.6), spec(correlated=True)]


async def test_async_listings_read_every_page(control: ControlStack) -> None:
    async with admin(control) as client:
        for document in three_specs():
            assert (await client.create_reward_system(document)).created
        # Three built-in protocols and profiles, one per page: every page is read.
        one_per_page = await client.list_retention_protocols(page_size=1)
        assert [p.name for p in one_per_page] == [
            p.name for p in await client.list_retention_protocols(page_size=500)
        ]
        assert {p.name for p in one_per_page} == set(BUILTIN_PROTOCOLS)
        profiles = await client.list_integrity_profiles(page_size=2)
        assert {p.name for p in profiles} == set(BUILTIN_PROFILES)
        revisions = await client.list_reward_systems(page_size=2)
        expected = {parse_reward_system(d).revision_id for d in three_specs()}
        assert {r.revision_id for r in revisions} == expected
        correlated = await client.list_reward_systems(
            RewardSystemQuery(primary_sentinel_independent=False), page_size=1
        )
        assert [r.revision_id for r in correlated] == [
            parse_reward_system(spec(correlated=True)).revision_id
        ]
        assert list(correlated[0].correlation_reasons) == ["shared_implementation_fingerprint"]
        naming_a = await client.list_reward_systems(
            RewardSystemQuery(contract_digest=CONTRACT_A), page_size=1
        )
        assert len(naming_a) == 2
    async with admin(control, max_pages=2) as bounded:
        # A listing that does not end stops after max_pages with what was read.
        assert len(await bounded.list_retention_protocols(page_size=1)) == 2


async def test_sync_client_reads_pages_and_maps_refusals(control: ControlStack) -> None:
    def sync() -> None:
        with IntegrityClient(control.target, token=ADMIN_TOKEN, timeout=20) as client:
            created = client.create_reward_system(spec())
            assert created.created
            again = client.create_reward_system(spec())
            assert (again.created, again.revision.revision_id) == (
                False,
                created.revision.revision_id,
            )
            stored = struct_document(client.get_reward_system(created.revision.revision_id).content)
            assert parse_reward_system(stored).revision_id == created.revision.revision_id
            assert [p.name for p in client.list_retention_protocols(page_size=1)] == [
                p.name for p in client.list_retention_protocols()
            ]
            assert client.get_integrity_profile("strict_integrity").warn_on_interval
            assert client.get_retention_protocol("broad_512").core_size == 384
            validated = client.validate_reward_system(spec(threshold=2.0))
            assert list(validated.blockers) == ["threshold_outside_mapped_range"]
            with pytest.raises(IntegritySpecInvalid) as refused:
                client.create_reward_system(spec(threshold=2.0))
            assert "threshold_outside_mapped_range" in refused.value.metadata["blockers"]
            with pytest.raises(NotFound):
                client.get_reward_system("sha256:" + "0" * 64)
            with pytest.raises(NotFound):
                client.get_audit("no-such-audit")
        with IntegrityClient(control.target, token=CLIENT_TOKEN, timeout=20) as reader:
            with pytest.raises(PermissionDenied):
                reader.create_reward_system(spec(threshold=0.7))
            assert len(reader.list_reward_systems()) == 1
        stranger = IntegrityClient(control.target, token="nope", timeout=20)
        with stranger, pytest.raises(Unauthenticated):
            stranger.list_integrity_profiles()

    await asyncio.to_thread(sync)


async def test_audit_followed_samples_paged_and_reviews(control: ControlStack) -> None:
    async with admin(control) as client:
        system_id = (await client.create_reward_system(spec())).revision.revision_id
        resolution = await client.resolve_binding(
            system_id, "exhaustive", "human_aligned_integrity"
        )
        assert resolution.gating_eligible
    async with trainer(control) as capturing:
        shard = await capture(
            capturing, system_id, run_id="grpo-run-0001", boundary=10, records=40, inverted=True
        )
        assert (await capturing.verify_signal_shard(shard.shard_id)).shard_id == shard.shard_id
        shards = await capturing.list_signal_shards("grpo-run-0001", page_size=1)
        assert [s.shard_id for s in shards] == [shard.shard_id]
        queued = await capturing.start_audit(shard.shard_id, "human_aligned_integrity")
        assert queued.audit_id
        settled = await capturing.wait_for_audit(queued.audit_id, deadline=60)
        assert settled.state == DONE
        assert settled.decision.outcome == ipb.DecisionOutcome.DECISION_OUTCOME_FAIL
        everything = await capturing.list_audit_samples(queued.audit_id, page_size=7)
        assert [s.position for s in everything] == list(range(40))
        hacks = await capturing.list_audit_samples(
            queued.audit_id,
            SampleQuery(outcome=ipb.SampleOutcome.SAMPLE_OUTCOME_OPTIMIZER_ONLY),
            page_size=3,
        )
        assert len(hacks) == 20
        metrics = await capturing.audit_metrics(queued.audit_id)
        assert metrics.computed
        assert metrics.records == 40
        with pytest.raises(PermissionDenied):
            await capturing.review_decision(queued.audit_id, CONTINUE, reason="mine")
    async with admin(control) as reviewer:
        with pytest.raises(ReviewRefused):
            await reviewer.review_decision(queued.audit_id, FORK, reason="fork it")
        with pytest.raises(ReviewRefused):
            await reviewer.review_decision(queued.audit_id, CONTINUE, reason="")
        entry = await reviewer.review_decision(
            queued.audit_id, CONTINUE, reason="reviewed the samples", supersedes=0
        )
        assert (entry.sequence, entry.action) == (1, ipb.RunAction.RUN_ACTION_CONTINUE)
        with pytest.raises(DecisionSuperseded):
            await reviewer.review_decision(queued.audit_id, CONTINUE, reason="x", supersedes=0)
        history = await reviewer.decision_history(queued.audit_id)
        assert [e.sequence for e in history] == [0, 1]
        bundle = await reviewer.verify_audit(queued.audit_id)
        assert bundle.shard_ids == [shard.shard_id]


async def test_local_refusals() -> None:
    with pytest.raises(ValidationError, match="bearer token"):
        IntegrityClient("127.0.0.1:1", token="")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    with pytest.raises(ValidationError, match="not both"):
        AsyncIntegrityClient("127.0.0.1:1", token="t", channel=channel, tls=ClientTls())
    await channel.close()
    with pytest.raises(ValidationError, match="not a JSON object"):
        spec_struct({"optimizer": {1, 2}})


async def test_unreachable_control_is_unavailable_after_retries() -> None:
    async with AsyncIntegrityClient("127.0.0.1:1", token="t", timeout=2, retries=1) as client:
        with pytest.raises(Unavailable):
            await client.list_integrity_profiles()


def test_retry_only_idempotent_calls_on_unavailable() -> None:
    protocol = IntegrityProtocol("t", 1.0, 2, 0, None, None, None)

    def failed(code: grpc.StatusCode) -> grpc.RpcError:
        return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata())

    down = failed(grpc.StatusCode.UNAVAILABLE)
    for rpc in ("GetAudit", "ListAuditSamples", "CreateRewardSystem", "SealSignalShard"):
        assert protocol.retry_delay(rpc, down, 0) is not None, rpc
    assert protocol.retry_delay("GetAudit", down, 2) is None  # retries spent
    for rpc in ("AppendSignalRows", "StartAudit", "RetryAudit", "ReviewDecision", "CancelAudit"):
        assert protocol.retry_delay(rpc, down, 0) is None, rpc
    assert protocol.retry_delay("GetAudit", failed(grpc.StatusCode.NOT_FOUND), 0) is None
    # Every idempotent name is an RPC of the service (a typo would never retry).
    methods = set(ipb.DESCRIPTOR.services_by_name["RewardIntegrityService"].methods_by_name)
    assert methods >= IntegrityProtocol.IDEMPOTENT
