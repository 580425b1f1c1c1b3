"""What the worker's client is built on (:mod:`rewardseal.rpc.worker_client`): request building,
answer checking and which RPCs may be resent, in one place; the client only moves messages
through :mod:`rewardseal.rpc.aio.transport` (R-T-5).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from rewardseal.core.errors import (
    DuplicateEpisode,
    InvalidEpisode,
    ReceiptMismatch,
    RewardSealError,
    ValidationError,
)
from rewardseal.core.receipts import (
    ExpectedReceipt,
    OpenedReceipt,
    check_receipt_answers,
    expected_parameters_digest,
    grader_score,
    open_receipt,
    receipt_mismatch,
)
from rewardseal.core.signing import TrustSet
from rewardseal.core.task_parameters import ParameterValue, to_wire
from rewardseal.rpc.call_rules import Attempts, CallRules
from rewardseal.rpc.status import from_episode_error
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import SignedEnvelope

MAX_BATCH_ITEMS = 1024
"""The most items the worker takes in one BeginEpisodes or ScoreEpisodes call."""

# The descriptor fields a grader item names that a receipt must echo (see grade_request).
_GRADE_FIELDS = ("episode_id", "policy_checkpoint_id", "policy_update", "reward_contract_digest")


@dataclass(frozen=True)
class VerifiedReceipt(OpenedReceipt):
    """An :class:`~rewardseal.core.receipts.OpenedReceipt` (its envelope verified against the pinned
    worker keys) that also answers the request it came back for (R-T-5)."""


ReceiptOrError = VerifiedReceipt | RewardSealError
"""One entry of a batch or stream answer."""


BeginOrError = pb.BeginEpisodeResponse | RewardSealError
"""One entry of a BeginEpisodes answer, or a stream's answer to a begin."""

StreamItem = EpisodeDescriptor | pb.BeginEpisodeRequest
"""What a stream carries: an episode to score, or one to begin."""

StreamEntry = ReceiptOrError | BeginOrError
"""A stream's answer to one :data:`StreamItem`."""


def make_descriptor(
    *,
    episode_id: str,
    policy_checkpoint_id: str,
    policy_update: int,
    reward_contract_digest: str,
    oracle_identity: Mapping[str, str] | None = None,
    runtime_signal: RuntimeSignal.ValueType | None = None,
    task_id: str | None = None,
    environment_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    task_parameters: Mapping[str, ParameterValue] | None = None,
) -> EpisodeDescriptor:
    """Build an EpisodeDescriptor; absent optional fields stay absent (R-MSG-9).

    ``task_parameters``: plain values (str, int, float, bool; see
    :func:`rewardseal.core.task_parameters.to_wire`) repeating what the begin bound (the worker
    refuses other values), or the episode's parameters when it had no begin (R-W-18). The
    receipt must then carry their digest.
    """
    descriptor = EpisodeDescriptor(
        episode_id=episode_id,
        policy_checkpoint_id=policy_checkpoint_id,
        policy_update=policy_update,
        reward_contract_digest=reward_contract_digest,
    )
    if oracle_identity:  # most descriptors name none (their BeginEpisode did): no map to fill
        descriptor.oracle_identity.update(oracle_identity)
    if runtime_signal is not None:
        descriptor.runtime_signal = runtime_signal
    if task_id is not None:
        descriptor.task_id = task_id
    if environment_id is not None:
        descriptor.environment_id = environment_id
    if metadata:
        descriptor.metadata.update(dict(metadata))
    if task_parameters:
        for name, value in to_wire(task_parameters).items():  # a message map takes no update()
            descriptor.task_parameters[name].CopyFrom(value)
    return descriptor


def make_begin(
    episode_id: str,
    reward_contract_digest: str,
    oracle_identity: Mapping[str, str],
    task_parameters: Mapping[str, ParameterValue] | None = None,
) -> pb.BeginEpisodeRequest:
    """A BeginEpisode request: an item of ``begin_many`` or of a stream (R-W-1); it binds the
    episode's ``task_parameters`` (plain values, as :func:`make_descriptor` takes them; R-W-18)."""
    return pb.BeginEpisodeRequest(
        episode_id=episode_id,
        reward_contract_digest=reward_contract_digest,
        oracle_identity=dict(oracle_identity),
        task_parameters=to_wire(task_parameters or {}),
    )


MAX_REMEMBERED_BEGINS = 65536
"""The begins whose task parameters one client remembers for the receipts of their episodes
(the oldest are forgotten first; a forgotten one's receipt is checked only if its descriptor
repeats the parameters)."""


class BoundParameters:
    """The task parameters digest each episode this client began was bound to (R-W-18), so
    the episode's receipt can be checked for it like for its episode id.

    Only begins with parameters are remembered: a receipt for an episode begun without any
    must carry the empty digest, which the descriptor alone says (:meth:`expected`).
    """

    def __init__(self, limit: int = MAX_REMEMBERED_BEGINS) -> None:
        self._digests: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def begun(self, request: pb.BeginEpisodeRequest) -> None:
        """Remember what ``request`` (accepted by the worker) bound."""
        self._digests[request.episode_id] = expected_parameters_digest(request.task_parameters)
        self._digests.move_to_end(request.episode_id)
        while len(self._digests) > self._limit:
            self._digests.popitem(last=False)

    def expected(self, descriptor: EpisodeDescriptor) -> ExpectedReceipt:
        """What a receipt answering ``descriptor`` must name, its task parameters included:
        those the descriptor repeats, else those its begin bound, when this client made it."""
        return ExpectedReceipt.for_descriptor(
            descriptor, task_parameters_digest=self._digests.get(descriptor.episode_id)
        )


def chunked(items: Iterable[pb.BeginEpisodeRequest]) -> Iterator[list[pb.BeginEpisodeRequest]]:
    """``items`` in lists of at most :data:`MAX_BATCH_ITEMS`, in order."""
    chunk: list[pb.BeginEpisodeRequest] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == MAX_BATCH_ITEMS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class WorkerProtocol(CallRules):
    """``RewardWorkerService``'s resendable RPCs, request building and answer checking."""

    IDEMPOTENT = frozenset(
        {
            "Health",
            "BeginEpisode",
            "BeginEpisodes",
            "ScoreEpisode",
            "ScoreEpisodes",
            "GetReceipt",
            "GradeOpenAI",
        }
    )
    """Every unary RPC: a begin is idempotent (R-W-1), a score's resend answers our own stored
    receipt (:meth:`recoverable`), the rest are reads. ``StreamEpisodes`` is never resent."""

    def __init__(self, token: str, trust: TrustSet, timeout: float, retries: int) -> None:
        """Raises ValidationError for an empty token or an empty trust set."""
        super().__init__(token, timeout, retries)
        if not len(trust):
            raise ValidationError("pin at least one worker key: receipts are verified (R-T-5)")
        self.trust = trust
        self.bound = BoundParameters()
        """The task parameters of the episodes this client began (R-W-18)."""

    def verify(self, envelope: SignedEnvelope, expected: ExpectedReceipt) -> VerifiedReceipt:
        """Open ``envelope`` against the pinned keys, then check it answers ``expected``.

        There is no way to verify without an expectation: every answer is bound to its request.
        """
        opened = open_receipt(envelope, self.trust)
        check_receipt_answers(opened.receipt, expected)
        return VerifiedReceipt(opened.receipt, opened.envelope)

    def result(self, result: pb.EpisodeResult, descriptor: EpisodeDescriptor) -> ReceiptOrError:
        """One batch or stream entry, bound to the descriptor it answers; any error is the entry.

        The unsigned ``episode_id`` echo must name the descriptor's episode too, so an error
        entry moved to another position is caught as well as a moved receipt.
        """
        try:
            if result.episode_id != descriptor.episode_id:
                raise receipt_mismatch("episode_id", descriptor.episode_id, result.episode_id)
            if result.HasField("envelope"):
                return self.verify(result.envelope, self.bound.expected(descriptor))
        except RewardSealError as exc:
            return exc
        return from_episode_error(result.error)

    def results(
        self, answer: pb.ScoreEpisodesResponse, descriptors: Sequence[EpisodeDescriptor]
    ) -> list[ReceiptOrError]:
        """A batch answer, entry ``i`` bound to descriptor ``i`` (the worker keeps the order).

        Raises ReceiptMismatch when the answer has another number of entries: nothing in it can
        then be paired with its descriptor.
        """
        if len(answer.results) != len(descriptors):
            raise receipt_mismatch("result count", len(descriptors), len(answer.results))
        return [
            self.result(result, descriptor)
            for result, descriptor in zip(answer.results, descriptors, strict=True)
        ]

    def answered(self, sent: deque[StreamItem], answer: pb.StreamEpisodesResponse) -> StreamEntry:
        """A stream answer, bound to the oldest request sent and not yet answered.

        The worker answers a stream in the order of its requests. A request is queued in
        ``sent`` before it goes on the wire, so its answer cannot arrive before it is queued.
        An answer of the other kind (a begin's for a descriptor, or the reverse) is that
        entry's ReceiptMismatch.

        Raises ReceiptMismatch for an answer with no request left to answer.
        """
        if not sent:
            raise ReceiptMismatch(
                "the worker's stream sent an answer for no descriptor or begin sent"
            )
        request = sent.popleft()
        kind = answer.WhichOneof("answer")
        if isinstance(request, pb.BeginEpisodeRequest):
            if kind != "begin":
                return receipt_mismatch("stream answer", "begin", kind)
            return self.begun(answer.begin, request)
        if kind != "result":
            return receipt_mismatch("stream answer", "result", kind)
        return self.result(answer.result, request)

    def begun(self, result: pb.BeginResult, request: pb.BeginEpisodeRequest) -> BeginOrError:
        """One begin's answer, bound to the request it answers; any error is the entry.

        Both the result's ``episode_id`` and the registration's must name the request's episode,
        so an answer moved to another position is caught.
        """
        if result.episode_id != request.episode_id:
            return receipt_mismatch("episode_id", request.episode_id, result.episode_id)
        if result.HasField("begun"):
            if result.begun.episode_id != request.episode_id:
                return receipt_mismatch("episode_id", request.episode_id, result.begun.episode_id)
            self.bound.begun(request)
            return result.begun
        return from_episode_error(result.error)

    def begun_one(
        self, answer: pb.BeginEpisodeResponse, request: pb.BeginEpisodeRequest
    ) -> pb.BeginEpisodeResponse:
        """A unary BeginEpisode answer, bound to its request like a batch entry.

        Raises ReceiptMismatch when it names another episode.
        """
        if answer.episode_id != request.episode_id:
            raise receipt_mismatch("episode_id", request.episode_id, answer.episode_id)
        self.bound.begun(request)
        return answer

    def begun_many(
        self, answer: pb.BeginEpisodesResponse, requests: Sequence[pb.BeginEpisodeRequest]
    ) -> list[BeginOrError]:
        """A BeginEpisodes answer, entry ``i`` bound to request ``i`` (the worker keeps the order).

        Raises ReceiptMismatch when the answer has another number of entries.
        """
        if len(answer.results) != len(requests):
            raise receipt_mismatch("result count", len(requests), len(answer.results))
        return [
            self.begun(result, request)
            for result, request in zip(answer.results, requests, strict=True)
        ]

    @staticmethod
    def stream_request(item: StreamItem) -> pb.StreamEpisodesRequest:
        """The stream request carrying a descriptor or a begin."""
        if isinstance(item, pb.BeginEpisodeRequest):
            return pb.StreamEpisodesRequest(begin=item)
        return pb.StreamEpisodesRequest(descriptor=item)

    def get_receipt_request(
        self, receipt_id: str | None, episode_id: str | None, answers: EpisodeDescriptor | None
    ) -> tuple[pb.GetReceiptRequest, ExpectedReceipt]:
        """The GetReceipt request and what its answer must name (see ``get_receipt``)."""
        if answers is not None:
            if episode_id is not None and episode_id != answers.episode_id:
                raise ValidationError("episode_id and answers name different episodes")
            episode_id = answers.episode_id
        if receipt_id is None and episode_id is None:
            raise ValidationError("give receipt_id or episode_id")
        if receipt_id is not None:
            request = pb.GetReceiptRequest(receipt_id=receipt_id)
        else:
            request = pb.GetReceiptRequest(episode_id=episode_id or "")
        if answers is not None:
            expected = self.bound.expected(answers)
            return request, dataclasses.replace(expected, receipt_id=receipt_id)
        return request, ExpectedReceipt(receipt_id=receipt_id, episode_id=episode_id)

    def own(
        self, stored: VerifiedReceipt, duplicate: DuplicateEpisode, descriptor: EpisodeDescriptor
    ) -> VerifiedReceipt:
        """``stored`` when it answers ``descriptor``; else ``duplicate`` is raised.

        ``stored`` is already bound to the episode and receipt id asked for. One that states
        another checkpoint, update or contract is the worker's honest record of an earlier use
        of the episode id (R-T-4): not this episode's reward, so the duplicate surfaces.
        """
        try:
            check_receipt_answers(stored.receipt, self.bound.expected(descriptor))
        except ReceiptMismatch:
            raise duplicate from None
        return stored

    def grade_request(
        self, sample: Mapping[str, Any], item: Mapping[str, Any]
    ) -> tuple[pb.GradeOpenAIRequest, ExpectedReceipt]:
        """The GradeOpenAI request and what its receipt must name.

        The item's descriptor fields are read as the worker reads them (an integral float for
        ``policy_update``, as a JSON number arrives); an item the worker could not read is
        refused here with the worker's own error class.
        """
        request = pb.GradeOpenAIRequest()
        json_format.ParseDict(dict(sample), request.sample)
        json_format.ParseDict(dict(item), request.item)
        fields = {name: item[name] for name in _GRADE_FIELDS if name in item}
        update = fields.get("policy_update")
        if isinstance(update, float) and update.is_integer():
            fields["policy_update"] = int(update)
        descriptor = EpisodeDescriptor()
        try:
            json_format.ParseDict(fields, descriptor)
        except json_format.ParseError as exc:
            raise InvalidEpisode(f"the grader item is not an episode descriptor: {exc}") from None
        return request, self.bound.expected(descriptor)

    def grade(self, answer: pb.GradeOpenAIResponse, expected: ExpectedReceipt) -> float:
        """The grader score of a verified, bound receipt; the unsigned score must agree with it.

        Raises Unscored for an unscored receipt (never 0.0) and ReceiptMismatch when the
        answer's score is not the receipt's.
        """
        verified = self.verify(answer.envelope, expected)
        score = grader_score(verified.receipt)
        if answer.score != score:
            raise receipt_mismatch("score", score, answer.score)
        return score

    @staticmethod
    def recoverable(exc: DuplicateEpisode, attempts: Attempts) -> bool:
        """True when ALREADY_EXISTS answers our own earlier attempt of this very call.

        After an UNAVAILABLE retry the first attempt may have committed before its answer was
        lost; then the stored receipt is ours. Without a retry a duplicate is the caller's
        mistake (e.g. a dataset column reused as an episode id, R-T-4) and must surface.
        """
        return attempts.count > 1 and bool(exc.metadata.get("receipt_id"))
