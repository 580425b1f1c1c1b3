"""Assemble and run the control plane's ``grpc.aio`` server: auth with roles, health, reflection.

The serving plumbing (message-size caps, health, reflection, graceful stop) is
:mod:`rewardseal.serving`; what is the control plane's own is here: its service, the bearer check
with roles, and the servicer's start (a fresh revocation list) and close (the watch streams).
"""

from __future__ import annotations

import grpc

from rewardseal.auth import BearerAuthInterceptor
from rewardseal.serving import RunningServer, start_grpc_server
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


def admin_roles_by_method() -> dict[str, set[str]]:
    """The interceptor's method -> allowed roles map (methods not named accept any token)."""
    return {f"/{SERVICE_NAME}/{name}": {ADMIN_ROLE} for name in ADMIN_METHODS}


async def start_control_server(
    servicer: ControlPlaneServicer,
    *,
    admin_token: str,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
) -> RunningServer:
    """Start serving ``servicer`` on ``host:port`` (0 picks a free port).

    ``admin_token`` gets role ``admin`` (every RPC); ``token`` gets role ``trainer`` (every RPC
    but the admin ones, which answer PERMISSION_DENIED). The servicer is started once the port
    is bound; stopping the server closes it (watch streams never end on their own, so they are
    ended before the server stops and the stop need not wait for them).
    """
    interceptor = BearerAuthInterceptor(
        {admin_token: ADMIN_ROLE, token: TRAINER_ROLE},
        roles_by_method=admin_roles_by_method(),
    )
    # The servicer names the role in the audit log; it asks the interceptor, never sees tokens.
    servicer.role_for = interceptor.role_for

    def add_servicers(server: grpc.aio.Server) -> None:
        control_service_pb2_grpc.add_ControlPlaneServiceServicer_to_server(servicer, server)

    return await start_grpc_server(
        add_servicers=add_servicers,
        service_names=(SERVICE_NAME,),
        interceptors=(interceptor,),
        host=host,
        port=port,
        reflection=reflection,
        on_start=servicer.start,
        on_stop=servicer.close,
    )
