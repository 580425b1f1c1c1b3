"""Assemble and run the worker's ``grpc.aio`` server: auth, health, optional reflection, limits.

The serving plumbing (message-size caps, health, reflection, graceful stop) is
:mod:`rewardseal_server.serving`; what is the worker's own is here: its service and its bearer
check, which lets the worker's Health RPC through without a token.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from rewardseal.core.errors import InvalidEpisode
from rewardseal.core.validation import MAX_METADATA_DEPTH
from rewardseal.v1 import worker_service_pb2, worker_service_pb2_grpc
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_server.serving import RunningServer, start_grpc_server
from rewardseal_server.tls import ServerTls
from rewardseal_worker.engine import Scorer
from rewardseal_worker.service import RewardWorkerServicer

SERVICE_NAME = worker_service_pb2.DESCRIPTOR.services_by_name["RewardWorkerService"].full_name
HEALTH_RPC = f"/{SERVICE_NAME}/Health"


def _too_deep() -> InvalidEpisode:
    """A worker request nested past protobuf's parse limit: only episode metadata (and a grader
    item, which carries it) can nest, so it is an episode refused (R-MSG-9)."""
    return InvalidEpisode(
        f"the request nests deeper than protobuf parses; metadata nests at most "
        f"{MAX_METADATA_DEPTH} levels"
    )


async def start_worker_server(
    scorer: Scorer,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
    tls: ServerTls | None = None,
    shared_port: bool = False,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningServer:
    """Start serving ``scorer`` on ``host:port`` (0 picks a free port); over TLS, or mutual
    TLS, when ``tls`` is given; ``shared_port``: bind with SO_REUSEPORT beside the other
    processes of ``serve --processes N`` (never otherwise, see
    :func:`rewardseal_server.serving.start_grpc_server`); ``interceptors`` go before the bearer
    check (the metrics' interceptor, which then counts refused calls too).

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
    """

    def add_servicers(server: grpc.aio.Server) -> None:
        worker_service_pb2_grpc.add_RewardWorkerServiceServicer_to_server(
            RewardWorkerServicer(scorer), server
        )

    return await start_grpc_server(
        add_servicers=add_servicers,
        service_names=(SERVICE_NAME,),
        interceptors=(
            *interceptors,
            BearerAuthInterceptor(
                {token: "trainer"}, open_methods={HEALTH_RPC}, too_deep=_too_deep
            ),
        ),
        host=host,
        port=port,
        reflection=reflection,
        tls=tls,
        reuse_port=shared_port,
    )
