"""Assemble and run the worker's ``grpc.aio`` server: auth, health, optional reflection, limits."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rewardseal.auth import BearerAuthInterceptor
from rewardseal.v1 import worker_service_pb2, worker_service_pb2_grpc
from rewardseal_worker.engine import Scorer
from rewardseal_worker.service import RewardWorkerServicer

SERVICE_NAME = worker_service_pb2.DESCRIPTOR.services_by_name["RewardWorkerService"].full_name
HEALTH_RPC = f"/{SERVICE_NAME}/Health"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass
class RunningWorker:
    """A started server and the port it listens on."""

    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer

    async def stop(self, grace: float | None = 1.0) -> None:
        """Mark NOT_SERVING, then stop, letting in-flight calls finish within ``grace``."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


async def start_worker_server(
    scorer: Scorer,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
) -> RunningWorker:
    """Start serving ``scorer`` on ``host:port`` (0 picks a free port)."""
    server = grpc.aio.server(
        interceptors=[BearerAuthInterceptor({token: "trainer"}, open_methods={HEALTH_RPC})],
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    worker_service_pb2_grpc.add_RewardWorkerServiceServicer_to_server(
        RewardWorkerServicer(scorer), server
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection:
        from grpc_reflection.v1alpha import reflection as grpc_reflection

        grpc_reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), server
        )
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningWorker(server=server, port=bound, health=health_servicer)
