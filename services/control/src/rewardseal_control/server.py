"""Assemble and run the control plane's ``grpc.aio`` server: auth with roles, health, reflection.

The serving plumbing (message-size caps, health, reflection, graceful stop) is
:mod:`rewardseal_server.serving`; what is the control plane's own is here: its two services
(``ControlPlaneService`` and ``RewardIntegrityService``), the bearer check with roles, and the
servicers' start (a fresh revocation list; the built-in integrity revisions and the audit
runner) and close (the watch streams, the runner). Who may call what is
:mod:`rewardseal_control.roles`.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from rewardseal.v1 import (
    control_service_pb2,
    control_service_pb2_grpc,
    integrity_pb2,
    integrity_pb2_grpc,
)
from rewardseal_control.integrity.service import RewardIntegrityServicer
from rewardseal_control.roles import control_tokens, roles_by_method
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_server.serving import RunningServer, start_grpc_server
from rewardseal_server.tls import ServerTls

SERVICE_NAME = control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"].full_name
INTEGRITY_SERVICE_NAME = integrity_pb2.DESCRIPTOR.services_by_name[
    "RewardIntegrityService"
].full_name


async def start_control_server(
    servicer: ControlPlaneServicer,
    *,
    admin_token: str,
    token: str,
    worker_token: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
    tls: ServerTls | None = None,
    integrity: RewardIntegrityServicer | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningServer:
    """Start serving ``servicer`` on ``host:port`` (0 picks a free port).

    ``admin_token`` gets role ``admin`` (every RPC); ``token`` gets role ``trainer`` and
    ``worker_token`` (when given) role ``worker``
    (:func:`~rewardseal_control.roles.control_tokens`), each limited to what
    :data:`~rewardseal_control.roles.ROLES_BY_METHOD` allows it (anything else answers
    PERMISSION_DENIED). The servicer's control plane is started once the port
    is bound; stopping the server closes it (watch streams never end on their own, so they are
    ended before the server stops and the stop need not wait for them). With ``tls`` it serves
    TLS, or mutual TLS when ``tls`` names a client CA. ``integrity`` serves
    ``RewardIntegrityService`` (default: one over the servicer's store, key and clock).
    ``interceptors`` go before the bearer check (the metrics' interceptor, which then counts
    refused calls too).

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
    """
    tokens = control_tokens(admin_token=admin_token, token=token, worker_token=worker_token)
    # The interceptor records each call's role once; the servicers read it for the audit log
    # (rewardseal_control.roles.caller_actor) and never see a token.
    interceptor = BearerAuthInterceptor(tokens, roles_by_method=roles_by_method())
    if integrity is None:
        plane = servicer.plane
        integrity = RewardIntegrityServicer(plane.store, plane.key, clock=plane.clock)
    integrity_servicer = integrity

    def add_servicers(server: grpc.aio.Server) -> None:
        control_service_pb2_grpc.add_ControlPlaneServiceServicer_to_server(servicer, server)
        integrity_pb2_grpc.add_RewardIntegrityServiceServicer_to_server(integrity_servicer, server)

    async def on_start() -> None:
        await servicer.plane.start()
        await integrity_servicer.start()

    async def on_stop() -> None:
        await integrity_servicer.close()
        await servicer.plane.close()

    return await start_grpc_server(
        add_servicers=add_servicers,
        service_names=(SERVICE_NAME, INTEGRITY_SERVICE_NAME),
        interceptors=(*interceptors, interceptor),
        host=host,
        port=port,
        reflection=reflection,
        tls=tls,
        on_start=on_start,
        on_stop=on_stop,
    )
