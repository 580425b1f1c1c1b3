"""Python clients for the reward worker, sync and asyncio (R-T-5).

Both clients attach the bearer token, put a deadline on every call, retry only on UNAVAILABLE,
verify every receipt's signature against the pinned worker key, and check that the receipt
answers the request it came back for (its episode, checkpoint, policy update and contract, or
the receipt id asked for: :func:`rewardseal.core.receipts.check_receipt_answers`) before handing it
out. A signature alone proves who wrote a receipt, not which request it answers. The request
building and answer checking live in one place (:mod:`rewardseal.rpc.worker_protocol`) so the two
transports cannot drift apart. Channels are plaintext or, given a
:class:`~rewardseal.rpc.tls.ClientTls`, TLS. Begins can be batched (``begin_many``) or travel on the
scoring stream with the descriptors.
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
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import grpc

from rewardseal.core.errors import DuplicateEpisode, ValidationError
from rewardseal.core.receipts import ExpectedReceipt
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.connection import WorkerConnection
from rewardseal.rpc.status import from_rpc_error
from rewardseal.rpc.tls import ClientTls, aio_channel
from rewardseal.rpc.tls import channel as tls_channel
from rewardseal.rpc.worker_protocol import (
    Attempts,
    BeginOrError,
    ReceiptOrError,
    StreamEntry,
    StreamItem,
    VerifiedReceipt,
    WorkerProtocol,
    chunked,
    is_unavailable,
    make_begin,
    retry_backoff,
)
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.worker_service_pb2_grpc import RewardWorkerServiceStub

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MESSAGE_BYTES",
    "AsyncWorkerClient",
    "BeginOrError",
    "ReceiptOrError",
    "StreamEntry",
    "StreamItem",
    "VerifiedReceipt",
    "WorkerClient",
    "WorkerConnection",
    "make_begin",
    "make_descriptor",
    "message_size_options",
    "retry_backoff",
]

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_RETRIES = 3
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_T = TypeVar("_T")


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
    return descriptor


class _FromConnection:
    """How both clients are built from one :class:`WorkerConnection` (a ready file or the
    environment), and the contract digest that came with it."""

    connection: WorkerConnection | None
    """Where the client came from, when built by :meth:`connect` (None: loose arguments)."""

    if TYPE_CHECKING:  # both clients' constructors take this; connect() calls it

        def __init__(self, target: str, *, token: str, trust: TrustSet, **options: Any) -> None: ...

    @classmethod
    def connect(cls, connection: WorkerConnection, **options: Any) -> Self:
        """A client for ``connection``; ``options`` are ``timeout`` and ``retries``. Build an
        asyncio client inside the event loop that will use it (a channel belongs to one loop)."""
        client = cls(connection.target, **connection.client_arguments(), **options)
        client.connection = connection
        return client

    @classmethod
    def from_ready_file(
        cls,
        path: Path | str,
        *,
        target: str | None = None,
        tls: ClientTls | None = None,
        **options: Any,
    ) -> Self:
        """A client for the worker whose ready file is ``path`` (address, token, pinned key,
        contract digest: :meth:`WorkerConnection.from_ready_file`)."""
        return cls.connect(
            WorkerConnection.from_ready_file(path, target=target, tls=tls), **options
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Self:
        """A client for the worker the environment names (:meth:`WorkerConnection.from_env`)."""
        return cls.connect(WorkerConnection.from_env(environ), **options)

    @property
    def reward_contract_digest(self) -> str:
        """The contract digest of the connection this client was built from.

        Raises:
            ValidationError: the client was built from loose arguments, which name no contract.
        """
        if self.connection is None:
            raise ValidationError(
                "this client was built from loose arguments and names no contract digest; build "
                "it with from_ready_file, from_env or connect"
            )
        return self.connection.reward_contract_digest


class WorkerClient(_FromConnection):
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
        self._protocol = WorkerProtocol(token, trust, timeout, retries)
        _one_channel_source(channel, tls)
        self._channel = channel or tls_channel(target, tls, message_size_options())
        self._stub = RewardWorkerServiceStub(self._channel)
        self.connection: WorkerConnection | None = None
        """Where the client came from, when built by :meth:`connect` (the contract digest)."""

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
        attempts: Attempts | None = None,
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
                if is_unavailable(exc) and attempt < self._protocol.retries:
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
        request = make_begin(episode_id, reward_contract_digest, oracle_identity)
        return self._protocol.begun_one(self._call(self._stub.BeginEpisode, request), request)

    def begin_many(self, items: Iterable[pb.BeginEpisodeRequest]) -> list[BeginOrError]:
        """Begin many episodes (:func:`make_begin`); one entry per item, in order: the
        registration or that item's error.

        One BeginEpisodes call per :data:`~rewardseal.rpc.worker_protocol.MAX_BATCH_ITEMS` items,
        each one store transaction. Each answer must name its item's episode (else that entry
        is a ReceiptMismatch). A call that fails as a whole raises its error; the chunks before
        it stay registered, and beginning them again is idempotent.
        """
        entries: list[BeginOrError] = []
        for chunk in chunked(items):
            request = pb.BeginEpisodesRequest(items=chunk)
            answer = self._call(self._stub.BeginEpisodes, request)
            entries.extend(self._protocol.begun_many(answer, chunk))
        return entries

    def score(self, descriptor: EpisodeDescriptor) -> VerifiedReceipt:
        """Score one episode; the receipt must answer ``descriptor`` (ReceiptMismatch if not).

        A retried call's duplicate is recovered by :meth:`recover` (``WorkerProtocol.recoverable``).
        """
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = Attempts()
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
        checkpoint, update or contract raises ``duplicate``: see ``WorkerProtocol.own``.
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

    def stream(self, items: Iterable[StreamItem]) -> Iterator[StreamEntry]:
        """Pipeline descriptors, and begins (:func:`make_begin`), over the bidi stream; yields
        one entry per item: a receipt or error for a descriptor, a registration or error for a
        begin.

        The worker applies and answers the items in order, so a begin followed by its
        episode's descriptor scores against that begin's baseline. Each answer is bound to its
        item (``WorkerProtocol.answered``).
        """
        sent: deque[StreamItem] = deque()

        def requests() -> Iterator[pb.StreamEpisodesRequest]:
            for item in items:
                sent.append(item)
                yield self._protocol.stream_request(item)

        call = self._stub.StreamEpisodes(requests(), metadata=self._protocol.metadata)
        try:
            for answer in call:
                yield self._protocol.answered(sent, answer)
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


class AsyncWorkerClient(_FromConnection):
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
        self._protocol = WorkerProtocol(token, trust, timeout, retries)
        _one_channel_source(channel, tls)
        self._channel = channel or aio_channel(target, tls, message_size_options())
        self._stub = RewardWorkerServiceStub(self._channel)
        self.connection: WorkerConnection | None = None
        """Where the client came from, when built by :meth:`connect` (the contract digest)."""

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
        attempts: Attempts | None = None,
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
                if is_unavailable(exc) and attempt < self._protocol.retries:
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
        request = make_begin(episode_id, reward_contract_digest, oracle_identity)
        answer = await self._call(self._stub.BeginEpisode, request)
        return self._protocol.begun_one(answer, request)

    async def begin_many(self, items: Iterable[pb.BeginEpisodeRequest]) -> list[BeginOrError]:
        """Begin many episodes; see :meth:`WorkerClient.begin_many`."""
        entries: list[BeginOrError] = []
        for chunk in chunked(items):
            request = pb.BeginEpisodesRequest(items=chunk)
            answer = await self._call(self._stub.BeginEpisodes, request)
            entries.extend(self._protocol.begun_many(answer, chunk))
        return entries

    async def score(self, descriptor: EpisodeDescriptor) -> VerifiedReceipt:
        """Score one episode; see :meth:`WorkerClient.score`."""
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = Attempts()
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
        self, items: AsyncIterable[StreamItem] | Iterable[StreamItem]
    ) -> AsyncIterator[StreamEntry]:
        """Pipeline descriptors and begins over the bidi stream; see :meth:`WorkerClient.stream`."""
        sent: deque[StreamItem] = deque()

        async def requests() -> AsyncIterator[pb.StreamEpisodesRequest]:
            if isinstance(items, AsyncIterable):
                async for item in items:
                    sent.append(item)
                    yield self._protocol.stream_request(item)
            else:
                for item in items:
                    sent.append(item)
                    yield self._protocol.stream_request(item)

        call = self._stub.StreamEpisodes(requests(), metadata=self._protocol.metadata)
        try:
            async for answer in call:
                yield self._protocol.answered(sent, answer)
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
