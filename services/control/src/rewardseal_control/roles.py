"""Who may do what on the control plane: its roles, the credentials that grant them, and which
roles may call each RPC of its two services (R-C-7). The one place these live.

The auth interceptor (:mod:`rewardseal_server.auth`) enforces :func:`roles_by_method` and
records the caller's role once per call; the servicers name that role in the audit log
(:func:`caller_actor`), and the domain layer (:mod:`rewardseal_control.domain`) decides what
a role may do inside an RPC the interceptor let it call (a worker registers WORKER keys only).
"""

from __future__ import annotations

from typing import Final

from rewardseal.v1 import control_service_pb2, integrity_pb2
from rewardseal_server.bearer import BearerTokens, caller_role

__all__ = [
    "ADMIN_METHODS",
    "ADMIN_ROLE",
    "ROLES_BY_METHOD",
    "TRAINER_ROLE",
    "UNKNOWN_ACTOR",
    "WORKER_ROLE",
    "caller_actor",
    "control_tokens",
    "roles_by_method",
]

ADMIN_ROLE: Final = "admin"
"""The role of the admin token: keys, issuing and revocation."""
TRAINER_ROLE: Final = "trainer"
"""The role of the client token that trainers present."""
WORKER_ROLE: Final = "worker"
"""The role of the worker token: register its contract and its own WORKER key (proving it holds
it), forward receipts, read certificates, keys and revocations. Never issue, revoke, retire,
admit or bind a key, or add an ORGANIZATION key."""
UNKNOWN_ACTOR: Final = "unknown"
"""What the audit log names when no role was recorded for the call (fail closed: not admin)."""

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
    # An attestation is a signed reading of the index (R-C-15): whoever may read the index may
    # have it signed; it changes nothing. A worker has no checkpoint to attest.
    "AttestCheckpoint": frozenset({ADMIN_ROLE, TRAINER_ROLE}),
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


def control_tokens(
    *, admin_token: str, token: str, worker_token: str | None = None
) -> BearerTokens:
    """The control plane's credentials: ``admin_token`` grants :data:`ADMIN_ROLE`, ``token``
    :data:`TRAINER_ROLE` and ``worker_token`` (when given) :data:`WORKER_ROLE`.

    Raises:
        ValueError: two of the tokens are the same, or one is shorter than 16 characters.
    """
    tokens = {admin_token: ADMIN_ROLE, token: TRAINER_ROLE}
    if worker_token is not None:
        if worker_token in tokens:
            raise ValueError("the worker token must differ from the admin and client tokens")
        tokens[worker_token] = WORKER_ROLE
    if len(tokens) < 2:
        raise ValueError("the admin token and the client token must differ")
    return BearerTokens(tokens)


def caller_actor() -> str:
    """The role of the call being served, for the audit log (never the token itself);
    :data:`UNKNOWN_ACTOR` when the interceptor recorded none."""
    return caller_role() or UNKNOWN_ACTOR
