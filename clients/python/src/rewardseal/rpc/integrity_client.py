"""Typed clients for the control plane's ``RewardIntegrityService``, sync and asyncio
(docs/spec.md §12, docs/integrity.md).

They dial the control plane like :mod:`rewardseal.rpc.control_client` (same target, tokens, TLS,
deadlines, retry rule) on the same transport (:mod:`rewardseal.rpc.aio.transport`), map every
failure to :mod:`rewardseal.core.errors` (``IntegritySpecInvalid``, ``ShardCorrupt``,
``ReviewRefused``, ``DecisionSuperseded``, ``NotFound``, ...), and read every listing through
its last page. Only idempotent RPCs are retried, on UNAVAILABLE only
(:attr:`~rewardseal.rpc.integrity_protocol.IntegrityProtocol.IDEMPOTENT`). Reads need the client
(trainer) token; creating revisions, reviews, retries and cancellations the admin token.

An audit runs off the call: :meth:`IntegrityClient.start_audit` answers a queued audit at once;
follow it with :meth:`~IntegrityClient.watch_audit` or :meth:`~IntegrityClient.wait_for_audit`.

The client is written once, for asyncio (:mod:`rewardseal.rpc.aio.integrity`); the blocking
:class:`IntegrityClient` is generated from it (:mod:`rewardseal.rpc.blocking.integrity`).
"""

from rewardseal.rpc.aio.integrity import AsyncIntegrityClient
from rewardseal.rpc.blocking.integrity import IntegrityClient
from rewardseal.rpc.integrity_protocol import RewardSystemQuery, SampleQuery

__all__ = [
    "AsyncIntegrityClient",
    "IntegrityClient",
    "RewardSystemQuery",
    "SampleQuery",
]
