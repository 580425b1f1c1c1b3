"""Assemble and run the control plane's ``grpc.aio`` server: auth with roles, health, reflection.

The serving plumbing (message-size caps, health, reflection, graceful stop) is
:mod:`rewardseal_server.serving`; what is the control plane's own is here: its service, the
bearer check with roles, and the servicer's start (a fresh revocation list) and close (the watch
streams).
"""

from __future__ import annotations

import grpc

from rewardseal.tls import ServerTls
from rewardseal.v1 import control_service_pb2, control_service_pb2_grpc
from rewardseal_control.service import (
    ADMIN_ROLE,
    TRAINER_ROLE,
    WORKER_ROLE,
    ControlPlaneServicer,
)
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_server.serving import RunningServer, start_grpc_server

SERVICE_NAME = control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"].full_name
_EVERYONE = frozenset({ADMIN_ROLE, TRAINER_ROLE, WORKER_ROLE})
_ADMIN_ONLY = frozenset({ADMIN_ROLE})
ROLES_BY_METHOD: dict[str, frozenset[str]] = {
    # Contracts are immutable and digest-checked: registering one trusts nothing new.
    "RegisterContract": _EVERYONE,
    "GetContract": _EVERYONE,
    "ListContracts": _EVERYONE,
    # The worker role registers its own WORKER key only; the servicer refuses any other role
    # for it (the request is not visible here).
    "RegisterIssuerKey": frozenset({ADMIN_ROLE, WORKER_ROLE}),
    "ListIssuerKeys": _EVERYONE,
    "RetireIssuerKey": _ADMIN_ONLY,
    "IssueCertificate": _ADMIN_ONLY,
    "GetCertificate": _EVERYONE,
    "ListCertificates": _EVERYONE,
    "RevokeCertificate": _ADMIN_ONLY,
    "GetRevocationList": _EVERYONE,
    "WatchRevocations": _EVERYONE,
    # Control verifies every receipt against the registered worker keys before storing it
    # (R-C-5), so a trainer forwarding receipts it was given adds nothing unverified.
    "RecordReceipts": _EVERYONE,
    # The index is for trainers and operators; a worker never needs to read it back.
    "ListReceipts": frozenset({ADMIN_ROLE, TRAINER_ROLE}),
    "GetReceiptSummary": frozenset({ADMIN_ROLE, TRAINER_ROLE}),
}
"""Which roles may call each RPC. Every method of the service is named, so a new RPC is refused
to everyone until it is given its roles here (tests check the map covers the service)."""
ADMIN_METHODS = tuple(name for name, roles in ROLES_BY_METHOD.items() if roles == _ADMIN_ONLY)
"""RPCs that change who is trusted or what is certified: the admin credential only."""


def roles_by_method() -> dict[str, frozenset[str]]:
    """The interceptor's full method path -> allowed roles map; a method of the service missing
    from :data:`ROLES_BY_METHOD` (a new RPC) gets no role at all (fail closed)."""
    service = control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"]
    return {
        f"/{SERVICE_NAME}/{method.name}": ROLES_BY_METHOD.get(method.name, frozenset())
        for method in service.methods
    }


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
) -> RunningServer:
    """Start serving ``servicer`` on ``host:port`` (0 picks a free port).

    ``admin_token`` gets role ``admin`` (every RPC); ``token`` gets role ``trainer`` and
    ``worker_token`` (when given) role ``worker``, each limited to what :data:`ROLES_BY_METHOD`
    allows it (anything else answers PERMISSION_DENIED). The servicer is started once the port
    is bound; stopping the server closes it (watch streams never end on their own, so they are
    ended before the server stops and the stop need not wait for them). With ``tls`` it serves
    TLS, or mutual TLS when ``tls`` names a client CA.

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
    """
    tokens = {admin_token: ADMIN_ROLE, token: TRAINER_ROLE}
    if worker_token is not None:
        if worker_token in tokens:
            raise ValueError("the worker token must differ from the admin and client tokens")
        tokens[worker_token] = WORKER_ROLE
    if len(tokens) < 2:
        raise ValueError("the admin token and the client token must differ")
    interceptor = BearerAuthInterceptor(tokens, roles_by_method=roles_by_method())
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
        tls=tls,
        on_start=servicer.start,
        on_stop=servicer.close,
    )
