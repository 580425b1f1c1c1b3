"""BeginEpisodes and begins on StreamEpisodes, on a real grpc.aio worker (port 0) (R-W-1, R-W-3).

Per-item answers are read straight off the wire (``BeginResult`` and its ``EpisodeError``), so a
mapping bug on either side shows. The store failure is a real one, raised inside the store's
transaction after some of the batch's rows were inserted: a SQLite trigger that fails the
statement (``RAISE(FAIL)`` keeps the rows the statement already inserted, so only a rollback of
the whole transaction removes them), and a PostgreSQL trigger that kills its own connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2
from sqlalchemy import text
from support.mockmed_episodes import descriptor, write_triage
from support.worker_store import count_receipts, open_episode
from worker.conftest import RunningStack, start_stack, stop_stack
from worker.test_worker_contract import auth, raw_stub, wire_error

from rewardseal.core.errors import IdentityBusy, IdentityConflict, InvalidEpisode, ReceiptMismatch
from rewardseal.rpc.worker_client import StreamItem, WorkerClient, make_begin
from rewardseal.rpc.worker_protocol import WorkerProtocol
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RewardOutcome

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
RECONCILIATION = RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED


def begin_item(stack: RunningStack, episode_id: str, patient: str) -> pb.BeginEpisodeRequest:
    return make_begin(episode_id, stack.digest, {"patient_id": patient})


async def begin_episodes(
    stack: RunningStack, items: list[pb.BeginEpisodeRequest]
) -> list[pb.BeginResult]:
    """One BeginEpisodes call on a raw stub; its results (same length as ``items`` asserted)."""
    channel, stub = raw_stub(stack)
    try:
        answer = await stub.BeginEpisodes(
            pb.BeginEpisodesRequest(items=items), metadata=auth(stack), timeout=30
        )
    finally:
        await channel.close()
    assert len(answer.results) == len(items)
    return list(answer.results)


def reasons(results: list[pb.BeginResult]) -> list[str]:
    """Per item: "begun", or the error's reason."""
    return ["begun" if r.HasField("begun") else r.error.reason for r in results]


# --------------------------------------------------------------------------------------------
# Per-item answers
# --------------------------------------------------------------------------------------------


async def test_each_item_is_answered_in_order_and_refusals_stay_its_own(
    stack: RunningStack,
) -> None:
    await stack.client.begin("episode.holder.0001", stack.digest, {"patient_id": "patient-busy"})
    scored = await stack.client.score(
        descriptor(stack.digest, "episode.scored.0001", oracle_identity={"patient_id": "p-scd-1"})
    )
    hostile_value = "v" * 100_000
    items = [
        begin_item(stack, "episode.batch.0001", "patient-batch-1"),
        begin_item(stack, "../../etc/passwd", "patient-batch-2"),
        begin_item(stack, "episode.batch.0003", "patient-busy"),
        make_begin("episode.batch.0004", "sha256:" + "0" * 64, {"patient_id": "patient-b-4"}),
        make_begin("episode.batch.0005", stack.digest, {"pid": "patient-batch-5"}),
        make_begin("episode.batch.0006", stack.digest, {"patient_id": hostile_value}),
        begin_item(stack, "episode.scored.0001", "p-scd-1"),
        make_begin("episode.batch.0008", stack.digest, {}),
        begin_item(stack, "episode.batch.0009", "patient-batch-9"),
    ]
    results = await begin_episodes(stack, items)

    assert [r.episode_id for r in results] == [item.episode_id for item in items]
    assert reasons(results) == [
        "begun",
        "invalid_episode",
        "identity_busy",
        "contract_mismatch",
        "identity_mismatch",
        "invalid_episode",
        "duplicate_episode",
        "identity_missing",
        "begun",
    ]
    codes = [r.error.code for r in results if r.HasField("error")]
    assert codes == [
        code_pb2.INVALID_ARGUMENT,
        code_pb2.FAILED_PRECONDITION,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.ALREADY_EXISTS,
        code_pb2.INVALID_ARGUMENT,
    ]
    assert results[6].error.metadata["receipt_id"] == scored.receipt.receipt_id
    # Hostile input is quoted short (R-W-12).
    assert len(results[5].error.message) < 1024
    assert hostile_value[:100] not in results[5].error.message
    begun = results[0].begun
    assert begun.episode_id == "episode.batch.0001"
    assert begun.baseline_recorded
    assert begun.begun_at == results[8].begun.begun_at  # one batch, one moment

    store = stack.app.store
    for index, item in enumerate(items):
        registration = open_episode(store, stack.digest, item.episode_id)
        if index in (0, 8):
            assert registration is not None
            assert dict(registration.identity) == dict(item.oracle_identity)
        elif index != 6:
            assert registration is None, item.episode_id
    holder = open_episode(store, stack.digest, "episode.holder.0001")
    assert holder is not None  # the busy identity's own episode was not disturbed
    assert count_receipts(store) == 1


async def test_an_episode_twice_in_one_batch_is_refused_for_the_repeat_only(
    stack: RunningStack,
) -> None:
    items = [
        begin_item(stack, "episode.twice.0001", "patient-twice-1"),
        begin_item(stack, "episode.twice.0001", "patient-twice-1"),
        begin_item(stack, "episode.twice.0001", "patient-twice-2"),
        begin_item(stack, "episode.twice.0002", "patient-twice-2"),
    ]
    results = await begin_episodes(stack, items)
    assert reasons(results) == ["begun", "invalid_episode", "invalid_episode", "begun"]
    assert "twice in one batch" in results[1].error.message
    registration = open_episode(stack.app.store, stack.digest, "episode.twice.0001")
    assert registration is not None
    assert dict(registration.identity) == {"patient_id": "patient-twice-1"}
    assert open_episode(stack.app.store, stack.digest, "episode.twice.0002") is not None


async def test_beginning_again_in_a_later_call_is_idempotent_and_keeps_the_baseline(
    stack: RunningStack,
) -> None:
    begun = await stack.client.begin(
        "episode.again.0001", stack.digest, {"patient_id": "patient-again"}
    )
    first = open_episode(stack.app.store, stack.digest, "episode.again.0001")
    assert first is not None
    # A record written after the first begin: a second baseline would contain it.
    write_triage(stack.database, "patient-again")
    items = [
        begin_item(stack, "episode.again.0001", "patient-again"),
        begin_item(stack, "episode.again.0002", "patient-again-2"),
    ]
    once = await begin_episodes(stack, items)
    await asyncio.sleep(0.01)  # a later moment: a fresh time would differ
    twice = await begin_episodes(stack, items)
    assert reasons(once) == reasons(twice) == ["begun", "begun"]
    # Each answer is the registration that stands: the first begin's time, in every call.
    assert once[0].begun == twice[0].begun == begun
    assert once[1].begun == twice[1].begun
    again = open_episode(stack.app.store, stack.digest, "episode.again.0001")
    assert again == first
    # The first baseline decides: the record written after it is the episode's effect.
    got = await stack.client.score(descriptor(stack.digest, "episode.again.0001"))
    assert got.receipt.reward_outcome == VERIFIED


async def test_more_than_1024_items_fail_the_call_and_store_nothing(stack: RunningStack) -> None:
    items = [
        begin_item(stack, f"episode.over.{i:04d}", f"patient-over-{i:04d}") for i in range(1025)
    ]
    code, reason, _ = await wire_error(stack, "BeginEpisodes", pb.BeginEpisodesRequest(items=items))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    assert open_episode(stack.app.store, stack.digest, "episode.over.0000") is None
    # 1024 is the limit, not past it.
    results = await begin_episodes(stack, items[:1024])
    assert set(reasons(results)) == {"begun"}


async def test_an_empty_batch_is_an_empty_answer(stack: RunningStack) -> None:
    assert await begin_episodes(stack, []) == []


# --------------------------------------------------------------------------------------------
# The store fails in the middle of the batch: nothing stored, the server stays up
# --------------------------------------------------------------------------------------------

POISON = "episode.midfail.0003"
SQLITE_TRIGGER = f"""
CREATE TRIGGER fail_mid_batch BEFORE INSERT ON open_episodes
WHEN NEW.episode_id = '{POISON}'
BEGIN SELECT RAISE(FAIL, 'the store refused this row'); END
"""
POSTGRES_TRIGGER = [
    f"""
    CREATE FUNCTION fail_mid_batch() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.episode_id = '{POISON}' THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
      END IF;
      RETURN NEW;
    END $$
    """,
    """
    CREATE TRIGGER fail_mid_batch BEFORE INSERT ON open_episodes
    FOR EACH ROW EXECUTE FUNCTION fail_mid_batch()
    """,
]


async def test_a_store_failure_mid_batch_stores_nothing_and_the_server_stays_up(
    data_dir: Path, store_url: str
) -> None:
    stack = await start_stack(data_dir, db_url=store_url)
    try:
        store = stack.app.store
        statements = POSTGRES_TRIGGER if store.dialect == "postgresql" else [SQLITE_TRIGGER]
        with store.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
        items = [
            begin_item(stack, f"episode.midfail.{i:04d}", f"patient-midfail-{i:04d}")
            for i in range(6)
        ]
        code, reason, _ = await wire_error(
            stack, "BeginEpisodes", pb.BeginEpisodesRequest(items=items)
        )
        if store.dialect == "postgresql":  # the connection died: an outage
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "unavailable")
        else:  # a refused write that is not an outage
            assert (code, reason) == (grpc.StatusCode.INTERNAL, "internal")
        for item in items:
            assert open_episode(store, stack.digest, item.episode_id) is None, item.episode_id

        # Still serving: the batch without the poisoned item goes through whole...
        healthy = [item for item in items if item.episode_id != POISON]
        assert set(reasons(await begin_episodes(stack, healthy))) == {"begun"}
        # ...and once the store takes the row again, so does the refused one.
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "DROP TRIGGER fail_mid_batch"
                    + (" ON open_episodes" if store.dialect == "postgresql" else "")
                )
            )
        assert reasons(await begin_episodes(stack, items)) == ["begun"] * 6
        health = await stack.client.health()
        assert health.reward_contract_digest == stack.digest
    finally:
        await stop_stack(stack)


# --------------------------------------------------------------------------------------------
# StreamEpisodes carries begins as well as descriptors
# --------------------------------------------------------------------------------------------


async def test_stream_answers_say_what_they_answer_in_request_order(stack: RunningStack) -> None:
    requests = [
        pb.StreamEpisodesRequest(begin=begin_item(stack, "episode.sraw.0001", "patient-sraw-1")),
        pb.StreamEpisodesRequest(descriptor=descriptor(stack.digest, "episode.sraw.0001")),
        pb.StreamEpisodesRequest(begin=begin_item(stack, "bad/id", "patient-sraw-2")),
        pb.StreamEpisodesRequest(),
    ]
    channel, stub = raw_stub(stack)
    try:
        call = stub.StreamEpisodes(iter(requests), metadata=auth(stack), timeout=30)
        answers = [answer async for answer in call]
    finally:
        await channel.close()
    assert [a.WhichOneof("answer") for a in answers] == ["begin", "result", "begin", "result"]
    assert answers[0].begin.begun.episode_id == "episode.sraw.0001"
    assert answers[1].result.episode_id == "episode.sraw.0001"
    assert answers[1].result.HasField("envelope")
    assert answers[2].begin.error.reason == "invalid_episode"
    # A request with neither set is an empty descriptor, refused as one.
    assert answers[3].result.error.reason == "invalid_episode"


async def test_a_trainer_pipelines_begins_and_scores_on_one_stream(stack: RunningStack) -> None:
    """Begin, act once the begin is answered, score: the whole rollout on one stream."""
    acted = asyncio.Event()

    async def rollout() -> AsyncIterator[StreamItem]:
        yield begin_item(stack, "episode.pipe.0001", "patient-pipe-1")
        yield begin_item(stack, "episode.pipe.0002", "patient-pipe-2")
        yield begin_item(stack, "episode.pipe.0005", "patient-pipe-5")
        await acted.wait()  # the actor writes only after its begin's baseline was read
        yield descriptor(stack.digest, "episode.pipe.0001")
        yield descriptor(stack.digest, "episode.pipe.0002")
        # No begin for this one: no baseline, so it is not paid (unscored, never 0).
        yield descriptor(
            stack.digest, "episode.pipe.0003", oracle_identity={"patient_id": "patient-pipe-3"}
        )
        yield begin_item(stack, "episode.pipe.0004", "patient-pipe-5")  # identity still open

    entries = []
    async for entry in stack.client.stream(rollout()):
        entries.append(entry)
        if len(entries) == 1:
            assert isinstance(entry, pb.BeginEpisodeResponse)
            write_triage(stack.database, "patient-pipe-1")
            acted.set()
    assert len(entries) == 7
    assert all(isinstance(e, pb.BeginEpisodeResponse) for e in entries[:3])
    assert [e.episode_id for e in entries[:3]] == [
        "episode.pipe.0001",
        "episode.pipe.0002",
        "episode.pipe.0005",
    ]
    assert entries[3].receipt.reward_outcome == VERIFIED
    assert entries[4].receipt.reward_outcome == WRONG_EFFECT
    assert entries[5].receipt.reward_outcome == RECONCILIATION
    assert isinstance(entries[6], IdentityBusy)


async def test_a_begin_answer_in_a_descriptor_slot_is_that_entrys_mismatch(
    stack: RunningStack,
) -> None:
    """The client pairs a stream's answers with its requests by kind as well as episode."""
    protocol = WorkerProtocol("token", stack.trust, 10.0, 0)
    sent: list[StreamItem] = [descriptor(stack.digest, "episode.kind.0001")]
    begun = pb.BeginResult(
        episode_id="episode.kind.0001",
        begun=pb.BeginEpisodeResponse(episode_id="episode.kind.0001"),
    )
    entry = protocol.answered(deque(sent), pb.StreamEpisodesResponse(begin=begun))
    assert isinstance(entry, ReceiptMismatch)


# --------------------------------------------------------------------------------------------
# The clients' begin_many
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_begin_many_answers_each_item_and_chunks_above_the_limit(
    kind: str, stack: RunningStack
) -> None:
    count = 1030  # two BeginEpisodes calls: 1024 + 6
    items = [
        begin_item(stack, f"episode.many.{i:04d}", f"patient-many-{i:04d}") for i in range(count)
    ]
    items[1027] = begin_item(stack, "episode.many.0003", "patient-many-x")  # repeat, next chunk
    items[5] = begin_item(stack, "episode.many.0005", "patient-many-0004")  # identity busy
    items[8] = begin_item(stack, "bad/id", "patient-many-0008")
    if kind == "sync":
        with WorkerClient(stack.target, token=stack.token, trust=stack.trust) as client:
            entries = await asyncio.to_thread(client.begin_many, items)
    else:
        entries = await stack.client.begin_many(iter(items))
    assert len(entries) == count
    assert isinstance(entries[5], IdentityBusy)
    assert isinstance(entries[8], InvalidEpisode)
    # In another call, the same episode and identity would be an idempotent re-begin; this one
    # names another identity for an open episode.
    assert isinstance(entries[1027], IdentityConflict)
    begun = [i for i, e in enumerate(entries) if isinstance(e, pb.BeginEpisodeResponse)]
    assert len(begun) == count - 3
    assert all(entries[i].episode_id == items[i].episode_id for i in begun)
    assert open_episode(stack.app.store, stack.digest, "episode.many.1029") is not None
