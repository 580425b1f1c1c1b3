"""Typed clients for the control plane's ``ControlPlaneService``, sync and asyncio.

Both clients attach the bearer token, put a deadline on every unary call, map every failure to
the :mod:`rewardseal.core.errors` hierarchy (:func:`rewardseal.rpc.status.from_rpc_error`), and read
every listing through its last page. Channels are plaintext or, given a
:class:`~rewardseal.rpc.tls.ClientTls`, TLS (mutual with a client certificate).

Retries: only calls that are idempotent, and only on UNAVAILABLE (the call may not have
arrived). Reads are idempotent; of the writes, ``RegisterContract`` (a repeat answers
``created=False``) and ``RecordReceipts`` (idempotent by receipt id) are. ``RegisterIssuerKey``,
``RetireIssuerKey``, ``ApproveIssuerKey``, ``UnbindIssuerKey``, ``CreateEnrollment``,
``IssueCertificate`` and ``RevokeCertificate`` are never retried: a repeat could mint a second
certificate, enrollment credential or revocation-list version, or write the audit log twice.
``WatchRevocations`` is a stream the caller reopens with the version it holds.

The client is written once, for asyncio (:mod:`rewardseal.rpc.aio.control`); the blocking
:class:`ControlClient` is generated from it (:mod:`rewardseal.rpc.blocking.control`). Request
building and answer checking live in :mod:`rewardseal.rpc.control_protocol`, the retry and paging
rules in :mod:`rewardseal.rpc.call_rules`, the call, listing and stream loops in
:mod:`rewardseal.rpc.aio.transport`, as for the worker's clients
(:mod:`rewardseal.rpc.worker_client`). The control plane keeps no audit-log RPC,
so there is no listing for it here. ``RewardIntegrityService`` has its own clients on the same
parts: :mod:`rewardseal.rpc.integrity_client`.
"""

from rewardseal.rpc.aio.control import AsyncControlClient
from rewardseal.rpc.blocking.control import ControlClient
from rewardseal.rpc.control_protocol import (
    AttestationScope,
    ReceiptQuery,
    issue_certificate_request,
    revoke_scope_request,
)

__all__ = [
    "AsyncControlClient",
    "AttestationScope",
    "ControlClient",
    "ReceiptQuery",
    "issue_certificate_request",
    "revoke_scope_request",
]
