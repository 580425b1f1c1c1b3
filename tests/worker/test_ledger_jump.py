"""The policy-update ledger cannot be thrown forward by one call (issue 10).

One unscored descriptor at 2^53-1 used to raise a contract's ledger so far that every later
episode was policy_update_regressed and the certificate read EXPIRED: a denial of service by
any trainer token. Now a call may score at most ``max_policy_update_jump`` (default 10000)
above the ledger as it stood before the call; further is INVALID_ARGUMENT
``policy_update_jump`` with nothing stored. An empty ledger (the contract's first episode) has
no bound, but a first batch is bounded by its own first stored item.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from support.mockmed_episodes import descriptor
from worker.conftest import RunningStack, stop_stack
from worker.test_worker_contract import auth, raw_stub, wire_error

from rewardseal.core.certificates import MAX_POLICY_UPDATE
from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_worker.app import start_worker
from rewardseal_worker.settings import DEFAULT_MAX_POLICY_UPDATE_JUMP, resolve_settings
from rewardseal_worker.store import ReceiptToCommit, WorkerStore

JUMP = DEFAULT_MAX_POLICY_UPDATE_JUMP


def _descriptor(stack: RunningStack, number: int, update: int) -> EpisodeDescriptor:
    return descriptor(
        stack.digest,
        f"episode.jump.{number:04d}",
        update=update,
        oracle_identity={"patient_id": f"patient-jump-{number:04d}"},
    )


async def _score(stack: RunningStack, number: int, update: int) -> None:
    channel, stub = raw_stub(stack)
    try:
        await stub.ScoreEpisode(
            pb.ScoreEpisodeRequest(descriptor=_descriptor(stack, number, update)),
            metadata=auth(stack),
            timeout=20,
        )
    finally:
        await channel.close()


async def _refused(stack: RunningStack, number: int, update: int) -> tuple[object, str]:
    request = pb.ScoreEpisodeRequest(descriptor=_descriptor(stack, number, update))
    code, reason, _ = await wire_error(stack, "ScoreEpisode", request)
    return code, reason


def _highest(stack: RunningStack) -> int | None:
    return stack.app.store.highest_policy_update(stack.digest)


async def test_one_call_cannot_throw_the_ledger_to_the_end(stack: RunningStack) -> None:
    await _score(stack, 1, 0)
    before = await stack.client.health()
    refused = await _refused(stack, 2, MAX_POLICY_UPDATE)
    assert refused == (grpc.StatusCode.INVALID_ARGUMENT, "policy_update_jump")
    assert stack.app.store.receipt_by_episode("episode.jump.0002") is None
    assert _highest(stack) == 0
    # The attack changed nothing: the next honest episode scores, the certificate still reads
    # as it did.
    await _score(stack, 3, 1)
    after = await stack.client.health()
    assert after.certificate_state == before.certificate_state
    assert after.highest_policy_update == 1


async def test_the_bound_is_inclusive(stack: RunningStack) -> None:
    await _score(stack, 1, 10)
    assert await _refused(stack, 2, 10 + JUMP + 1) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "policy_update_jump",
    )
    await _score(stack, 3, 10 + JUMP)
    assert _highest(stack) == 10 + JUMP


async def test_the_first_episode_of_a_contract_may_start_anywhere(stack: RunningStack) -> None:
    """A trainer may resume at any step: an empty ledger has no bound."""
    assert _highest(stack) is None
    await _score(stack, 1, 5_000_000)
    assert _highest(stack) == 5_000_000


async def test_a_batch_cannot_walk_the_ledger_forward(stack: RunningStack) -> None:
    """Every item is bounded by the ledger as it was before the call, not by earlier items."""
    await _score(stack, 1, 0)
    updates = [JUMP // 2, JUMP, JUMP + JUMP // 2, 2 * JUMP]
    descriptors = [_descriptor(stack, 10 + i, update) for i, update in enumerate(updates)]
    channel, stub = raw_stub(stack)
    try:
        answer = await stub.ScoreEpisodes(
            pb.ScoreEpisodesRequest(descriptors=descriptors), metadata=auth(stack), timeout=20
        )
    finally:
        await channel.close()
    kinds = [r.WhichOneof("result") for r in answer.results]
    assert kinds == ["envelope", "envelope", "error", "error"]
    assert {r.error.reason for r in answer.results[2:]} == {"policy_update_jump"}
    assert _highest(stack) == JUMP


async def test_a_first_batch_is_bounded_by_its_first_item(stack: RunningStack) -> None:
    descriptors = [_descriptor(stack, 1, 100), _descriptor(stack, 2, 100 + JUMP + 1)]
    channel, stub = raw_stub(stack)
    try:
        answer = await stub.ScoreEpisodes(
            pb.ScoreEpisodesRequest(descriptors=descriptors), metadata=auth(stack), timeout=20
        )
    finally:
        await channel.close()
    assert answer.results[0].WhichOneof("result") == "envelope"
    assert answer.results[1].error.reason == "policy_update_jump"
    assert _highest(stack) == 100


@pytest.fixture
async def tight_stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """A worker whose bound comes from $REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP (5)."""
    settings = resolve_settings(
        data_dir=data_dir,
        contract_dir=data_dir / "contracts" / "mockmed",
        port=0,
        env={"REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP": "5"},
    )
    app = await start_worker(settings)
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([app.key.public_key]),
        timeout=20.0,
    )
    running = RunningStack(app=app, client=client, data_dir=data_dir)
    yield running
    await stop_stack(running)


async def test_the_bound_is_configured_by_environment(tight_stack: RunningStack) -> None:
    assert tight_stack.app.settings.max_policy_update_jump == 5
    await _score(tight_stack, 1, 0)
    assert await _refused(tight_stack, 2, 6) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "policy_update_jump",
    )
    await _score(tight_stack, 3, 5)


@pytest.mark.parametrize("raw", ["-1", "ten", "1.5"])
def test_a_bad_bound_is_refused(tmp_path: Path, raw: str) -> None:
    with pytest.raises(ValidationError, match="MAX_POLICY_UPDATE_JUMP"):
        resolve_settings(
            data_dir=tmp_path / "data", env={"REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP": raw}
        )


def _item(episode: str, update: int) -> ReceiptToCommit:
    return ReceiptToCommit(
        receipt_id=f"rcpt-{episode}",
        episode_id=episode,
        contract_digest="sha256:" + "a" * 64,
        policy_update=update,
        identity_key=None,
        envelope=b"envelope",
        evidence=b"{}",
    )


def test_store_bounds_against_the_ledger_before_the_transaction(tmp_path: Path) -> None:
    store = WorkerStore(f"sqlite:///{tmp_path / 'worker.db'}")
    try:
        store.commit_receipts([_item("ep-0", 7)], max_jump=3)
        results = store.commit_receipts(
            [_item("ep-1", 9), _item("ep-2", 10), _item("ep-3", 11)], max_jump=3
        )
        assert [(r.stored, r.jumped) for r in results] == [
            (True, False),
            (True, False),
            (False, True),
        ]
        assert store.highest_policy_update("sha256:" + "a" * 64) == 10
        assert store.receipt_by_episode("ep-3") is None
        # Without a bound (the store's default) it is the caller's rule, not the store's.
        [free] = store.commit_receipts([_item("ep-4", 1_000)])
        assert free.stored
    finally:
        store.close()
