"""Assemble and run the control plane's ``grpc.aio`` server: auth with roles, health, reflection."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rewardseal.auth import BearerAuthInterceptor
from rewardseal.v1 import control_service_pb2, control_service_pb2_grpc
from rewardseal_control.service import ADMIN_ROLE, TRAINER_ROLE, ControlPlaneServicer

SERVICE_NAME = control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"].full_name
ADMIN_METHODS = (
    "RegisterIssuerKey",
    "RetireIssuerKey",
    "IssueCertificate",
    "RevokeCertificate",
)
"""RPCs that change who is trusted or what is certified: the admin credential only."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def admin_roles_by_method() -> dict[str, set[str]]:
    """The interceptor's method -> allowed roles map (methods not named accept any token)."""
    return {f"/{SERVICE_NAME}/{name}": {ADMIN_ROLE} for name in ADMIN_METHODS}


@dataclass
class RunningControl:
    """A started server, the port it listens on, and its servicer."""

    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    servicer: ControlPlaneServicer

    async def stop(self, grace: float | None = 1.0) -> None:
        """Mark NOT_SERVING, end the watch streams, then stop within ``grace``."""
        await self.health.enter_graceful_shutdown()
        # Watch streams never end on their own; close them first so stop() need not wait.
        await self.servicer.close()
        await self.server.stop(grace)


async def start_control_server(
    servicer: ControlPlaneServicer,
    *,
    admin_token: str,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
) -> RunningControl:
    """Start serving ``servicer`` on ``host:port`` (0 picks a free port).

    ``admin_token`` gets role ``admin`` (every RPC); ``token`` gets role ``trainer`` (every RPC
    but the admin ones, which answer PERMISSION_DENIED).
    """
    interceptor = BearerAuthInterceptor(
        {admin_token: ADMIN_ROLE, token: TRAINER_ROLE},
        roles_by_method=admin_roles_by_method(),
    )
    # The servicer names the role in the audit log; it asks the interceptor, never sees tokens.
    servicer.role_for = interceptor.role_for
    server = grpc.aio.server(
        interceptors=[interceptor],
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    control_service_pb2_grpc.add_ControlPlaneServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection:
        from grpc_reflection.v1alpha import reflection as grpc_reflection

        grpc_reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), server
        )
    bound = server.add_insecure_port(f"{host}:{port}")
    await servicer.start()
    await server.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningControl(server=server, port=bound, health=health_servicer, servicer=servicer)
