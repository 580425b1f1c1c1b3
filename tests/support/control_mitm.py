"""A real gRPC man in the middle between a worker and the control plane.

A ``grpc.aio`` server that forwards every ControlPlaneService call, as raw bytes, to the real
control plane (bearer token and all) and lets a test answer a method itself: hide control's
certificates, or list ones it chose. The signed revocation lists pass through untouched (it
cannot forge them without the organization key), so the worker follows control's real
revocations while everything unsigned is the attacker's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import grpc

from rewardseal.rpc.tls import aio_channel

SERVICE = "/rewardseal.v1.ControlPlaneService/"
STREAMING = frozenset({SERVICE + "WatchRevocations"})
Answer = Callable[[bytes], bytes]
"""Given the request bytes, the answer bytes the man in the middle sends instead."""


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, upstream: grpc.aio.Channel, answers: Mapping[str, Answer]) -> None:
        self._upstream = upstream
        self._answers = answers

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = str(details.method)
        upstream = self._upstream

        def credentials(context: Any) -> tuple[tuple[str, str], ...]:
            return tuple(
                (key, value)
                for key, value in context.invocation_metadata()
                if key == "authorization"
            )

        if method in STREAMING:

            async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
                call = upstream.unary_stream(method)(request, metadata=credentials(context))
                try:
                    async for item in call:
                        yield item
                except grpc.aio.AioRpcError as exc:
                    await context.abort(exc.code(), exc.details() or "")

            return grpc.unary_stream_rpc_method_handler(stream)

        async def unary(request: bytes, context: Any) -> bytes:
            answer = self._answers.get(method.removeprefix(SERVICE))
            if answer is not None:
                return answer(request)
            try:
                forwarded: bytes = await upstream.unary_unary(method)(
                    request, metadata=credentials(context)
                )
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            return forwarded

        return grpc.unary_unary_rpc_method_handler(unary)


@asynccontextmanager
async def control_mitm(target: str, answers: Mapping[str, Answer]) -> AsyncIterator[str]:
    """Serve a man in the middle for control at ``target``; yields its own target.

    ``answers``: method name (``"ListCertificates"``) to what it answers instead of control.
    """
    upstream = aio_channel(target, None)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_Forward(upstream, answers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
        await upstream.close()
