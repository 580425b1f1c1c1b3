"""A TLS front for a running worker's scorer: the worker's servicer and bearer check, served on
a ``grpc.aio`` secure port (mutual TLS when the ``ServerTls`` names a client CA)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_server.tls import ServerTls
from rewardseal_worker.server import HEALTH_RPC
from rewardseal_worker.service import RewardWorkerServicer
from support.worker_stack import RunningStack


@asynccontextmanager
async def secure_front(stack: RunningStack, tls: ServerTls) -> AsyncIterator[str]:
    """Serve ``stack``'s scorer over TLS on a free loopback port; yields ``127.0.0.1:port``."""
    server = grpc.aio.server(
        interceptors=[BearerAuthInterceptor({stack.token: "trainer"}, open_methods={HEALTH_RPC})]
    )
    pb_grpc.add_RewardWorkerServiceServicer_to_server(
        RewardWorkerServicer(stack.app.scorer), server
    )
    port = server.add_secure_port("127.0.0.1:0", tls.credentials())
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)
