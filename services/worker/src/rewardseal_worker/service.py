"""The gRPC face of the worker: ``RewardWorkerService`` over one ``Scorer`` (docs/spec.md §7-8).

Handlers only translate: requests in, ``Scorer`` calls, responses or mapped errors out. Every
domain error reaches the wire through ``rewardseal.rpc_status`` (one mapping).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from rewardseal.errors import InvalidEpisode, RewardSealError, Unscored, ValidationError, preview
from rewardseal.receipts import grader_score, is_unscored
from rewardseal.rpc_status import maps_errors, to_episode_error
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.validation import parse_strict
from rewardseal_worker import __version__
from rewardseal_worker.begins import BeginOutcome
from rewardseal_worker.engine import ScoreJob, ScoreOutcome, Scorer

_log = logging.getLogger(__name__)

MAX_BATCH = 1024
"""The most descriptors one ScoreEpisodes call, or items one BeginEpisodes call, may carry."""

Context = grpc.aio.ServicerContext[Any, Any]


def _result(episode_id: str, outcome: ScoreOutcome) -> pb.EpisodeResult:
    if isinstance(outcome, RewardSealError):
        return pb.EpisodeResult(episode_id=episode_id, error=to_episode_error(outcome))
    return pb.EpisodeResult(episode_id=episode_id, envelope=outcome)


def _begin_result(episode_id: str, outcome: BeginOutcome) -> pb.BeginResult:
    if isinstance(outcome, RewardSealError):
        return pb.BeginResult(episode_id=episode_id, error=to_episode_error(outcome))
    return pb.BeginResult(episode_id=episode_id, begun=outcome)


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
        # Each request goes through the same batchers as unary calls, so a pipelining trainer
        # still gets group commits. One request is answered before the next is taken: answers
        # keep the order of the requests, and a begin is stored before a later descriptor of
        # the same episode is scored.
        async for request in request_iterator:
            if request.WhichOneof("request") == "begin":
                yield pb.StreamEpisodesResponse(begin=await self._stream_begin(request.begin))
                continue
            # A request with neither set is an empty descriptor: refused as one.
            descriptor = request.descriptor
            try:
                outcome: ScoreOutcome = await self.scorer.score(ScoreJob(descriptor))
            except RewardSealError as exc:
                outcome = exc
            yield pb.StreamEpisodesResponse(result=_result(descriptor.episode_id, outcome))

    async def _stream_begin(self, request: pb.BeginEpisodeRequest) -> pb.BeginResult:
        outcome: BeginOutcome
        try:
            outcome = await self.scorer.begin(request)
        except RewardSealError as exc:
            outcome = exc
        return _begin_result(request.episode_id, outcome)

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
