"""The client for the reward worker (R-T-5), written once for asyncio: ``AsyncWorkerClient``
here, ``WorkerClient`` in its generated blocking twin (:mod:`rewardseal.rpc.aio`).

The client attaches the bearer token, puts a deadline on every call, retries only on UNAVAILABLE,
verifies every receipt's signature against the pinned worker key, and checks that the receipt
answers the request it came back for (its episode, checkpoint, policy update and contract, or
the receipt id asked for: :func:`rewardseal.core.receipts.check_receipt_answers`) before handing
it out. A signature alone proves who wrote a receipt, not which request it answers. The request
building and answer checking live in :mod:`rewardseal.rpc.worker_protocol`, the call loops in
:mod:`rewardseal.rpc.aio.transport`. Channels are plaintext or, given a
:class:`~rewardseal.rpc.tls.ClientTls`, TLS. Begins can be batched (``begin_many``) or travel on
the scoring stream with the descriptors.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any

import grpc

from rewardseal.core.errors import DuplicateEpisode
from rewardseal.core.signing import TrustSet
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.rpc.aio.transport import AsyncTransport
from rewardseal.rpc.call_rules import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    Attempts,
    one_channel_source,
)
from rewardseal.rpc.connection import FromConnection, WorkerConnection
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_protocol import (
    BeginOrError,
    ReceiptOrError,
    StreamEntry,
    StreamItem,
    VerifiedReceipt,
    WorkerProtocol,
    chunked,
    make_begin,
)
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.worker_service_pb2_grpc import RewardWorkerServiceStub

__all__ = ["AsyncWorkerClient"]


class AsyncWorkerClient(FromConnection, AsyncTransport[WorkerProtocol]):
    """asyncio client for ``RewardWorkerService``."""

    STUB = RewardWorkerServiceStub

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
        protocol = WorkerProtocol(token, trust, timeout, retries)
        one_channel_source(channel, tls)
        self._open(target, protocol, channel, tls)
        self.connection: WorkerConnection | None = None
        """Where the client came from, when built by :meth:`connect` (the contract digest)."""

    async def health(self) -> pb.HealthResponse:
        """The worker's key id, contract digest, tier and certificate state."""
        answer: pb.HealthResponse = await self._call("Health", pb.HealthRequest(), auth=False)
        return answer

    async def begin(
        self,
        episode_id: str,
        reward_contract_digest: str,
        oracle_identity: Mapping[str, str],
        *,
        task_parameters: Mapping[str, ParameterValue] | None = None,
    ) -> pb.BeginEpisodeResponse:
        """Record the baseline read for ``oracle_identity`` before the rollout (R-W-1), and bind
        the episode's ``task_parameters`` (plain str/int/float/bool values, R-W-18): its receipt
        must then carry their digest (ReceiptMismatch if not)."""
        request = make_begin(episode_id, reward_contract_digest, oracle_identity, task_parameters)
        answer = await self._call("BeginEpisode", request)
        return self._protocol.begun_one(answer, request)

    async def begin_many(self, items: Iterable[pb.BeginEpisodeRequest]) -> list[BeginOrError]:
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
            answer = await self._call("BeginEpisodes", request)
            entries.extend(self._protocol.begun_many(answer, chunk))
        return entries

    async def score(self, descriptor: EpisodeDescriptor) -> VerifiedReceipt:
        """Score one episode; the receipt must answer ``descriptor`` (ReceiptMismatch if not).

        A retried call's duplicate is recovered by :meth:`recover` (``WorkerProtocol.recoverable``).
        """
        request = pb.ScoreEpisodeRequest(descriptor=descriptor)
        attempts = Attempts()
        try:
            answer = await self._call("ScoreEpisode", request, attempts=attempts)
        except DuplicateEpisode as exc:
            if not self._protocol.recoverable(exc, attempts):
                raise
            return await self.recover(exc, descriptor)
        return self._protocol.verify(answer.envelope, self._protocol.bound.expected(descriptor))

    async def recover(
        self, duplicate: DuplicateEpisode, descriptor: EpisodeDescriptor
    ) -> VerifiedReceipt:
        """The receipt already stored for ``descriptor``'s episode, when it answers ``descriptor``.

        Fetched by the receipt id ``duplicate`` names (else by episode id) and bound to that
        receipt id and episode (ReceiptMismatch otherwise). A stored receipt for another
        checkpoint, update or contract raises ``duplicate``: see ``WorkerProtocol.own``.
        """
        stored = await self.get_receipt(
            receipt_id=duplicate.metadata.get("receipt_id") or None,
            episode_id=descriptor.episode_id,
        )
        return self._protocol.own(stored, duplicate, descriptor)

    async def score_many(self, descriptors: Iterable[EpisodeDescriptor]) -> list[ReceiptOrError]:
        """Score a batch in one call (the fast path); one entry per descriptor, in order.

        Each receipt must answer its own descriptor; one that does not becomes that entry's
        ReceiptMismatch. An answer with another number of entries raises ReceiptMismatch.
        """
        sent = list(descriptors)
        request = pb.ScoreEpisodesRequest(descriptors=sent)
        answer = await self._call("ScoreEpisodes", request)
        return self._protocol.results(answer, sent)

    async def stream(
        self, items: AsyncIterable[StreamItem] | Iterable[StreamItem]
    ) -> AsyncIterator[StreamEntry]:
        """Pipeline descriptors, and begins (:func:`make_begin`), over the bidi stream; yields
        one entry per item: a receipt or error for a descriptor, a registration or error for a
        begin.

        The worker applies and answers the items in order, so a begin followed by its
        episode's descriptor scores against that begin's baseline. Each answer is bound to its
        item (``WorkerProtocol.answered``).
        """
        sent: deque[StreamItem] = deque()

        async def requests() -> AsyncIterator[pb.StreamEpisodesRequest]:
            # unasync: async only (the blocking client takes a plain iterable)
            if isinstance(items, AsyncIterable):
                async for item in items:
                    sent.append(item)
                    yield self._protocol.stream_request(item)
                return
            # unasync: end
            for item in items:
                sent.append(item)
                yield self._protocol.stream_request(item)

        async for answer in self._stream("StreamEpisodes", requests()):
            yield self._protocol.answered(sent, answer)

    async def get_receipt(
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
        answer = await self._call("GetReceipt", request)
        return self._protocol.verify(answer.envelope, expected)

    async def grade_openai(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The grade(sample, item) -> float mirror; raises Unscored rather than return 0.0.

        The score is the verified receipt's, and the receipt must answer the episode the item
        names (ReceiptMismatch otherwise).
        """
        request, expected = self._protocol.grade_request(sample, item)
        answer = await self._call("GradeOpenAI", request)
        return self._protocol.grade(answer, expected)
