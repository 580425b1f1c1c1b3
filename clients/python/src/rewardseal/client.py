"""Python clients for the reward worker, sync and asyncio (R-T-5).

Both clients attach the bearer token, put a deadline on every call, retry only on UNAVAILABLE,
and verify every receipt's signature against the pinned worker key before handing it out. The
request building and answer checking live in one place (``_Protocol``) so the two transports
cannot drift apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format

from rewardseal.errors import DuplicateEpisode, RewardSealError, ValidationError
from rewardseal.receipts import is_unscored, open_receipt
from rewardseal.rpc_status import from_episode_error, from_rpc_error
from rewardseal.signing import TrustSet
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.v1.worker_service_pb2_grpc import RewardWorkerServiceStub

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_RETRIES = 3
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_T = TypeVar("_T")


@dataclass(frozen=True)
class VerifiedReceipt:
    """A receipt whose envelope verified against the pinned worker key."""

    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope

    @property
    def scalar(self) -> float | None:
        """The scalar reward, or None when the episode is unscored (never 0.0 for it)."""
        return None if is_unscored(self.receipt) else self.receipt.scalar_reward

    @property
    def unscored(self) -> bool:
        """True when the episode carries no scalar and must be dropped, not paid 0."""
        return is_unscored(self.receipt)


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

    def verify(self, envelope: SignedEnvelope) -> VerifiedReceipt:
        return VerifiedReceipt(open_receipt(envelope, self.trust), envelope)

    def result(self, result: pb.EpisodeResult) -> ReceiptOrError:
        if result.HasField("envelope"):
            try:
                return self.verify(result.envelope)
            except RewardSealError as exc:
                return exc
        return from_episode_error(result.error)

    @staticmethod
    def get_receipt_request(receipt_id: str | None, episode_id: str | None) -> pb.GetReceiptRequest:
        if (receipt_id is None) == (episode_id is None):
            raise ValidationError("give exactly one of receipt_id and episode_id")
        if receipt_id is not None:
            return pb.GetReceiptRequest(receipt_id=receipt_id)
        return pb.GetReceiptRequest(episode_id=episode_id or "")

    @staticmethod
    def grade_request(sample: Mapping[str, Any], item: Mapping[str, Any]) -> pb.GradeOpenAIRequest:
        request = pb.GradeOpenAIRequest()
        json_format.ParseDict(dict(sample), request.sample)
        json_format.ParseDict(dict(item), request.item)
        return request

    @staticmethod
    def recoverable(exc: DuplicateEpisode, attempts: _Attempts) -> bool:
        """True when ALREADY_EXISTS answers our own earlier attempt of this very call.

        After an UNAVAILABLE retry the first attempt may have committed before its answer was
        lost; then the stored receipt is ours. Without a retry a duplicate is the caller's
        mistake (e.g. a dataset column reused as an episode id, R-T-4) and must surface.
        """
        return attempts.count > 1 and bool(exc.metadata.get("receipt_id"))

    def backoff(self, attempt: int) -> float:
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
    ) -> None:
        self._protocol = _Protocol(token, trust, timeout, retries)
        self._channel = channel or grpc.insecure_channel(target, options=message_size_options())
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
        """Score one episode (see ``_Protocol.recoverable`` for a retried call's duplicate)."""
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = _Attempts()
        try:
            answer = self._call(self._stub.ScoreEpisode, request, attempts=attempts)
        except DuplicateEpisode as exc:
            if not self._protocol.recoverable(exc, attempts):
                raise
            return self.get_receipt(receipt_id=exc.metadata["receipt_id"])
        return self._protocol.verify(answer.envelope)

    def score_many(self, descriptors: Iterable[EpisodeDescriptor]) -> list[ReceiptOrError]:
        """Score a batch in one call (the fast path); one entry per descriptor, in order."""
        request = pb.ScoreEpisodesRequest(descriptors=list(descriptors))
        answer = self._call(self._stub.ScoreEpisodes, request)
        return [self._protocol.result(result) for result in answer.results]

    def stream(self, descriptors: Iterable[EpisodeDescriptor]) -> Iterator[ReceiptOrError]:
        """Pipeline descriptors over the bidi stream; yields one entry per descriptor."""
        requests = (pb.StreamEpisodesRequest(descriptor=d) for d in descriptors)
        try:
            for answer in self._stub.StreamEpisodes(requests, metadata=self._protocol.metadata):
                yield self._protocol.result(answer.result)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def get_receipt(
        self, *, receipt_id: str | None = None, episode_id: str | None = None
    ) -> VerifiedReceipt:
        """A stored receipt by receipt id or episode id, verified."""
        request = self._protocol.get_receipt_request(receipt_id, episode_id)
        return self._protocol.verify(self._call(self._stub.GetReceipt, request).envelope)

    def grade_openai(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The grade(sample, item) -> float mirror; raises Unscored rather than return 0.0."""
        answer = self._call(self._stub.GradeOpenAI, self._protocol.grade_request(sample, item))
        self._protocol.verify(answer.envelope)
        return answer.score


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
    ) -> None:
        self._protocol = _Protocol(token, trust, timeout, retries)
        self._channel = channel or grpc.aio.insecure_channel(target, options=message_size_options())
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
        """Score one episode (see ``_Protocol.recoverable`` for a retried call's duplicate)."""
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = _Attempts()
        try:
            answer = await self._call(self._stub.ScoreEpisode, request, attempts=attempts)
        except DuplicateEpisode as exc:
            if not self._protocol.recoverable(exc, attempts):
                raise
            return await self.get_receipt(receipt_id=exc.metadata["receipt_id"])
        return self._protocol.verify(answer.envelope)

    async def score_many(self, descriptors: Iterable[EpisodeDescriptor]) -> list[ReceiptOrError]:
        """Score a batch in one call (the fast path); one entry per descriptor, in order."""
        request = pb.ScoreEpisodesRequest(descriptors=list(descriptors))
        answer = await self._call(self._stub.ScoreEpisodes, request)
        return [self._protocol.result(result) for result in answer.results]

    async def stream(
        self, descriptors: AsyncIterable[EpisodeDescriptor] | Iterable[EpisodeDescriptor]
    ) -> AsyncIterator[ReceiptOrError]:
        """Pipeline descriptors over the bidi stream; yields one entry per descriptor."""

        async def requests() -> AsyncIterator[pb.StreamEpisodesRequest]:
            if isinstance(descriptors, AsyncIterable):
                async for descriptor in descriptors:
                    yield pb.StreamEpisodesRequest(descriptor=descriptor)
            else:
                for descriptor in descriptors:
                    yield pb.StreamEpisodesRequest(descriptor=descriptor)

        call = self._stub.StreamEpisodes(requests(), metadata=self._protocol.metadata)
        try:
            async for answer in call:
                yield self._protocol.result(answer.result)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def get_receipt(
        self, *, receipt_id: str | None = None, episode_id: str | None = None
    ) -> VerifiedReceipt:
        """A stored receipt by receipt id or episode id, verified."""
        request = self._protocol.get_receipt_request(receipt_id, episode_id)
        answer = await self._call(self._stub.GetReceipt, request)
        return self._protocol.verify(answer.envelope)

    async def grade_openai(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The grade(sample, item) -> float mirror; raises Unscored rather than return 0.0."""
        request = self._protocol.grade_request(sample, item)
        answer = await self._call(self._stub.GradeOpenAI, request)
        self._protocol.verify(answer.envelope)
        return answer.score


def message_size_options() -> list[tuple[str, int]]:
    """The gRPC send/receive caps (:data:`MAX_MESSAGE_BYTES`): clients' channels and the
    services' servers use the same ones."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
