"""StreamEpisodes takes requests that are already waiting as runs: one batch per run, answers in
request order, every request seeing the effects of the ones before it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from support.mockmed_episodes import descriptor, write_triage
from worker.conftest import RunningStack
from worker.test_worker_contract import auth, raw_stub

from rewardseal.core.errors import RewardSealError
from rewardseal.core.receipts import ExpectedReceipt, check_receipt_answers, open_receipt
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_worker.engine import Scorer

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
LONE_DELAY = 0.3


def begin(stack: RunningStack, episode_id: str, patient: str) -> pb.StreamEpisodesRequest:
    return pb.StreamEpisodesRequest(
        begin=pb.BeginEpisodeRequest(
            episode_id=episode_id,
            reward_contract_digest=stack.digest,
            oracle_identity={"patient_id": patient},
        )
    )


def score(stack: RunningStack, episode_id: str) -> pb.StreamEpisodesRequest:
    return pb.StreamEpisodesRequest(descriptor=descriptor(stack.digest, episode_id))


class BatchCalls:
    """The batch calls a scorer makes (begin_many, score_jobs) and their sizes, counted on the
    real scorer: the calls still run."""

    def __init__(self, scorer: Scorer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[tuple[str, int]] = []
        begin_many, score_jobs = scorer.begin_many, scorer.score_jobs

        async def counted_begins(requests: Sequence[Any]) -> list[Any]:
            self.sizes.append(("begin", len(requests)))
            return await begin_many(requests)

        async def counted_scores(jobs: Sequence[Any]) -> list[Any]:
            self.sizes.append(("score", len(jobs)))
            return await score_jobs(jobs)

        monkeypatch.setattr(scorer, "begin_many", counted_begins)
        monkeypatch.setattr(scorer, "score_jobs", counted_scores)


def slow_lone_requests(scorer: Scorer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone request (the unary batchers' path) takes LONE_DELAY longer, so every request the
    client sent at once is waiting when it is answered: the grouping is then certain."""
    begin, score_one = scorer.begin, scorer.score

    async def slow_begin(request: Any) -> Any:
        await asyncio.sleep(LONE_DELAY)
        return await begin(request)

    async def slow_score(job: Any) -> Any:
        await asyncio.sleep(LONE_DELAY)
        return await score_one(job)

    monkeypatch.setattr(scorer, "begin", slow_begin)
    monkeypatch.setattr(scorer, "score", slow_score)


async def stream(stack: RunningStack, requests: list[pb.StreamEpisodesRequest]) -> list[Any]:
    """Send every request at once (the client does not wait for answers) and read all answers."""
    channel, stub = raw_stub(stack)
    try:
        call = stub.StreamEpisodes(iter(requests), metadata=auth(stack), timeout=30)
        return [answer async for answer in call]
    finally:
        await channel.close()


async def test_a_pipelined_rollout_takes_one_batch_per_kind(
    stack: RunningStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = BatchCalls(stack.app.scorer, monkeypatch)
    slow_lone_requests(stack.app.scorer, monkeypatch)
    ids = [f"episode.run.{i:04d}" for i in range(16)]
    begins = [begin(stack, e, f"patient-run-{i:04d}") for i, e in enumerate(ids)]
    answers = await stream(stack, begins)
    assert [a.begin.begun.episode_id for a in answers] == ids
    for i in range(16):
        write_triage(stack.database, f"patient-run-{i:04d}")
    answers = await stream(stack, [score(stack, e) for e in ids])
    assert [a.result.episode_id for a in answers] == ids
    for episode_id, answer in zip(ids, answers, strict=True):
        expected = ExpectedReceipt.for_descriptor(descriptor(stack.digest, episode_id))
        opened = open_receipt(answer.result.envelope, stack.trust)
        check_receipt_answers(opened.receipt, expected)
        assert opened.receipt.reward_outcome == VERIFIED
    # The first request of each stream was taken alone (nothing waited behind it yet); the 15
    # that waited behind it went as one batch.
    assert calls.sizes == [("begin", 15), ("score", 15)]


async def test_each_request_sees_the_effects_of_earlier_ones(stack: RunningStack) -> None:
    """Whatever the grouping: a re-begin is idempotent as one after the other, the score frees
    the identity before the next begin of it is taken, a second score is a duplicate."""
    answers = await stream(
        stack,
        [
            begin(stack, "episode.seq.0001", "patient-seq-1"),
            begin(stack, "episode.seq.0001", "patient-seq-1"),  # the repeat: idempotent
            score(stack, "episode.seq.0001"),
            begin(stack, "episode.seq.0002", "patient-seq-1"),  # free again: scored above
            score(stack, "episode.seq.0002"),
            score(stack, "episode.seq.0002"),  # the repeat: a duplicate of the receipt above
        ],
    )
    kinds = [a.WhichOneof("answer") for a in answers]
    assert kinds == ["begin", "begin", "result", "begin", "result", "result"]
    assert answers[0].begin.begun.episode_id == "episode.seq.0001"
    assert answers[1].begin.begun.episode_id == "episode.seq.0001"
    assert answers[2].result.HasField("envelope")
    assert answers[3].begin.begun.episode_id == "episode.seq.0002"
    assert answers[4].result.HasField("envelope")
    assert answers[5].result.error.reason == "duplicate_episode"


async def test_a_failing_run_answers_every_request_and_the_stream_goes_on(
    stack: RunningStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = stack.app.scorer
    slow_lone_requests(scorer, monkeypatch)

    async def down(requests: Sequence[Any]) -> list[Any]:
        raise RewardSealError("the store went away")

    monkeypatch.setattr(scorer, "begin_many", down)
    answers = await stream(
        stack,
        [
            score(stack, "episode.down.0009"),  # scored alone; the begins wait behind it
            begin(stack, "episode.down.0001", "patient-down-1"),
            begin(stack, "episode.down.0002", "patient-down-2"),
            begin(stack, "episode.down.0003", "patient-down-3"),
            score(stack, "episode.down.0008"),
        ],
    )
    assert [a.WhichOneof("answer") for a in answers] == [
        "result",
        "begin",
        "begin",
        "begin",
        "result",
    ]
    # The three begins went as one run, which failed: each carries the error, none is lost,
    # and the stream answered the next request.
    assert [a.begin.episode_id for a in answers[1:4]] == [
        "episode.down.0001",
        "episode.down.0002",
        "episode.down.0003",
    ]
    assert all(a.begin.error.reason == "internal" for a in answers[1:4]), answers[1:4]
    assert answers[4].result.episode_id == "episode.down.0008"
