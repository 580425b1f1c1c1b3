"""Receipt binding (R-T-5): a validly signed receipt is used only for the request it answers.

Every attack runs through a real man in the middle (tests/support/mitm.py) in front of a real
worker: the envelopes it hands out were signed by the worker itself, so the signature check
passes and only the binding of an answer to its request (episode, checkpoint, policy update,
contract, or the receipt id asked for) can refuse them. Each test runs on the sync and on the
asyncio client; the honest paths through the same proxy still pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.mitm import Mitm, man_in_the_middle
from support.mockmed_episodes import descriptor
from worker.conftest import RunningStack
from worker.test_client import KINDS, Either, grader_args, make_client, play

from rewardseal.core.errors import DuplicateEpisode, ReceiptMismatch, SignatureError
from rewardseal.rpc.worker_client import VerifiedReceipt, make_begin
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope

OTHER_DIGEST = "sha256:" + "1" * 64
OTHER_CHECKPOINT = "policy.checkpoint.other.0001"


@pytest.fixture
async def mitm(stack: RunningStack) -> AsyncIterator[Mitm]:
    """A man in the middle in front of the stack's worker (passing everything through)."""
    async with man_in_the_middle(stack.target) as running:
        yield running


@pytest.fixture(params=KINDS)
async def client(request: pytest.FixtureRequest, stack: RunningStack, mitm: Mitm) -> Any:
    """A sync or asyncio client that dials the man in the middle, pinned to the worker key."""
    either = make_client(request.param, mitm.target, token=stack.token, trust=stack.trust)
    yield either
    await either.close()


def episode_of(envelope: SignedEnvelope) -> str:
    return RewardEvidenceReceipt.FromString(envelope.payload).episode_id


async def scored(stack: RunningStack, client: Either, episode_id: str) -> VerifiedReceipt:
    """Play and honestly score ``episode_id`` through the proxy (its envelope is kept)."""
    await play(stack, client, episode_id, write=True)
    got = await client.call("score", descriptor(stack.digest, episode_id))
    assert isinstance(got, VerifiedReceipt)
    return got


def assert_mismatch(error: object, field: str, expected: object, received: object) -> None:
    """A ReceiptMismatch (a SignatureError) naming the field and both values."""
    assert isinstance(error, ReceiptMismatch), error
    assert isinstance(error, SignatureError)
    assert error.metadata["field"] == field
    assert field in error.message
    assert str(expected) in error.message
    assert str(received) in error.message


def replace_envelope(method: str, envelope: SignedEnvelope) -> Any:
    """An answer hook that hands ``envelope`` back for every ``method`` call."""

    def hook(called: str, request: Any, answer: Any) -> Any:
        if called == method:
            answer.envelope.CopyFrom(envelope)
        return answer

    return hook


def rewrite_descriptor(**fields: Any) -> Any:
    """A request hook that changes the descriptor of ScoreEpisode calls before the worker."""

    def rewrite(method: str, request: Any) -> Any:
        if method != "ScoreEpisode":
            return request
        forwarded = pb.ScoreEpisodeRequest()
        forwarded.CopyFrom(request)
        for name, value in fields.items():
            setattr(forwarded.descriptor, name, value)
        return forwarded

    return rewrite


# --------------------------------------------------------------------------------------------
# Honest paths through the proxy
# --------------------------------------------------------------------------------------------


async def test_honest_answers_through_the_proxy_are_used(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    first = await scored(stack, client, "episode.bind.honest.0")
    assert first.receipt.episode_id == "episode.bind.honest.0"
    ids = [f"episode.bind.honest.many.{i}" for i in range(2)]
    for episode_id in ids:
        await play(stack, client, episode_id, write=True)
    batch = await client.call("score_many", [descriptor(stack.digest, e) for e in ids])
    assert [r.receipt.episode_id for r in batch] == ids
    streamed_ids = [f"episode.bind.honest.stream.{i}" for i in range(2)]
    for episode_id in streamed_ids:
        await play(stack, client, episode_id, write=True)
    streamed = await client.stream([descriptor(stack.digest, e) for e in streamed_ids])
    assert [r.receipt.episode_id for r in streamed] == streamed_ids
    by_id = await client.call("get_receipt", receipt_id=first.receipt.receipt_id)
    by_episode = await client.call("get_receipt", episode_id="episode.bind.honest.0")
    both = await client.call(
        "get_receipt", receipt_id=first.receipt.receipt_id, episode_id="episode.bind.honest.0"
    )
    answering = await client.call(
        "get_receipt", answers=descriptor(stack.digest, "episode.bind.honest.0")
    )
    assert by_id.envelope == by_episode.envelope == both.envelope == answering.envelope
    await play(stack, client, "episode.bind.honest.grade", write=True)
    graded = await client.call(
        "grade_openai", *grader_args(stack.digest, "episode.bind.honest.grade")
    )
    assert graded == 1.0
    # A lost answer is still recovered as our own stored receipt.
    mitm.tamper.lose["ScoreEpisode"] = 1
    recovered = await scored(stack, client, "episode.bind.honest.lost")
    assert recovered.receipt.episode_id == "episode.bind.honest.lost"


# --------------------------------------------------------------------------------------------
# ScoreEpisode: another episode, update, checkpoint, contract
# --------------------------------------------------------------------------------------------


async def test_receipt_for_another_episode_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    earlier = await scored(stack, client, "episode.bind.other.0")
    mitm.tamper.answer = replace_envelope("ScoreEpisode", earlier.envelope)
    await play(stack, client, "episode.bind.other.1", write=False)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score", descriptor(stack.digest, "episode.bind.other.1"))
    assert_mismatch(caught.value, "episode_id", "episode.bind.other.1", "episode.bind.other.0")


async def test_receipt_for_another_policy_update_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    # The worker signs a receipt for update 0; the trainer asked for update 50.
    mitm.tamper.request = rewrite_descriptor(policy_update=0)
    await play(stack, client, "episode.bind.update.0", write=True)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score", descriptor(stack.digest, "episode.bind.update.0", update=50))
    assert_mismatch(caught.value, "policy_update", 50, 0)


async def test_receipt_for_another_checkpoint_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    mitm.tamper.request = rewrite_descriptor(policy_checkpoint_id=OTHER_CHECKPOINT)
    await play(stack, client, "episode.bind.checkpoint.0", write=True)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score", descriptor(stack.digest, "episode.bind.checkpoint.0"))
    assert caught.value.metadata["field"] == "policy_checkpoint_id"
    assert OTHER_CHECKPOINT in caught.value.message


async def test_receipt_for_another_contract_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    # The trainer's contract is OTHER_DIGEST; the link delivers it to a worker of another one.
    mitm.tamper.request = rewrite_descriptor(reward_contract_digest=stack.digest)
    await play(stack, client, "episode.bind.contract.0", write=True)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score", descriptor(OTHER_DIGEST, "episode.bind.contract.0"))
    assert caught.value.metadata["field"] == "reward_contract_digest"
    # Long values are quoted short, with their length.
    assert "(71 characters)" in caught.value.message
    assert len(caught.value.message) < 300


# --------------------------------------------------------------------------------------------
# Batches and streams: each answer is bound to its own descriptor
# --------------------------------------------------------------------------------------------


def swap_first_two(method: str, request: Any, answer: Any) -> Any:
    if method == "ScoreEpisodes":
        first, second = (pb.EpisodeResult(), pb.EpisodeResult())
        first.CopyFrom(answer.results[0])
        second.CopyFrom(answer.results[1])
        answer.results[0].CopyFrom(second)
        answer.results[1].CopyFrom(first)
    return answer


async def test_swapped_batch_is_refused(stack: RunningStack, mitm: Mitm, client: Either) -> None:
    ids = ["episode.bind.batch.0", "episode.bind.batch.1", "episode.bind.batch.2"]
    for index, episode_id in enumerate(ids):
        await play(stack, client, episode_id, write=index != 1)
    mitm.tamper.answer = swap_first_two
    got = await client.call("score_many", [descriptor(stack.digest, e) for e in ids])
    assert len(got) == 3
    assert_mismatch(got[0], "episode_id", ids[0], ids[1])
    assert_mismatch(got[1], "episode_id", ids[1], ids[0])
    # The entry that was not moved is still used.
    assert isinstance(got[2], VerifiedReceipt)
    assert got[2].receipt.episode_id == ids[2]


async def test_swapped_envelopes_under_honest_echoes_are_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    # The unsigned episode_id echoes stay in place; only the signed envelopes move.
    def swap_envelopes(method: str, request: Any, answer: Any) -> Any:
        if method == "ScoreEpisodes":
            first = SignedEnvelope()
            first.CopyFrom(answer.results[0].envelope)
            answer.results[0].envelope.CopyFrom(answer.results[1].envelope)
            answer.results[1].envelope.CopyFrom(first)
        return answer

    ids = ["episode.bind.echo.0", "episode.bind.echo.1"]
    for episode_id in ids:
        await play(stack, client, episode_id, write=True)
    mitm.tamper.answer = swap_envelopes
    got = await client.call("score_many", [descriptor(stack.digest, e) for e in ids])
    assert_mismatch(got[0], "episode_id", ids[0], ids[1])
    assert_mismatch(got[1], "episode_id", ids[1], ids[0])


async def test_batch_answer_missing_an_entry_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def drop_last(method: str, request: Any, answer: Any) -> Any:
        if method == "ScoreEpisodes":
            del answer.results[-1]
        return answer

    ids = ["episode.bind.short.0", "episode.bind.short.1"]
    for episode_id in ids:
        await play(stack, client, episode_id, write=True)
    mitm.tamper.answer = drop_last
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score_many", [descriptor(stack.digest, e) for e in ids])
    assert caught.value.metadata["field"] == "result count"


async def test_stream_answers_swapped_are_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    ids = ["episode.bind.stream.0", "episode.bind.stream.1"]
    for episode_id in ids:
        await play(stack, client, episode_id, write=True)
    mitm.tamper.stream = lambda answers: list(reversed(answers))
    got = await client.stream([descriptor(stack.digest, e) for e in ids])
    assert len(got) == 2
    assert_mismatch(got[0], "episode_id", ids[0], ids[1])
    assert_mismatch(got[1], "episode_id", ids[1], ids[0])


async def test_stream_answer_for_no_descriptor_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    await play(stack, client, "episode.bind.extra.0", write=True)
    mitm.tamper.stream = lambda answers: [*answers, answers[0]]
    with pytest.raises(ReceiptMismatch, match="no descriptor"):
        await client.stream([descriptor(stack.digest, "episode.bind.extra.0")])


def begins(stack: RunningStack, ids: list[str]) -> list[pb.BeginEpisodeRequest]:
    return [make_begin(e, stack.digest, {"patient_id": f"patient-{e}"}) for e in ids]


async def test_swapped_begin_answers_are_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def swap(method: str, request: Any, answer: Any) -> Any:
        if method == "BeginEpisodes":
            first = pb.BeginResult()
            first.CopyFrom(answer.results[0])
            answer.results[0].CopyFrom(answer.results[1])
            answer.results[1].CopyFrom(first)
        return answer

    ids = ["episode.bind.begin.0", "episode.bind.begin.1", "episode.bind.begin.2"]
    mitm.tamper.answer = swap
    got = await client.call("begin_many", begins(stack, ids))
    assert_mismatch(got[0], "episode_id", ids[0], ids[1])
    assert_mismatch(got[1], "episode_id", ids[1], ids[0])
    assert isinstance(got[2], pb.BeginEpisodeResponse)
    assert got[2].episode_id == ids[2]


async def test_begin_answers_moved_under_honest_echoes_are_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def swap_registrations(method: str, request: Any, answer: Any) -> Any:
        if method == "BeginEpisodes":
            first = pb.BeginEpisodeResponse()
            first.CopyFrom(answer.results[0].begun)
            answer.results[0].begun.CopyFrom(answer.results[1].begun)
            answer.results[1].begun.CopyFrom(first)
        return answer

    ids = ["episode.bind.begecho.0", "episode.bind.begecho.1"]
    mitm.tamper.answer = swap_registrations
    got = await client.call("begin_many", begins(stack, ids))
    assert_mismatch(got[0], "episode_id", ids[0], ids[1])
    assert_mismatch(got[1], "episode_id", ids[1], ids[0])


async def test_begin_answer_missing_an_entry_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def drop_last(method: str, request: Any, answer: Any) -> Any:
        if method == "BeginEpisodes":
            del answer.results[-1]
        return answer

    mitm.tamper.answer = drop_last
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("begin_many", begins(stack, ["episode.bind.begshort.0"]))
    assert caught.value.metadata["field"] == "result count"


async def test_stream_answers_of_the_other_kind_are_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    await play(stack, client, "episode.bind.kind.0", write=True)
    mitm.tamper.stream = lambda answers: list(reversed(answers))
    items = [
        *begins(stack, ["episode.bind.kind.1"]),
        descriptor(stack.digest, "episode.bind.kind.0"),
    ]
    got = await client.stream(items)
    assert len(got) == 2
    assert_mismatch(got[0], "stream answer", "begin", "result")
    assert_mismatch(got[1], "stream answer", "result", "begin")


# --------------------------------------------------------------------------------------------
# GetReceipt and the duplicate-recovery path
# --------------------------------------------------------------------------------------------


async def test_get_receipt_by_id_answered_with_another_receipt_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    first = await scored(stack, client, "episode.bind.byid.0")
    second = await scored(stack, client, "episode.bind.byid.1")
    mitm.tamper.answer = replace_envelope("GetReceipt", first.envelope)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("get_receipt", receipt_id=second.receipt.receipt_id)
    assert_mismatch(caught.value, "receipt_id", second.receipt.receipt_id, first.receipt.receipt_id)


async def test_get_receipt_by_episode_answered_with_another_episodes_receipt_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    first = await scored(stack, client, "episode.bind.byep.0")
    await scored(stack, client, "episode.bind.byep.1")
    mitm.tamper.answer = replace_envelope("GetReceipt", first.envelope)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("get_receipt", episode_id="episode.bind.byep.1")
    assert_mismatch(caught.value, "episode_id", "episode.bind.byep.1", "episode.bind.byep.0")


async def test_duplicate_recovery_returning_a_wrong_receipt_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    earlier = await scored(stack, client, "episode.bind.recover.0")
    # The worker commits episode 1, its answer is lost, the retry meets ALREADY_EXISTS, and the
    # recovery's GetReceipt is answered with episode 0's (validly signed) receipt.
    mitm.tamper.lose["ScoreEpisode"] = 1
    mitm.tamper.answer = replace_envelope("GetReceipt", earlier.envelope)
    await play(stack, client, "episode.bind.recover.1", write=False)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("score", descriptor(stack.digest, "episode.bind.recover.1"))
    assert caught.value.metadata["field"] == "receipt_id"
    assert episode_of(mitm.kept[-1]) == "episode.bind.recover.1"


async def test_recovered_receipt_of_another_update_is_the_duplicate_not_a_payment(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    # The first attempt reaches the worker as update 0 and its answer is lost; the retry (update
    # 3, as the trainer asked) meets the stored receipt, which answers another update.
    forwarded: list[int] = []
    rewrite = rewrite_descriptor(policy_update=0)

    def first_only(method: str, request: Any) -> Any:
        if method == "ScoreEpisode" and not forwarded:
            forwarded.append(1)
            return rewrite(method, request)
        return request

    mitm.tamper.request = first_only
    mitm.tamper.lose["ScoreEpisode"] = 1
    await play(stack, client, "episode.bind.recover.update", write=True)
    with pytest.raises(DuplicateEpisode):
        await client.call(
            "score", descriptor(stack.digest, "episode.bind.recover.update", update=3)
        )


# --------------------------------------------------------------------------------------------
# The grader mirror
# --------------------------------------------------------------------------------------------


async def test_grade_answered_with_another_episodes_receipt_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    earlier = await scored(stack, client, "episode.bind.grade.0")
    mitm.tamper.answer = replace_envelope("GradeOpenAI", earlier.envelope)
    await play(stack, client, "episode.bind.grade.1", write=False)
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("grade_openai", *grader_args(stack.digest, "episode.bind.grade.1"))
    assert caught.value.metadata["field"] == "episode_id"


async def test_grade_with_a_score_that_is_not_the_receipts_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def pay_anyway(method: str, request: Any, answer: Any) -> Any:
        if method == "GradeOpenAI":
            answer.score = 1.0
        return answer

    mitm.tamper.answer = pay_anyway
    await play(stack, client, "episode.bind.grade.zero", write=False)  # WRONG_EFFECT: 0.0
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("grade_openai", *grader_args(stack.digest, "episode.bind.grade.zero"))
    assert caught.value.metadata["field"] == "score"


async def test_a_unary_begin_answer_naming_another_episode_is_refused(
    stack: RunningStack, mitm: Mitm, client: Either
) -> None:
    def rename(method: str, request: Any, answer: Any) -> Any:
        if method == "BeginEpisode":
            answer.episode_id = "episode.bind.other.9"
        return answer

    mitm.tamper.answer = rename
    with pytest.raises(ReceiptMismatch) as caught:
        await client.call("begin", "episode.bind.one.0", stack.digest, {"patient_id": "patient-b1"})
    assert caught.value.metadata["field"] == "episode_id"
    mitm.tamper.answer = lambda method, request, answer: answer
    got = await client.call(
        "begin", "episode.bind.one.1", stack.digest, {"patient_id": "patient-b2"}
    )
    assert got.episode_id == "episode.bind.one.1"
