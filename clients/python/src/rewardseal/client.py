"""Python clients for the reward worker, sync and asyncio (R-T-5).

Both clients attach the bearer token, put a deadline on every call, retry only on UNAVAILABLE,
verify every receipt's signature against the pinned worker key, and check that the receipt
answers the request it came back for (its episode, checkpoint, policy update and contract, or
the receipt id asked for: :func:`rewardseal.receipts.check_receipt_answers`) before handing it
out. A signature alone proves who wrote a receipt, not which request it answers. The request
building and answer checking live in one place (``_Protocol``) so the two transports cannot
drift apart. Channels are plaintext or, given a :class:`~rewardseal.tls.ClientTls`, TLS.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format

from rewardseal.errors import (
    DuplicateEpisode,
    InvalidEpisode,
    ReceiptMismatch,
    RewardSealError,
    ValidationError,
)
from rewardseal.receipts import (
    ExpectedReceipt,
    OpenedReceipt,
    check_receipt_answers,
    grader_score,
    open_receipt,
    receipt_mismatch,
)
from rewardseal.rpc_status import from_episode_error, from_rpc_error
from rewardseal.signing import TrustSet
from rewardseal.tls import ClientTls, aio_channel
from rewardseal.tls import channel as tls_channel
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal.v1.worker_service_pb2_grpc import RewardWorkerServiceStub

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_RETRIES = 3
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_T = TypeVar("_T")

# The descriptor fields a grader item names that a receipt must echo (see grade_request).
_GRADE_FIELDS = ("episode_id", "policy_checkpoint_id", "policy_update", "reward_contract_digest")


@dataclass(frozen=True)
class VerifiedReceipt(OpenedReceipt):
    """An :class:`~rewardseal.receipts.OpenedReceipt` (its envelope verified against the pinned
    worker keys) that also answers the request it came back for (R-T-5)."""


ReceiptOrError = VerifiedReceipt | RewardSealError
"""One entry of a batch or stream answer."""


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
) -> EpisodeDescriptor:
    """Build an EpisodeDescriptor; absent optional fields stay absent (R-MSG-9)."""
    descriptor = EpisodeDescriptor(
        episode_id=episode_id,
        policy_checkpoint_id=policy_checkpoint_id,
        policy_update=policy_update,
        reward_contract_digest=reward_contract_digest,
        oracle_identity=dict(oracle_identity or {}),
    )
    if runtime_signal is not None:
        descriptor.runtime_signal = runtime_signal
    if task_id is not None:
        descriptor.task_id = task_id
    if environment_id is not None:
        descriptor.environment_id = environment_id
    if metadata:
        descriptor.metadata.update(dict(metadata))
    return descriptor


@dataclass
class _Attempts:
    """How many times one logical call was sent (1 = no retry)."""

    count: int = 0


class _Protocol:
    """Request building and answer checking shared by both clients."""

    def __init__(self, token: str, trust: TrustSet, timeout: float, retries: int) -> None:
        if not token:
            raise ValidationError("a bearer token is required")
        if not len(trust):
            raise ValidationError("pin at least one worker key: receipts are verified (R-T-5)")
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.trust = trust
        self.timeout = timeout
        self.retries = retries

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
                return self.verify(result.envelope, ExpectedReceipt.for_descriptor(descriptor))
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

    def answered(self, sent: deque[EpisodeDescriptor], result: pb.EpisodeResult) -> ReceiptOrError:
        """A stream answer, bound to the oldest descriptor sent and not yet answered.

        The worker answers a stream in the order of its requests. A descriptor is queued in
        ``sent`` before it goes on the wire, so its answer cannot arrive before it is queued.

        Raises ReceiptMismatch for an answer with no descriptor left to answer.
        """
        if not sent:
            raise ReceiptMismatch("the worker's stream sent an answer for no descriptor sent")
        return self.result(result, sent.popleft())

    @staticmethod
    def get_receipt_request(
        receipt_id: str | None, episode_id: str | None, answers: EpisodeDescriptor | None
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
            return request, ExpectedReceipt.for_descriptor(answers, receipt_id=receipt_id)
        return request, ExpectedReceipt(receipt_id=receipt_id, episode_id=episode_id)

    @staticmethod
    def own(
        stored: VerifiedReceipt, duplicate: DuplicateEpisode, descriptor: EpisodeDescriptor
    ) -> VerifiedReceipt:
        """``stored`` when it answers ``descriptor``; else ``duplicate`` is raised.

        ``stored`` is already bound to the episode and receipt id asked for. One that states
        another checkpoint, update or contract is the worker's honest record of an earlier use
        of the episode id (R-T-4): not this episode's reward, so the duplicate surfaces.
        """
        try:
            check_receipt_answers(stored.receipt, ExpectedReceipt.for_descriptor(descriptor))
        except ReceiptMismatch:
            raise duplicate from None
        return stored

    @staticmethod
    def grade_request(
        sample: Mapping[str, Any], item: Mapping[str, Any]
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
        return request, ExpectedReceipt.for_descriptor(descriptor)

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
    def recoverable(exc: DuplicateEpisode, attempts: _Attempts) -> bool:
        """True when ALREADY_EXISTS answers our own earlier attempt of this very call.

        After an UNAVAILABLE retry the first attempt may have committed before its answer was
        lost; then the stored receipt is ours. Without a retry a duplicate is the caller's
        mistake (e.g. a dataset column reused as an episode id, R-T-4) and must surface.
        """
        return attempts.count > 1 and bool(exc.metadata.get("receipt_id"))

    def backoff(self, attempt: int) -> float:
        return retry_backoff(attempt)


def retry_backoff(attempt: int) -> float:
    """Seconds before resend number ``attempt`` of a call answered UNAVAILABLE (exponential,
    capped at 1 s); the worker and control clients wait alike."""
    return float(min(0.05 * 2**attempt, 1.0))


def _is_unavailable(error: grpc.RpcError) -> bool:
    code = getattr(error, "code", lambda: None)()
    return bool(code == grpc.StatusCode.UNAVAILABLE)


class WorkerClient:
    """Blocking client for ``RewardWorkerService``."""

    def __init__(
        self,
        target: str,
        *,
        token: str,
        trust: TrustSet,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        channel: grpc.Channel | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``tls`` makes the channel TLS (mutual with a client certificate); a ready ``channel``
        is used as given, so the two cannot be combined."""
        self._protocol = _Protocol(token, trust, timeout, retries)
        _one_channel_source(channel, tls)
        self._channel = channel or tls_channel(target, tls, message_size_options())
        self._stub = RewardWorkerServiceStub(self._channel)

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def _call(
        self,
        method: Callable[..., _T],
        request: Any,
        *,
        auth: bool = True,
        attempts: _Attempts | None = None,
    ) -> _T:
        attempt = 0
        while True:
            if attempts is not None:
                attempts.count = attempt + 1
            try:
                return method(
                    request,
                    timeout=self._protocol.timeout,
                    metadata=self._protocol.metadata if auth else None,
                )
            except grpc.RpcError as exc:
                if _is_unavailable(exc) and attempt < self._protocol.retries:
                    time.sleep(self._protocol.backoff(attempt))
                    attempt += 1
                    continue
                raise from_rpc_error(exc) from None

    def health(self) -> pb.HealthResponse:
        """The worker's key id, contract digest, tier and certificate state."""
        return self._call(self._stub.Health, pb.HealthRequest(), auth=False)

    def begin(
        self, episode_id: str, reward_contract_digest: str, oracle_identity: Mapping[str, str]
    ) -> pb.BeginEpisodeResponse:
        """Record the baseline read for ``oracle_identity`` before the rollout (R-W-1)."""
        request = pb.BeginEpisodeRequest(
            episode_id=episode_id,
            reward_contract_digest=reward_contract_digest,
            oracle_identity=dict(oracle_identity),
        )
        return self._call(self._stub.BeginEpisode, request)

    def score(self, descriptor: EpisodeDescriptor) -> VerifiedReceipt:
        """Score one episode; the receipt must answer ``descriptor`` (ReceiptMismatch if not).

        A retried call's duplicate is recovered by :meth:`recover` (``_Protocol.recoverable``).
        """
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = _Attempts()
        try:
            answer = self._call(self._stub.ScoreEpisode, request, attempts=attempts)
        except DuplicateEpisode as exc:
            if not self._protocol.recoverable(exc, attempts):
                raise
            return self.recover(exc, descriptor)
        return self._protocol.verify(answer.envelope, ExpectedReceipt.for_descriptor(descriptor))

    def recover(
        self, duplicate: DuplicateEpisode, descriptor: EpisodeDescriptor
    ) -> VerifiedReceipt:
        """The receipt already stored for ``descriptor``'s episode, when it answers ``descriptor``.

        Fetched by the receipt id ``duplicate`` names (else by episode id) and bound to that
        receipt id and episode (ReceiptMismatch otherwise). A stored receipt for another
        checkpoint, update or contract raises ``duplicate``: see ``_Protocol.own``.
        """
        stored = self.get_receipt(
            receipt_id=duplicate.metadata.get("receipt_id") or None,
            episode_id=descriptor.episode_id,
        )
        return self._protocol.own(stored, duplicate, descriptor)

    def score_many(self, descriptors: Iterable[EpisodeDescriptor]) -> list[ReceiptOrError]:
        """Score a batch in one call (the fast path); one entry per descriptor, in order.

        Each receipt must answer its own descriptor; one that does not becomes that entry's
        ReceiptMismatch. An answer with another number of entries raises ReceiptMismatch.
        """
        sent = list(descriptors)
        answer = self._call(self._stub.ScoreEpisodes, pb.ScoreEpisodesRequest(descriptors=sent))
        return self._protocol.results(answer, sent)

    def stream(self, descriptors: Iterable[EpisodeDescriptor]) -> Iterator[ReceiptOrError]:
        """Pipeline descriptors over the bidi stream; yields one entry per descriptor.

        Answers come in request order; each is bound to its descriptor (``_Protocol.answered``).
        """
        sent: deque[EpisodeDescriptor] = deque()

        def requests() -> Iterator[pb.StreamEpisodesRequest]:
            for descriptor in descriptors:
                sent.append(descriptor)
                yield pb.StreamEpisodesRequest(descriptor=descriptor)

        call = self._stub.StreamEpisodes(requests(), metadata=self._protocol.metadata)
        try:
            for answer in call:
                yield self._protocol.answered(sent, answer.result)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it when we stopped reading

    def get_receipt(
        self,
        *,
        receipt_id: str | None = None,
        episode_id: str | None = None,
        answers: EpisodeDescriptor | None = None,
    ) -> VerifiedReceipt:
        """A stored receipt by receipt id or episode id, verified and bound to the request.

        The receipt must be the one asked for: its receipt id, or its episode. Given both ids,
        the receipt id is looked up and the episode checked too; given ``answers`` (a
        descriptor), the receipt must also answer it: checkpoint, update and contract.
        Raises ReceiptMismatch otherwise.
        """
        request, expected = self._protocol.get_receipt_request(receipt_id, episode_id, answers)
        answer = self._call(self._stub.GetReceipt, request)
        return self._protocol.verify(answer.envelope, expected)

    def grade_openai(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The grade(sample, item) -> float mirror; raises Unscored rather than return 0.0.

        The score is the verified receipt's, and the receipt must answer the episode the item
        names (ReceiptMismatch otherwise).
        """
        request, expected = self._protocol.grade_request(sample, item)
        answer = self._call(self._stub.GradeOpenAI, request)
        return self._protocol.grade(answer, expected)


class AsyncWorkerClient:
    """asyncio client for ``RewardWorkerService``."""

    def __init__(
        self,
        target: str,
        *,
        token: str,
        trust: TrustSet,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        channel: grpc.aio.Channel | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``tls`` makes the channel TLS (mutual with a client certificate); a ready ``channel``
        is used as given, so the two cannot be combined."""
        self._protocol = _Protocol(token, trust, timeout, retries)
        _one_channel_source(channel, tls)
        self._channel = channel or aio_channel(target, tls, message_size_options())
        self._stub = RewardWorkerServiceStub(self._channel)

    async def __aenter__(self) -> AsyncWorkerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def _call(
        self,
        method: Callable[..., Awaitable[_T]],
        request: Any,
        *,
        auth: bool = True,
        attempts: _Attempts | None = None,
    ) -> _T:
        attempt = 0
        while True:
            if attempts is not None:
                attempts.count = attempt + 1
            try:
                return await method(
                    request,
                    timeout=self._protocol.timeout,
                    metadata=self._protocol.metadata if auth else None,
                )
            except grpc.RpcError as exc:
                if _is_unavailable(exc) and attempt < self._protocol.retries:
                    await asyncio.sleep(self._protocol.backoff(attempt))
                    attempt += 1
                    continue
                raise from_rpc_error(exc) from None

    async def health(self) -> pb.HealthResponse:
        """The worker's key id, contract digest, tier and certificate state."""
        return await self._call(self._stub.Health, pb.HealthRequest(), auth=False)

    async def begin(
        self, episode_id: str, reward_contract_digest: str, oracle_identity: Mapping[str, str]
    ) -> pb.BeginEpisodeResponse:
        """Record the baseline read for ``oracle_identity`` before the rollout (R-W-1)."""
        request = pb.BeginEpisodeRequest(
            episode_id=episode_id,
            reward_contract_digest=reward_contract_digest,
            oracle_identity=dict(oracle_identity),
        )
        return await self._call(self._stub.BeginEpisode, request)

    async def score(self, descriptor: EpisodeDescriptor) -> VerifiedReceipt:
        """Score one episode; see :meth:`WorkerClient.score`."""
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = _Attempts()
        try:
            answer = await self._call(self._stub.ScoreEpisode, request, attempts=attempts)
        except DuplicateEpisode as exc:
            if not self._protocol.recoverable(exc, attempts):
                raise
            return await self.recover(exc, descriptor)
        return self._protocol.verify(answer.envelope, ExpectedReceipt.for_descriptor(descriptor))

    async def recover(
        self, duplicate: DuplicateEpisode, descriptor: EpisodeDescriptor
    ) -> VerifiedReceipt:
        """The stored receipt answering ``descriptor``; see :meth:`WorkerClient.recover`."""
        stored = await self.get_receipt(
            receipt_id=duplicate.metadata.get("receipt_id") or None,
            episode_id=descriptor.episode_id,
        )
        return self._protocol.own(stored, duplicate, descriptor)

    async def score_many(self, descriptors: Iterable[EpisodeDescriptor]) -> list[ReceiptOrError]:
        """Score a batch in one call; see :meth:`WorkerClient.score_many`."""
        sent = list(descriptors)
        request = pb.ScoreEpisodesRequest(descriptors=sent)
        answer = await self._call(self._stub.ScoreEpisodes, request)
        return self._protocol.results(answer, sent)

    async def stream(
        self, descriptors: AsyncIterable[EpisodeDescriptor] | Iterable[EpisodeDescriptor]
    ) -> AsyncIterator[ReceiptOrError]:
        """Pipeline descriptors over the bidi stream; see :meth:`WorkerClient.stream`."""
        sent: deque[EpisodeDescriptor] = deque()

        async def requests() -> AsyncIterator[pb.StreamEpisodesRequest]:
            if isinstance(descriptors, AsyncIterable):
                async for descriptor in descriptors:
                    sent.append(descriptor)
                    yield pb.StreamEpisodesRequest(descriptor=descriptor)
            else:
                for descriptor in descriptors:
                    sent.append(descriptor)
                    yield pb.StreamEpisodesRequest(descriptor=descriptor)

        call = self._stub.StreamEpisodes(requests(), metadata=self._protocol.metadata)
        try:
            async for answer in call:
                yield self._protocol.answered(sent, answer.result)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it when we stopped reading

    async def get_receipt(
        self,
        *,
        receipt_id: str | None = None,
        episode_id: str | None = None,
        answers: EpisodeDescriptor | None = None,
    ) -> VerifiedReceipt:
        """A stored receipt, verified and bound; see :meth:`WorkerClient.get_receipt`."""
        request, expected = self._protocol.get_receipt_request(receipt_id, episode_id, answers)
        answer = await self._call(self._stub.GetReceipt, request)
        return self._protocol.verify(answer.envelope, expected)

    async def grade_openai(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The grade(sample, item) -> float mirror; see :meth:`WorkerClient.grade_openai`."""
        request, expected = self._protocol.grade_request(sample, item)
        answer = await self._call(self._stub.GradeOpenAI, request)
        return self._protocol.grade(answer, expected)


def _one_channel_source(given: object, tls: ClientTls | None) -> None:
    """Refuse a ready channel together with TLS settings: the channel would silently win."""
    if given is not None and tls is not None:
        raise ValidationError("give a channel or tls settings, not both")


def message_size_options() -> list[tuple[str, int]]:
    """The gRPC send/receive caps (:data:`MAX_MESSAGE_BYTES`): clients' channels and the
    services' servers use the same ones."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
