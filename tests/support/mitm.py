"""A real gRPC man in the middle for receipt-binding attack tests.

A worker-shaped ``grpc.aio`` server that forwards every call to the real worker (bearer token
and all) and lets a test rewrite what goes up and what comes back: swap the entries of a batch,
reorder a stream, answer GetReceipt with an envelope it kept from an earlier call, lose an
answer after the worker committed it. Nothing is signed here: every envelope it hands out was
signed by the real worker, so the client's signature check passes and only the binding of an
answer to its request can catch the attack.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.receipt_pb2 import SignedEnvelope

Context = grpc.aio.ServicerContext[Any, Any]
RequestHook = Callable[[str, Any], Any]
AnswerHook = Callable[[str, Any, Any], Any]
StreamHook = Callable[[list[pb.StreamEpisodesResponse]], list[pb.StreamEpisodesResponse]]


def _passthrough_request(method: str, request: Any) -> Any:
    return request


def _passthrough_answer(method: str, request: Any, answer: Any) -> Any:
    return answer


def _passthrough_stream(answers: list[pb.StreamEpisodesResponse]) -> list[Any]:
    return answers


@dataclass
class Tamper:
    """What the man in the middle does to each call; by default it changes nothing.

    ``request(method, request)`` returns the request forwarded to the worker;
    ``answer(method, request, answer)`` returns the answer sent back (``request`` as the client
    sent it); ``stream(answers)`` returns the stream's answers, all collected first;
    ``lose[method]`` answers that many calls UNAVAILABLE after the worker has answered them.
    """

    request: RequestHook = _passthrough_request
    answer: AnswerHook = _passthrough_answer
    stream: StreamHook = _passthrough_stream
    lose: Counter[str] = field(default_factory=Counter)


def _envelopes(answer: Any) -> list[SignedEnvelope]:
    """Copies of every signed envelope one answer carries (a hook may then edit the answer)."""
    if isinstance(answer, pb.ScoreEpisodesResponse):
        found = [r.envelope for r in answer.results if r.HasField("envelope")]
    elif isinstance(answer, pb.StreamEpisodesResponse):
        found = [answer.result.envelope] if answer.result.HasField("envelope") else []
    elif "envelope" in answer.DESCRIPTOR.fields_by_name and answer.HasField("envelope"):
        found = [answer.envelope]
    else:
        found = []
    return [SignedEnvelope.FromString(envelope.SerializeToString()) for envelope in found]


class MitmServicer(pb_grpc.RewardWorkerServiceServicer):
    """Forwards each RPC to ``upstream``, through the hooks of ``tamper``."""

    def __init__(self, upstream: pb_grpc.RewardWorkerServiceStub, tamper: Tamper) -> None:
        self.upstream = upstream
        self.tamper = tamper
        self.kept: list[SignedEnvelope] = []
        """Every envelope the worker sent through, in order (material for replays)."""

    @staticmethod
    def _auth(context: Context) -> tuple[tuple[str, str | bytes], ...]:
        return tuple((k, v) for k, v in context.invocation_metadata() or () if k == "authorization")

    async def _forward(self, method: str, request: Any, context: Context) -> Any:
        call = getattr(self.upstream, method)
        try:
            answer = await call(self.tamper.request(method, request), metadata=self._auth(context))
        except grpc.aio.AioRpcError as exc:
            # Pass the worker's status through whole: code, message and ErrorInfo details.
            trailers = tuple(exc.trailing_metadata() or ())
            await context.abort(exc.code(), exc.details() or "", trailers)
        self.kept.extend(_envelopes(answer))
        if self.tamper.lose[method] > 0:
            self.tamper.lose[method] -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the answer was lost")
        return self.tamper.answer(method, request, answer)

    async def Health(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("Health", request, context)

    async def BeginEpisode(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("BeginEpisode", request, context)

    async def BeginEpisodes(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("BeginEpisodes", request, context)

    async def ScoreEpisode(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("ScoreEpisode", request, context)

    async def ScoreEpisodes(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("ScoreEpisodes", request, context)

    async def GetReceipt(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("GetReceipt", request, context)

    async def GradeOpenAI(self, request: Any, context: Context) -> Any:  # noqa: N802
        return await self._forward("GradeOpenAI", request, context)

    async def StreamEpisodes(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.StreamEpisodesRequest], context: Context
    ) -> AsyncIterator[pb.StreamEpisodesResponse]:
        async def upward() -> AsyncIterator[pb.StreamEpisodesRequest]:
            async for request in request_iterator:
                yield self.tamper.request("StreamEpisodes", request)

        # The generated stub is typed for blocking channels; on a grpc.aio channel it is async.
        call: Any = self.upstream.StreamEpisodes(upward(), metadata=self._auth(context))  # type: ignore[arg-type]
        answers = [answer async for answer in call]
        for answer in answers:
            self.kept.extend(_envelopes(answer))
        for answer in self.tamper.stream(answers):
            yield answer


@dataclass
class Mitm:
    """A running man in the middle: dial ``target`` instead of the worker's."""

    target: str
    servicer: MitmServicer

    @property
    def tamper(self) -> Tamper:
        return self.servicer.tamper

    @property
    def kept(self) -> list[SignedEnvelope]:
        return self.servicer.kept


@asynccontextmanager
async def man_in_the_middle(
    worker_target: str, tamper: Tamper | None = None
) -> AsyncIterator[Mitm]:
    """Start a man in the middle on a free loopback port in front of ``worker_target``."""
    channel = grpc.aio.insecure_channel(worker_target)
    servicer = MitmServicer(pb_grpc.RewardWorkerServiceStub(channel), tamper or Tamper())
    server = grpc.aio.server()
    pb_grpc.add_RewardWorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield Mitm(target=f"127.0.0.1:{port}", servicer=servicer)
    finally:
        await server.stop(0)
        await channel.close()
