"""Audits of sealed shards (R-I-6..8): a state machine in the database, so work survives a restart.

States: ``queued`` (waiting for a runner), ``running`` (claimed by one runner under a lease),
``done`` (decided: bundle and automatic decision stored), ``failed`` (transient errors outlasted
the attempts: no decision), ``cancelled``. A runner :meth:`~IntegrityAuditStore.claim` s the
oldest queued audit, or a running one whose lease has passed (its runner died), with a fresh
claim token; :meth:`~IntegrityAuditStore.finish` stores the bundle, the automatic decision and
``done`` in ONE transaction, and only while the audit is still running under that token: a
restarted, cancelled or taken-over audit is never decided twice or half-decided.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.engine import Connection

from rewardseal.core.errors import (
    AuditStateConflict,
    BindingMismatch,
    NotFound,
    ShardAlreadyAudited,
    ValidationError,
)
from rewardseal.core.integrity import AuditStanding, DecisionEntry
from rewardseal.core.validation import validate_id
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.integrity_decisions import (
    NewBundle,
    current_in,
    insert_bundle,
    insert_entry,
)
from rewardseal_control.store.integrity_revisions import IntegrityRevisionStore
from rewardseal_control.store.integrity_shards import get_shard_in
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import LostRace, StoreEngine

__all__ = [
    "ACTION_CANCEL_AUDIT",
    "ACTION_RETRY_AUDIT",
    "AUDIT_STATES",
    "TERMINAL_STATES",
    "AuditState",
    "IntegrityAuditStore",
    "StoredAudit",
    "standing",
]

AuditState = Literal["queued", "running", "done", "failed", "cancelled"]
AUDIT_STATES: Final = ("queued", "running", "done", "failed", "cancelled")
TERMINAL_STATES: Final = frozenset({"done", "failed", "cancelled"})
ACTION_CANCEL_AUDIT: Final = "integrity.audit.cancel"
ACTION_RETRY_AUDIT: Final = "integrity.audit.retry"
MAX_ERROR_LENGTH: Final = 1000

_audits = tables.integrity_audits
_LISTING = Listing(
    kind="integrity_audits", order=(_audits.c.created_at, _audits.c.audit_id), shape=(datetime, str)
)


@dataclass(frozen=True, slots=True)
class StoredAudit:
    """An audit as stored, with the decision in force (None until done)."""

    audit_id: str
    run_id: str
    boundary: int
    shard_id: str
    system_revision_id: str
    protocol_revision_id: str
    profile_revision_id: str
    state: AuditState
    attempts: int
    error: str
    claim: str | None
    lease_until: datetime | None
    evidence_digest: str | None
    bundle_id: str | None
    bundle_reused: bool
    retry_of: str | None
    retry_reason: str
    cancel_reason: str
    created_at: datetime
    updated_at: datetime
    decision: DecisionEntry | None


def _run_lock(run_id: str) -> int:
    """The advisory-lock key of one run's audit starts (PostgreSQL; SQLite writers are
    serialized already)."""
    digest = hashlib.sha256(f"integrity-audits\0{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def new_audit_id() -> str:
    """A fresh R-MSG-10 audit id."""
    return f"audit-{secrets.token_hex(16)}"


class _Superseded(Exception):
    """The audit is no longer running under the caller's claim: roll back, store nothing."""


class IntegrityAuditStore:
    """Create, claim, finish, cancel, retry, read and list audits."""

    def __init__(self, db: StoreEngine, revisions: IntegrityRevisionStore) -> None:
        """Work on ``db``; profiles are looked up through ``revisions``."""
        self._db = db
        self._revisions = revisions

    # ------------------------------------------------------------------ creation

    def create(
        self, shard_id: str, profile_revision_id: str, *, at: datetime | None = None
    ) -> StoredAudit:
        """StartAudit (R-I-10): queue the first audit of a sealed shard, under the run's binding.

        The run's binding is fixed by its first audit: the reward-system and protocol revisions
        its shard was sealed under and the profile it was started with. Auditing a shard a
        second time is :meth:`retry` (the admin's), never this: a fresh audit would otherwise be
        a way around a pause or a stop.

        Raises:
            ValidationError: an empty shard or profile id.
            NotFound: an unknown shard or profile.
            ShardAlreadyAudited: the shard has an audit already (metadata ``audit_id``,
                ``state``).
            BindingMismatch: the profile, or the shard's protocol or reward system, is not the
                run's binding (metadata ``field``, ``bound``, ``given``).
        """
        moment = inputs.moment(at)

        def work(conn: Connection) -> StoredAudit:
            shard = get_shard_in(conn, shard_id)
            # Every start of one run takes the run's lock: two first audits cannot both bind it.
            self._db.advisory_lock(conn, _run_lock(shard.run_id))
            profile = self._revisions.get_in(conn, "profile", profile_revision_id)
            earlier = conn.execute(
                select(_audits.c.audit_id, _audits.c.state)
                # run_id first: the (run_id, created_at) index finds the run's few audits.
                .where(_audits.c.run_id == shard.run_id, _audits.c.shard_id == shard.shard_id)
                .order_by(_audits.c.created_at, _audits.c.audit_id)
                .limit(1)
            ).first()
            if earlier is not None:
                raise ShardAlreadyAudited(
                    f"shard {shard.shard_id} has audit {earlier.audit_id} ({earlier.state}) "
                    "already; auditing the same evidence again is a retry (admin): "
                    f"rewardseal-control integrity audit retry {earlier.audit_id} --reason ...",
                    metadata={"audit_id": earlier.audit_id, "state": earlier.state},
                )
            bound = conn.execute(
                select(
                    _audits.c.system_revision_id,
                    _audits.c.protocol_revision_id,
                    _audits.c.profile_revision_id,
                )
                .where(_audits.c.run_id == shard.run_id)
                .order_by(_audits.c.created_at, _audits.c.audit_id)
                .limit(1)
            ).first()
            if bound is not None:
                given = (shard.system_revision_id, shard.protocol_revision_id, profile.revision_id)
                for field, fixed, asked in zip(
                    ("system", "protocol", "profile"), bound, given, strict=True
                ):
                    if fixed != asked:
                        raise BindingMismatch(
                            f"run {shard.run_id} is bound to {field} revision {fixed} by its "
                            f"first audit; this audit names {asked}",
                            metadata={"field": field, "bound": fixed, "given": asked},
                        )
            return self._create_in(conn, shard.shard_id, profile.revision_id, moment, None, "")

        return self._db.write(work)

    def _create_in(
        self,
        conn: Connection,
        shard_id: str,
        profile_revision_id: str,
        moment: datetime,
        retry_of: str | None,
        retry_reason: str,
    ) -> StoredAudit:
        shard = get_shard_in(conn, shard_id)
        profile = self._revisions.get_in(conn, "profile", profile_revision_id)
        audit_id = new_audit_id()
        conn.execute(
            insert(_audits),
            {
                "audit_id": audit_id,
                "run_id": shard.run_id,
                "boundary": shard.boundary,
                "shard_id": shard.shard_id,
                "system_revision_id": shard.system_revision_id,
                "protocol_revision_id": shard.protocol_revision_id,
                "profile_revision_id": profile.revision_id,
                "state": "queued",
                "attempts": 0,
                "error": "",
                "claim": None,
                "lease_until": None,
                "evidence_digest": None,
                "bundle_id": None,
                "bundle_reused": False,
                "retry_of": retry_of,
                "retry_reason": retry_reason,
                "cancel_reason": "",
                "created_at": moment,
                "updated_at": moment,
            },
        )
        return get_audit_in(conn, audit_id)

    def retry(
        self, audit_id: str, reason: str, actor: str, *, at: datetime | None = None
    ) -> StoredAudit:
        """Queue a new audit of the same evidence as a finished one; it names the old one.

        Raises:
            ValidationError: no reason (a retry says why), or a bad actor.
            NotFound: no such audit.
            AuditStateConflict: the audit is still queued or running.
        """
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        audit_log.check_actor(actor)
        moment = inputs.moment(at)

        def work(conn: Connection) -> StoredAudit:
            old = get_audit_in(conn, audit_id, lock=True)
            if old.state not in TERMINAL_STATES:
                raise AuditStateConflict(
                    f"audit {audit_id} is {old.state}; only a finished audit is retried",
                    metadata={"state": old.state},
                )
            new = self._create_in(
                conn, old.shard_id, old.profile_revision_id, moment, old.audit_id, reason
            )
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_RETRY_AUDIT,
                target=audit_id,
                reason=reason,
                details={"new_audit_id": new.audit_id},
                at=moment,
            )
            return new

        return self._db.write(work)

    # ------------------------------------------------------------------ the runner's side

    def claim(self, *, now: datetime, lease: timedelta) -> StoredAudit | None:
        """Take the oldest runnable audit (queued, or running past its lease) under a fresh
        claim token and lease; None when there is none. ``attempts`` counts the claims."""
        moment = inputs.moment(now)
        runnable = or_(
            _audits.c.state == "queued",
            and_(_audits.c.state == "running", _audits.c.lease_until < moment),
        )

        def work(conn: Connection) -> StoredAudit | None:
            audit_id = conn.execute(
                select(_audits.c.audit_id)
                .where(runnable)
                .order_by(_audits.c.created_at, _audits.c.audit_id)
                .limit(1)
            ).scalar_one_or_none()
            if audit_id is None:
                return None
            token = secrets.token_hex(16)
            taken = conn.execute(
                update(_audits)
                .where(_audits.c.audit_id == audit_id, runnable)
                .values(
                    state="running",
                    claim=token,
                    lease_until=moment + lease,
                    attempts=_audits.c.attempts + 1,
                    updated_at=moment,
                )
            )
            if taken.rowcount != 1:
                raise LostRace  # another runner took it first: look again
            return get_audit_in(conn, audit_id)

        return self._db.write(work)

    def finish(
        self,
        audit: StoredAudit,
        *,
        evidence_digest: str,
        bundle: NewBundle | None,
        bundle_id: str,
        entry: DecisionEntry,
        at: datetime | None = None,
    ) -> bool:
        """Store the decision: the bundle (unless reused), the automatic entry and ``done``, in
        one transaction. False (nothing stored) when ``audit`` is no longer running under its
        claim: cancelled meanwhile, or taken over after its lease passed."""
        moment = inputs.moment(at)

        def work(conn: Connection) -> bool:
            if bundle is not None:
                insert_bundle(conn, bundle)
            done = conn.execute(
                update(_audits)
                .where(
                    _audits.c.audit_id == audit.audit_id,
                    _audits.c.state == "running",
                    _audits.c.claim == audit.claim,
                )
                .values(
                    state="done",
                    claim=None,
                    lease_until=None,
                    error="",
                    evidence_digest=evidence_digest,
                    bundle_id=bundle_id,
                    bundle_reused=bundle is None,
                    updated_at=moment,
                )
            )
            if done.rowcount != 1:
                raise _Superseded
            insert_entry(conn, audit.audit_id, entry)
            return True

        try:
            return self._db.write(work)
        except _Superseded:
            return False

    def release(
        self, audit: StoredAudit, error: str, *, failed: bool, at: datetime | None = None
    ) -> bool:
        """After a transient error: back to ``queued`` (or ``failed`` when the attempts are
        spent), with the error kept; no decision is stored. False when no longer ours."""
        moment = inputs.moment(at)
        statement = (
            update(_audits)
            .where(
                _audits.c.audit_id == audit.audit_id,
                _audits.c.state == "running",
                _audits.c.claim == audit.claim,
            )
            .values(
                state="failed" if failed else "queued",
                claim=None,
                lease_until=None,
                error=error[:MAX_ERROR_LENGTH],
                updated_at=moment,
            )
        )
        return bool(self._db.write(lambda conn: conn.execute(statement).rowcount == 1))

    # ------------------------------------------------------------------ admin

    def cancel(
        self, audit_id: str, reason: str, actor: str, *, at: datetime | None = None
    ) -> StoredAudit:
        """Cancel a queued or running audit (a running one's result is then discarded).

        Raises:
            ValidationError: a bad reason or actor.
            NotFound: no such audit.
            AuditStateConflict: the audit is finished already.
        """
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        audit_log.check_actor(actor)
        moment = inputs.moment(at)

        def work(conn: Connection) -> StoredAudit:
            audit = get_audit_in(conn, audit_id, lock=True)
            if audit.state in TERMINAL_STATES:
                raise AuditStateConflict(
                    f"audit {audit_id} is {audit.state}; only a queued or running audit is "
                    "cancelled",
                    metadata={"state": audit.state},
                )
            conn.execute(
                update(_audits)
                .where(_audits.c.audit_id == audit_id)
                .values(
                    state="cancelled",
                    claim=None,
                    lease_until=None,
                    cancel_reason=reason,
                    updated_at=moment,
                )
            )
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_CANCEL_AUDIT,
                target=audit_id,
                reason=reason,
                details={"state": audit.state},
                at=moment,
            )
            return get_audit_in(conn, audit_id)

        return self._db.write(work)

    # ------------------------------------------------------------------ reads

    def get(self, audit_id: str) -> StoredAudit:
        """The audit ``audit_id`` with its current decision.

        Raises:
            NotFound: no such audit.
        """
        return self._db.read(lambda conn: get_audit_in(conn, audit_id), snapshot=True)

    def standings(self, run_id: str) -> list[AuditStanding]:
        """Every audit of ``run_id`` in the order started, as the run's gate reads them
        (:func:`~rewardseal.core.integrity.run_gate`, R-I-10), in one snapshot.

        Raises:
            ValidationError: ``run_id`` is not an id.
        """
        validate_id(run_id, "run_id")
        statement = (
            select(_audits)
            .where(_audits.c.run_id == run_id)
            .order_by(_audits.c.created_at, _audits.c.audit_id)
        )
        return self._db.read(
            lambda conn: [standing(_stored(conn, row)) for row in conn.execute(statement)],
            snapshot=True,
        )

    def list_audits(
        self,
        run_id: str = "",
        state: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[StoredAudit]:
        """Audits in the order they were started, optionally of one run and in one state."""
        statement = select(_audits)
        if run_id:
            statement = statement.where(_audits.c.run_id == run_id)
        if state:
            if state not in AUDIT_STATES:
                raise ValidationError(f"state must be one of {', '.join(AUDIT_STATES)}")
            statement = statement.where(_audits.c.state == state)

        def work(conn: Connection) -> tuple[list[StoredAudit], str]:
            rows, token = _LISTING.page(
                conn,
                statement,
                query=fingerprint(run_id=run_id, state=state),
                size=page_size,
                token=page_token,
            )
            return [_stored(conn, row) for row in rows], token

        items, token = self._db.read(work, snapshot=True)
        return Page(items, token)


def standing(audit: StoredAudit) -> AuditStanding:
    """An audit as :func:`~rewardseal.core.integrity.run_gate` reads it."""
    return AuditStanding(audit.audit_id, audit.boundary, audit.state, audit.decision)


def get_audit_in(conn: Connection, audit_id: str, *, lock: bool = False) -> StoredAudit:
    """The audit ``audit_id`` inside ``conn`` (``lock``: FOR UPDATE on PostgreSQL).

    Raises:
        ValidationError: an empty or over-long id.
        NotFound: no such audit.
    """
    if not isinstance(audit_id, str) or not audit_id or len(audit_id) > 128:
        raise ValidationError("audit_id is required (at most 128 characters)")
    statement = select(_audits).where(_audits.c.audit_id == audit_id)
    if lock:
        statement = statement.with_for_update()
    row = conn.execute(statement).one_or_none()
    if row is None:
        raise NotFound(f"audit {audit_id} is not stored")
    return _stored(conn, row)


def _stored(conn: Connection, row: AnyRow) -> StoredAudit:
    return StoredAudit(
        audit_id=row.audit_id,
        run_id=row.run_id,
        boundary=int(row.boundary),
        shard_id=row.shard_id,
        system_revision_id=row.system_revision_id,
        protocol_revision_id=row.protocol_revision_id,
        profile_revision_id=row.profile_revision_id,
        state=row.state,
        attempts=int(row.attempts),
        error=row.error,
        claim=row.claim,
        lease_until=row.lease_until,
        evidence_digest=row.evidence_digest,
        bundle_id=row.bundle_id,
        bundle_reused=bool(row.bundle_reused),
        retry_of=row.retry_of,
        retry_reason=row.retry_reason,
        cancel_reason=row.cancel_reason,
        created_at=row.created_at,
        updated_at=row.updated_at,
        decision=current_in(conn, row.audit_id) if row.state == "done" else None,
    )
