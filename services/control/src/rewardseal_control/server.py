"""Assemble and run the control plane's ``grpc.aio`` server: auth with roles, health, reflection.

The serving plumbing (message-size caps, health, reflection, graceful stop) is
:mod:`rewardseal_server.serving`; what is the control plane's own is here: its two services
(``ControlPlaneService`` and ``RewardIntegrityService``), the bearer check with roles, and the
servicers' start (a fresh revocation list; the built-in integrity revisions and the audit
runner) and close (the watch streams, the runner).
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
from rewardseal_control.integrity_service import RewardIntegrityServicer
from rewardseal_control.service import (
    ADMIN_ROLE,
    TRAINER_ROLE,
    WORKER_ROLE,
    ControlPlaneServicer,
)
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_server.serving import RunningServer, start_grpc_server
from rewardseal_server.tls import ServerTls

SERVICE_NAME = control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"].full_name
INTEGRITY_SERVICE_NAME = integrity_pb2.DESCRIPTOR.services_by_name[
    "RewardIntegrityService"
].full_name
_SERVICES = (
    control_service_pb2.DESCRIPTOR.services_by_name["ControlPlaneService"],
    integrity_pb2.DESCRIPTOR.services_by_name["RewardIntegrityService"],
)
_EVERYONE = frozenset({ADMIN_ROLE, TRAINER_ROLE, WORKER_ROLE})
_ADMIN_ONLY = frozenset({ADMIN_ROLE})
_ADMIN_TRAINER = frozenset({ADMIN_ROLE, TRAINER_ROLE})
ROLES_BY_METHOD: dict[str, frozenset[str]] = {
    # Contracts are immutable and digest-checked: registering one trusts nothing new.
    "RegisterContract": _EVERYONE,
    "GetContract": _EVERYONE,
    "ListContracts": _EVERYONE,
    # The worker role registers its own WORKER key only, with proof that it holds it (R-C-10);
    # the servicer refuses any other role or an unproven key (the request is not visible here).
    # The key writes the receipt index only once admitted: by the admin (ApproveIssuerKey) or
    # an enrollment credential the admin made (CreateEnrollment, R-C-11).
    "RegisterIssuerKey": frozenset({ADMIN_ROLE, WORKER_ROLE}),
    "ListIssuerKeys": _EVERYONE,
    "RetireIssuerKey": _ADMIN_ONLY,
    "ApproveIssuerKey": _ADMIN_ONLY,
    "UnbindIssuerKey": _ADMIN_ONLY,
    "CreateEnrollment": _ADMIN_ONLY,
    "IssueCertificate": _ADMIN_ONLY,
    "GetCertificate": _EVERYONE,
    "ListCertificates": _EVERYONE,
    "RevokeCertificate": _ADMIN_ONLY,
    "GetRevocationList": _EVERYONE,
    "WatchRevocations": _EVERYONE,
    # Control verifies every receipt against the registered worker keys before storing it, and
    # stores it only when that key is admitted and bound to the receipt's contract (R-C-5,
    # R-C-10), so a trainer forwarding receipts it was given adds nothing unverified.
    "RecordReceipts": _EVERYONE,
    # The index is for trainers and operators; a worker never needs to read it back.
    "ListReceipts": frozenset({ADMIN_ROLE, TRAINER_ROLE}),
    "GetReceiptSummary": frozenset({ADMIN_ROLE, TRAINER_ROLE}),
    # Who did what to keys, certificates and integrity: the operators' record, theirs alone.
    "ListAuditLog": _ADMIN_ONLY,
    # RewardIntegrityService (docs/spec.md §12). What decides how a run is judged (revisions),
    # overrides a decision (reviews) or re-runs one (retry, cancel) is the admin's. The trainer
    # side resolves its binding, captures and seals its shards and starts the audit of each
    # boundary (part 2 wires trainers to do exactly that), and reads everything back: it cannot
    # change what a shard or an audit says once stored (immutable rows, sealed shards), nor the
    # rules it is judged by. A worker has no part in integrity: none of it.
    "ValidateRewardSystem": _ADMIN_TRAINER,
    "CreateRewardSystem": _ADMIN_ONLY,
    "GetRewardSystem": _ADMIN_TRAINER,
    "ListRewardSystems": _ADMIN_TRAINER,
    "ListRetentionProtocols": _ADMIN_TRAINER,
    "GetRetentionProtocol": _ADMIN_TRAINER,
    "CreateRetentionProtocol": _ADMIN_ONLY,
    "ListIntegrityProfiles": _ADMIN_TRAINER,
    "GetIntegrityProfile": _ADMIN_TRAINER,
    "CreateIntegrityProfile": _ADMIN_ONLY,
    "ResolveBinding": _ADMIN_TRAINER,
    "AppendSignalRows": _ADMIN_TRAINER,
    "SealSignalShard": _ADMIN_TRAINER,
    "VerifySignalShard": _ADMIN_TRAINER,
    "ListSignalShards": _ADMIN_TRAINER,
    "StartAudit": _ADMIN_TRAINER,
    "GetAudit": _ADMIN_TRAINER,
    "ListAudits": _ADMIN_TRAINER,
    "WatchAudit": _ADMIN_TRAINER,
    "ListAuditSamples": _ADMIN_TRAINER,
    "GetAuditMetrics": _ADMIN_TRAINER,
    "CompareAudits": _ADMIN_TRAINER,
    "VerifyAudit": _ADMIN_TRAINER,
    "CancelAudit": _ADMIN_ONLY,
    "RetryAudit": _ADMIN_ONLY,
    "ReviewDecision": _ADMIN_ONLY,
    "GetDecisionHistory": _ADMIN_TRAINER,
}
"""Which roles may call each RPC of both services (method names are unique across them). Every
method is named, so a new RPC is refused to everyone until it is given its roles here (tests
check the map covers the services)."""
ADMIN_METHODS = tuple(name for name, roles in ROLES_BY_METHOD.items() if roles == _ADMIN_ONLY)
"""RPCs for the admin credential only: who is trusted, what is certified, and how reward
integrity judges a run (revisions, reviews, retries, cancellations)."""


def roles_by_method() -> dict[str, frozenset[str]]:
    """The interceptor's full method path -> allowed roles map; a method of the service missing
    from :data:`ROLES_BY_METHOD` (a new RPC) gets no role at all (fail closed)."""
    return {
        f"/{service.full_name}/{method.name}": ROLES_BY_METHOD.get(method.name, frozenset())
        for service in _SERVICES
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
    integrity: RewardIntegrityServicer | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningServer:
    """Start serving ``servicer`` on ``host:port`` (0 picks a free port).

    ``admin_token`` gets role ``admin`` (every RPC); ``token`` gets role ``trainer`` and
    ``worker_token`` (when given) role ``worker``, each limited to what :data:`ROLES_BY_METHOD`
    allows it (anything else answers PERMISSION_DENIED). The servicer is started once the port
    is bound; stopping the server closes it (watch streams never end on their own, so they are
    ended before the server stops and the stop need not wait for them). With ``tls`` it serves
    TLS, or mutual TLS when ``tls`` names a client CA. ``integrity`` serves
    ``RewardIntegrityService`` (default: one over the servicer's store, key and clock).
    ``interceptors`` go before the bearer check (the metrics' interceptor, which then counts
    refused calls too).

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
    if integrity is None:
        integrity = RewardIntegrityServicer(servicer.store, servicer.key, clock=servicer.clock)
    integrity.role_for = interceptor.role_for
    integrity_servicer = integrity

    def add_servicers(server: grpc.aio.Server) -> None:
        control_service_pb2_grpc.add_ControlPlaneServiceServicer_to_server(servicer, server)
        integrity_pb2_grpc.add_RewardIntegrityServiceServicer_to_server(integrity_servicer, server)

    async def on_start() -> None:
        await servicer.start()
        await integrity_servicer.start()

    async def on_stop() -> None:
        await integrity_servicer.close()
        await servicer.close()

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
