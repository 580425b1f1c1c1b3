"""The audit runner: audits run off the RPC path, in the control process (R-I-7, R-I-8).

StartAudit only queues an audit (a row in state ``queued``) and wakes the runner. The runner, an
asyncio task of the control plane, claims the oldest runnable audit under a lease, reads its
evidence, runs the pure :func:`~rewardseal_server.integrity_audit.audit_boundary` in a worker
thread, signs the report as a bundle with the control plane's organization key and stores bundle,
automatic decision and ``done`` in one transaction (:meth:`IntegrityAuditStore.finish`). So:

* a restart never leaves an audit half-decided: an audit whose runner died is ``running`` past
  its lease and is claimed again; a late finish of a superseded claim stores nothing;
* a transient error (the database away, an unexpected failure) stores no decision: the audit
  goes back to ``queued`` and is tried again, and after :data:`MAX_ATTEMPTS` claims it is
  ``failed`` (an admin may retry it with a reason);
* bad *evidence* is not an error: a corrupt or unverifiable shard is an ``incomplete_evidence``
  decision whose bundle is still published;
* identical evidence whose shards still verify reuses the verified bundle of an earlier audit
  (same :func:`~rewardseal_server.integrity_audit.evidence_digest`) instead of auditing again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from rewardseal.core.errors import RewardSealError, ShardCorrupt, SignatureError, ValidationError
from rewardseal.core.integrity import (
    AuditBundle,
    DecisionEntry,
    build_bundle,
    initial_entry,
    verify_bundle,
)
from rewardseal.core.integrity.reports import AuditReport
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.integrity.store.audits import StoredAudit
from rewardseal_control.integrity.store.decisions import NewBundle, StoredBundle
from rewardseal_control.integrity.store.shards import LoadedShard
from rewardseal_control.store import ControlStore
from rewardseal_server.integrity_audit import audit_boundary, evidence_digest
from rewardseal_server.integrity_audit.bootstrap import RESAMPLES

__all__ = [
    "DEFAULT_LEASE",
    "MAX_ATTEMPTS",
    "AuditFunction",
    "AuditRunner",
    "bundle_trust",
    "verified_report",
]

_log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 3
"""Claims of one audit before a transient error makes it ``failed``."""
DEFAULT_LEASE: Final = timedelta(minutes=5)
"""How long a claim holds: an audit of a 512-row shard takes about a second, so five minutes
only ever passes when its runner died."""
POLL_SECONDS: Final = 1.0
"""How often an idle runner looks for work it was not woken for (other replicas, leases)."""
BACKOFF_SECONDS: Final = 0.5
_UNVERIFIABLE: Final = frozenset({"shard_unverifiable", "earlier_shard_unverifiable"})

AuditFunction = Callable[..., AuditReport]
"""What computes a report (rewardseal_server.integrity_audit.audit_boundary; a test may wrap it
to inject a failure)."""


def bundle_trust(store: ControlStore, issued_at: datetime) -> TrustSet:
    """The organization keys that were active when a bundle was issued."""
    return store.keys.trust_set(IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION, issued_at)


def verified_report(store: ControlStore, bundle: StoredBundle) -> AuditBundle:
    """A stored bundle, verified against the organization keys of its issue time.

    Raises:
        SignatureError: no trusted key signed these exact bytes, or it is not ``bundle_id``.
        ValidationError: the signed payload is not a well-formed bundle.
    """
    trust = bundle_trust(store, bundle.issued_at)
    return verify_bundle(bundle.envelope, trust, bundle_id=bundle.bundle_id)


@dataclass(frozen=True, slots=True)
class _Outcome:
    evidence_digest: str
    bundle: NewBundle | None
    bundle_id: str
    entry: DecisionEntry


class AuditRunner:
    """Claims queued audits and decides them, one at a time, until closed."""

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        *,
        clock: Callable[[], datetime],
        on_change: Callable[[], Awaitable[None]] | None = None,
        lease: timedelta = DEFAULT_LEASE,
        resamples: int = RESAMPLES,
        audit: AuditFunction = audit_boundary,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        """``resamples``: bootstrap resamples per audit (R-I-6's 10,000 unless a test asks for
        fewer); ``on_change`` is awaited after every state change (watchers wake on it)."""
        self.store = store
        self.key = key
        self.clock = clock
        self.lease = lease
        self.resamples = resamples
        self.audit = audit
        self.poll_seconds = poll_seconds
        self._on_change = on_change
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self) -> None:
        """Start the runner task (queued and orphaned audits are picked up at once)."""
        if self._task is None:
            self._closing = False
            self._task = asyncio.create_task(self._loop(), name="integrity-audit-runner")

    async def close(self) -> None:
        """Stop the runner; an audit in flight stays ``running`` and is claimed again later."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        """Look for work now (an audit was queued)."""
        self._wake.set()

    async def _changed(self) -> None:
        if self._on_change is not None:
            await self._on_change()

    async def _loop(self) -> None:
        while not self._closing:
            try:
                audit = await asyncio.to_thread(
                    self.store.integrity_audits.claim, now=self.clock(), lease=self.lease
                )
            except RewardSealError as exc:
                _log.warning("could not claim an audit: %s", exc.message)
                audit = None
            except Exception:
                _log.exception("unexpected error while claiming an audit")
                audit = None
            if audit is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
                continue
            await self._changed()
            await self.run_claimed(audit)
            await self._changed()

    async def run_claimed(self, audit: StoredAudit) -> bool:
        """Decide one claimed audit; True when its decision was stored.

        A transient error puts it back in the queue (or fails it after :data:`MAX_ATTEMPTS`).
        """
        try:
            outcome = await asyncio.to_thread(self._decide, audit)
            finished = await asyncio.to_thread(
                self.store.integrity_audits.finish,
                audit,
                evidence_digest=outcome.evidence_digest,
                bundle=outcome.bundle,
                bundle_id=outcome.bundle_id,
                entry=outcome.entry,
                at=self.clock(),
            )
            if not finished:
                _log.info(
                    "audit %s was cancelled or taken over; its result is dropped", audit.audit_id
                )
            return finished
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = exc.message if isinstance(exc, RewardSealError) else type(exc).__name__
            if not isinstance(exc, RewardSealError):
                _log.exception("unexpected error in audit %s", audit.audit_id)
            failed = audit.attempts >= MAX_ATTEMPTS
            _log.warning(
                "audit %s attempt %d failed (%s)%s",
                audit.audit_id,
                audit.attempts,
                message,
                "; giving up" if failed else "; it is queued again",
            )
            with contextlib.suppress(RewardSealError):
                await asyncio.to_thread(
                    self.store.integrity_audits.release,
                    audit,
                    f"attempt {audit.attempts}: {message}",
                    failed=failed,
                    at=self.clock(),
                )
            await asyncio.sleep(BACKOFF_SECONDS)
            return False

    # ------------------------------------------------------------------ the work (a thread)

    def _decide(self, audit: StoredAudit) -> _Outcome:
        store = self.store
        revisions = store.integrity_revisions
        system = revisions.get("system", audit.system_revision_id).system()
        protocol = revisions.get("protocol", audit.protocol_revision_id).protocol()
        profile = revisions.get("profile", audit.profile_revision_id).profile()
        shard = store.integrity_shards.load(audit.shard_id)
        earlier = [
            store.integrity_shards.load(s.shard_id)
            for s in store.integrity_shards.earlier(shard.shard)
        ]
        digest = evidence_digest(
            system.revision_id,
            protocol.revision_id,
            profile.revision_id,
            [*(e.shard.shard_id for e in earlier), shard.shard.shard_id],
        )
        now = self.clock()
        reused = self._reusable(digest, [*earlier, shard])
        if reused is not None:
            return _Outcome(
                digest, None, reused.bundle_id, initial_entry(reused.report.decision, now)
            )
        report = self.audit(
            shard.as_manifest(),
            shard.rows,
            system=system,
            protocol=protocol,
            profile=profile,
            shard_id=shard.shard.shard_id,
            earlier=[(e.as_manifest(), e.rows) for e in earlier],
            resamples=self.resamples,
        )
        bundle = build_bundle(report, self.key, issued_at=now)
        return _Outcome(
            report.evidence_digest,
            NewBundle(
                bundle_id=bundle.bundle_id,
                evidence_digest=report.evidence_digest,
                envelope=bundle.envelope,
                signer_key_id=self.key.key_id,
                outcome=report.decision.outcome,
                issued_at=now,
            ),
            bundle.bundle_id,
            initial_entry(report.decision, now),
        )

    def _reusable(self, digest: str, shards: list[LoadedShard]) -> AuditBundle | None:
        """A verified earlier bundle of the same evidence, when every shard still verifies."""
        try:
            for loaded in shards:
                loaded.verify()
        except (ShardCorrupt, ValidationError):
            return None
        for stored in self.store.integrity_decisions.bundles_for_evidence(digest):
            try:
                bundle = verified_report(self.store, stored)
            except (SignatureError, ValidationError):
                continue  # not ours to trust (a rotated or retired key): audit afresh
            # A bundle made while a shard did not verify answers other evidence than now.
            if not _UNVERIFIABLE & set(bundle.report.decision.reasons):
                return bundle
        return None
