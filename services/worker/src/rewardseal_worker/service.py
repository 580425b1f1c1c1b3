"""The gRPC face of the worker: ``RewardWorkerService`` over one ``Scorer`` (docs/spec.md §7-8).

Handlers only translate: requests in, ``Scorer`` calls, responses or mapped errors out. Every
domain error reaches the wire through ``rewardseal.rpc.status`` (one mapping).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format

from rewardseal.core.errors import (
    InvalidEpisode,
    RewardSealError,
    Unscored,
    ValidationError,
    preview,
)
from rewardseal.core.receipts import grader_score, is_unscored
from rewardseal.core.validation import parse_strict
from rewardseal.rpc.status import maps_errors, to_episode_error
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker import __version__
from rewardseal_worker.begins import BeginOutcome
from rewardseal_worker.engine import ScoreJob, ScoreOutcome, Scorer

_log = logging.getLogger(__name__)

MAX_BATCH = 1024
"""The most descriptors one ScoreEpisodes call, or items one BeginEpisodes call, may carry."""

Context = grpc.aio.ServicerContext[Any, Any]
_T = TypeVar("_T")


def _result(episode_id: str, outcome: ScoreOutcome) -> pb.EpisodeResult:
    if isinstance(outcome, RewardSealError):
        return pb.EpisodeResult(episode_id=episode_id, error=to_episode_error(outcome))
    return pb.EpisodeResult(episode_id=episode_id, envelope=outcome)


def _begin_result(episode_id: str, outcome: BeginOutcome) -> pb.BeginResult:
    if isinstance(outcome, RewardSealError):
        return pb.BeginResult(episode_id=episode_id, error=to_episode_error(outcome))
    return pb.BeginResult(episode_id=episode_id, begun=outcome)


STREAM_WINDOW = 2 * MAX_BATCH
"""Requests of one stream read ahead of its answers; past that, gRPC flow control holds the
client back."""


@dataclass(frozen=True)
class _StreamEnd:
    """The end of a stream's requests; ``error`` when reading them failed (an undecodable
    request aborts the call, a cancelled client ends it)."""

    error: BaseException | None = None


async def _read_stream(
    requests: AsyncIterator[pb.StreamEpisodesRequest],
    inbox: asyncio.Queue[pb.StreamEpisodesRequest | _StreamEnd],
) -> None:
    """Move a stream's requests into ``inbox`` as they arrive, then its end."""
    try:
        async for request in requests:
            await inbox.put(request)
    except Exception as exc:  # handed to the answering side, raised after earlier answers
        await inbox.put(_StreamEnd(exc))
    else:
        await inbox.put(_StreamEnd())


class _Runs:
    """Cuts a stream's requests into runs: the next request, and every request of the same
    kind for another episode already waiting behind it (at most MAX_BATCH)."""

    def __init__(self, inbox: asyncio.Queue[pb.StreamEpisodesRequest | _StreamEnd]) -> None:
        self._inbox = inbox
        self._held: pb.StreamEpisodesRequest | _StreamEnd | None = None
        self.end: _StreamEnd | None = None

    async def next(self) -> list[pb.StreamEpisodesRequest] | None:
        """The next run, or None once the stream ended (see :attr:`end`)."""
        first = self._held if self._held is not None else await self._inbox.get()
        self._held = None
        if isinstance(first, _StreamEnd):
            self.end = first
            return None
        kind = _kind(first)
        run = [first]
        episodes = {_episode_id(first)}
        while len(run) < MAX_BATCH and not self._inbox.empty():
            waiting = self._inbox.get_nowait()
            # A repeated episode id starts the next run: a batch refuses a repeat as such, while
            # one after the other a re-begin is idempotent. The answer may not depend on timing.
            if (
                isinstance(waiting, _StreamEnd)
                or _kind(waiting) != kind
                or _episode_id(waiting) in episodes
            ):
                self._held = waiting
                break
            run.append(waiting)
            episodes.add(_episode_id(waiting))
        return run


async def _each(
    call: Awaitable[Sequence[_T | RewardSealError]], count: int
) -> list[_T | RewardSealError]:
    """The outcomes of a call made for ``count`` requests; an error raised by the call as a
    whole is every request's outcome."""
    try:
        return list(await call)
    except RewardSealError as exc:
        return [exc] * count


async def _alone(call: Awaitable[_T]) -> list[_T]:
    """A lone request's outcome as a run of one."""
    return [await call]


def _episode_id(request: pb.StreamEpisodesRequest) -> str:
    return request.begin.episode_id if _kind(request) == "begin" else request.descriptor.episode_id


def _kind(request: pb.StreamEpisodesRequest) -> str:
    """``begin`` or ``descriptor`` (a request with neither set is an empty descriptor)."""
    return "begin" if request.WhichOneof("request") == "begin" else "descriptor"


def descriptor_from_item(item: Mapping[str, Any]) -> EpisodeDescriptor:
    """The episode descriptor a grader ``item`` carries by field name."""
    descriptor = EpisodeDescriptor()
    known = {f.name for f in EpisodeDescriptor.DESCRIPTOR.fields}
    fields = {k: v for k, v in item.items() if k in known}
    try:
        # Struct numbers arrive as floats; the JSON mapping accepts integral floats for ints.
        if isinstance(fields.get("policy_update"), float):
            value = fields["policy_update"]
            if not value.is_integer():
                raise InvalidEpisode("policy_update must be an integer")
            fields["policy_update"] = int(value)
        json_format.ParseDict(fields, descriptor)
    except json_format.ParseError as exc:
        # The parser's message quotes the caller's value, which may be any size: cut it.
        raise InvalidEpisode(
            f"the grader item is not an episode descriptor: {preview(exc, quoted=False)}"
        ) from exc
    return descriptor


class RewardWorkerServicer(pb_grpc.RewardWorkerServiceServicer):
    """Implements every RPC of ``RewardWorkerService``."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    @maps_errors
    async def Health(self, request: pb.HealthRequest, context: Context) -> pb.HealthResponse:  # noqa: N802
        response = self.scorer.health()
        response.version = __version__
        return response

    @maps_errors
    async def BeginEpisode(  # noqa: N802
        self, request: pb.BeginEpisodeRequest, context: Context
    ) -> pb.BeginEpisodeResponse:
        return await self.scorer.begin(request)

    @maps_errors
    async def BeginEpisodes(  # noqa: N802
        self, request: pb.BeginEpisodesRequest, context: Context
    ) -> pb.BeginEpisodesResponse:
        if len(request.items) > MAX_BATCH:
            raise ValidationError(f"at most {MAX_BATCH} items per call")
        outcomes = await self.scorer.begin_many(request.items)
        return pb.BeginEpisodesResponse(
            results=[
                _begin_result(item.episode_id, outcome)
                for item, outcome in zip(request.items, outcomes, strict=True)
            ]
        )

    @maps_errors
    async def ScoreEpisode(  # noqa: N802
        self, request: pb.ScoreEpisodeRequest, context: Context
    ) -> pb.ScoreEpisodeResponse:
        envelope = await self.scorer.score(ScoreJob(request.descriptor))
        return pb.ScoreEpisodeResponse(envelope=envelope)

    @maps_errors
    async def ScoreEpisodes(  # noqa: N802
        self, request: pb.ScoreEpisodesRequest, context: Context
    ) -> pb.ScoreEpisodesResponse:
        if len(request.descriptors) > MAX_BATCH:
            raise ValidationError(f"at most {MAX_BATCH} descriptors per call")
        jobs = [ScoreJob(d) for d in request.descriptors]
        outcomes = await self.scorer.score_jobs(jobs)
        return pb.ScoreEpisodesResponse(
            results=[
                _result(job.descriptor.episode_id, o) for job, o in zip(jobs, outcomes, strict=True)
            ]
        )

    async def StreamEpisodes(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.StreamEpisodesRequest], context: Context
    ) -> AsyncIterator[pb.StreamEpisodesResponse]:
        # Answers keep the order of the requests, and each request sees every earlier one's
        # effect (a begin is stored before a later descriptor of the same episode is scored).
        # Requests already waiting when the stream is free again form a *run* of one kind
        # (begins, or descriptors) for distinct episodes, taken as one batch call: one thread,
        # one transaction, in order, like BeginEpisodes/ScoreEpisodes. A lone request goes
        # through the unary batchers instead, which group it with other callers' requests. So a
        # trainer that pipelines a rollout (64 begins, act, 64 descriptors) pays two batches,
        # not 128 round trips.
        inbox: asyncio.Queue[pb.StreamEpisodesRequest | _StreamEnd] = asyncio.Queue(
            maxsize=STREAM_WINDOW
        )
        reader = asyncio.create_task(_read_stream(request_iterator, inbox))
        runs = _Runs(inbox)
        try:
            while (run := await runs.next()) is not None:
                for answer in await self._answer_run(run):
                    yield answer
            end = runs.end
            if end is not None and end.error is not None:
                raise end.error  # the stream broke after every earlier request was answered
        finally:
            reader.cancel()

    async def _answer_run(
        self, run: list[pb.StreamEpisodesRequest]
    ) -> list[pb.StreamEpisodesResponse]:
        """The answers to a run of same-kind requests, in order. A lone request goes through
        the unary batchers; a run as one batch call. An error of the whole call is each
        request's answer."""
        if _kind(run[0]) == "begin":
            begins = [request.begin for request in run]
            outcomes: list[BeginOutcome] = await _each(
                _alone(self.scorer.begin(begins[0]))
                if len(begins) == 1
                else self.scorer.begin_many(begins),
                len(begins),
            )
            return [
                pb.StreamEpisodesResponse(begin=_begin_result(b.episode_id, o))
                for b, o in zip(begins, outcomes, strict=True)
            ]
        # A request with neither set is an empty descriptor: refused as one.
        jobs = [ScoreJob(request.descriptor) for request in run]
        scored: list[ScoreOutcome] = await _each(
            _alone(self.scorer.score(jobs[0])) if len(jobs) == 1 else self.scorer.score_jobs(jobs),
            len(jobs),
        )
        return [
            pb.StreamEpisodesResponse(result=_result(job.descriptor.episode_id, outcome))
            for job, outcome in zip(jobs, scored, strict=True)
        ]

    @maps_errors
    async def GetReceipt(  # noqa: N802
        self, request: pb.GetReceiptRequest, context: Context
    ) -> pb.GetReceiptResponse:
        envelope = self.scorer.get_receipt(
            receipt_id=request.receipt_id, episode_id=request.episode_id
        )
        return pb.GetReceiptResponse(envelope=envelope)

    @maps_errors
    async def GradeOpenAI(  # noqa: N802
        self, request: pb.GradeOpenAIRequest, context: Context
    ) -> pb.GradeOpenAIResponse:
        try:
            item = json_format.MessageToDict(request.item)
        except ValueError as exc:  # NaN or infinity somewhere: no JSON form, not a descriptor
            raise InvalidEpisode("the grader item has no JSON form (NaN or infinity)") from exc
        graded = await grade_item(self.scorer, item)
        return pb.GradeOpenAIResponse(score=graded.score, envelope=graded.envelope)


@dataclass(frozen=True)
class Graded:
    """The grader mirror's answer for one item: its score and the receipt behind it."""

    score: float
    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope


async def grade_item(scorer: Scorer, item: Mapping[str, Any]) -> Graded:
    """Score the episode a grader ``item`` names without burning its id when it is unscored,
    and grade it (the gRPC GradeOpenAI RPC and ``POST /v1/graders/openai`` alike).

    Raises:
        Unscored: the episode is unscored; the grader shape cannot say so and 0.0 would train
            on noise (R-W-9).
        RewardSealError: the item is not a descriptor, or scoring refused it.
    """
    descriptor = descriptor_from_item(item)
    envelope = await scorer.score(ScoreJob(descriptor, commit_unscored=False))
    receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
    if is_unscored(receipt):
        raise Unscored(
            f"episode {descriptor.episode_id} is unscored; drop the sample",
            metadata={"reward_outcome": RewardOutcome.Name(receipt.reward_outcome)},
        )
    return Graded(grader_score(receipt), receipt, envelope)
