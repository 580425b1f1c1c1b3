"""Audit bundles and decision histories (R-I-8): append-only, in the database and in code.

A bundle is stored once under its content digest (``INSERT ... ON CONFLICT DO NOTHING``), with
the evidence digest it answers, so identical verified evidence can reuse it. A decision history
starts with the automatic entry (written by the audit's ``finish``) and grows by reviews
(:meth:`IntegrityDecisionStore.review`), each validated by core's
:func:`~rewardseal.core.integrity.review_decision` against the history read under a row lock, and
appended as a new row: nothing is ever updated (triggers refuse it anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import Insert, insert, select
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection

from rewardseal.core.errors import AuditStateConflict, NotFound, ValidationError
from rewardseal.core.integrity import DecisionEntry, Review, current_entry, review_decision
from rewardseal.core.strict_json import loads as strict_loads
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.integrity_revisions import content_json
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "ACTION_REVIEW_DECISION",
    "IntegrityDecisionStore",
    "NewBundle",
    "StoredBundle",
    "current_in",
    "history_in",
    "insert_bundle",
    "insert_entry",
]

ACTION_REVIEW_DECISION: Final = "integrity.decision.review"

_bundles = tables.integrity_bundles
_decisions = tables.integrity_decisions
_audits = tables.integrity_audits


@dataclass(frozen=True, slots=True)
class NewBundle:
    """A freshly signed bundle to store with an audit's decision."""

    bundle_id: str
    evidence_digest: str
    envelope: SignedEnvelope
    signer_key_id: str
    outcome: str
    issued_at: datetime


@dataclass(frozen=True, slots=True)
class StoredBundle:
    """A stored bundle: never trusted as stored; verify ``envelope`` before reading it."""

    bundle_id: str
    evidence_digest: str
    envelope: SignedEnvelope
    signer_key_id: str
    outcome: str
    issued_at: datetime


def insert_bundle(conn: Connection, bundle: NewBundle) -> None:
    """Store ``bundle`` inside the caller's transaction (a no-op when stored already)."""
    statement = _insert_ignore(conn).values(
        bundle_id=bundle.bundle_id,
        evidence_digest=bundle.evidence_digest,
        envelope=bundle.envelope.SerializeToString(deterministic=True),
        signer_key_id=bundle.signer_key_id,
        outcome=bundle.outcome,
        issued_at=inputs.moment(bundle.issued_at),
    )
    conn.execute(statement)


def _insert_ignore(conn: Connection) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` into the bundles for ``conn``'s backend."""
    if conn.dialect.name == "postgresql":
        return pg_dialect.insert(_bundles).on_conflict_do_nothing()
    return sqlite_dialect.insert(_bundles).on_conflict_do_nothing()


def insert_entry(conn: Connection, audit_id: str, entry: DecisionEntry) -> None:
    """Append ``entry`` to the audit's history inside the caller's transaction."""
    conn.execute(
        insert(_decisions),
        {
            "audit_id": audit_id,
            "sequence": entry.sequence,
            "body": content_json(entry.to_json()),
            "at": datetime.fromisoformat(entry.at),
        },
    )


def history_in(conn: Connection, audit_id: str) -> list[DecisionEntry]:
    """The audit's decision history, oldest first."""
    bodies = conn.execute(
        select(_decisions.c.body)
        .where(_decisions.c.audit_id == audit_id)
        .order_by(_decisions.c.sequence)
    ).scalars()
    return [DecisionEntry.from_json(strict_loads(body)) for body in bodies]


def current_in(conn: Connection, audit_id: str) -> DecisionEntry | None:
    """The entry in force (the last), or None before the audit is decided."""
    body = conn.execute(
        select(_decisions.c.body)
        .where(_decisions.c.audit_id == audit_id)
        .order_by(_decisions.c.sequence.desc())
        .limit(1)
    ).scalar_one_or_none()
    return None if body is None else DecisionEntry.from_json(strict_loads(body))


class IntegrityDecisionStore:
    """Read bundles and decision histories; append reviews."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def bundle(self, bundle_id: str) -> StoredBundle:
        """The stored bundle ``bundle_id``.

        Raises:
            NotFound: no such bundle.
        """
        statement = select(_bundles).where(_bundles.c.bundle_id == bundle_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"audit bundle {bundle_id} is not stored")
        return _stored(row)

    def bundles_for_evidence(self, evidence_digest: str) -> list[StoredBundle]:
        """Every stored bundle answering ``evidence_digest``, newest first."""
        statement = (
            select(_bundles)
            .where(_bundles.c.evidence_digest == evidence_digest)
            .order_by(_bundles.c.issued_at.desc(), _bundles.c.bundle_id)
        )
        return self._db.read(lambda conn: [_stored(row) for row in conn.execute(statement)])

    def history(self, audit_id: str) -> list[DecisionEntry]:
        """The audit's decision history, oldest first (empty before it is decided).

        Raises:
            NotFound: no such audit.
        """

        def work(conn: Connection) -> list[DecisionEntry]:
            _require_audit(conn, audit_id, lock=False)
            return history_in(conn, audit_id)

        return self._db.read(work, snapshot=True)

    def review(
        self, audit_id: str, review: Review, actor: str, *, at: datetime | None = None
    ) -> DecisionEntry:
        """Append the entry ``review`` makes of the audit's history, superseding the current one.

        Raises:
            ReviewRefused: no reason, an unknown action, a fork without a checkpoint.
            DecisionSuperseded: ``review.supersedes`` is not the current entry, or the run was
                stopped.
            AuditStateConflict: the audit is not decided yet.
            NotFound: no such audit.
        """
        audit_log.check_actor(actor)
        moment = inputs.moment(at)

        def work(conn: Connection) -> DecisionEntry:
            state = _require_audit(conn, audit_id, lock=True)
            history = history_in(conn, audit_id)
            if state != "done" or not history:
                raise AuditStateConflict(
                    f"audit {audit_id} is {state}; only a decided audit is reviewed",
                    metadata={"state": state},
                )
            current_entry(history)
            entry = review_decision(history, review, moment)
            insert_entry(conn, audit_id, entry)
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_REVIEW_DECISION,
                target=audit_id,
                reason=entry.review_reason or "",
                details={"action": str(entry.review_action), "sequence": entry.sequence},
                at=moment,
            )
            return entry

        return self._db.write(work)


def _require_audit(conn: Connection, audit_id: str, *, lock: bool) -> str:
    if not isinstance(audit_id, str) or not audit_id or len(audit_id) > 128:
        raise ValidationError("audit_id is required (at most 128 characters)")
    statement = select(_audits.c.state).where(_audits.c.audit_id == audit_id)
    if lock:
        statement = statement.with_for_update()
    state = conn.execute(statement).scalar_one_or_none()
    if state is None:
        raise NotFound(f"audit {audit_id} is not stored")
    return str(state)


def _stored(row: AnyRow) -> StoredBundle:
    return StoredBundle(
        bundle_id=row.bundle_id,
        evidence_digest=row.evidence_digest,
        envelope=SignedEnvelope.FromString(bytes(row.envelope)),
        signer_key_id=row.signer_key_id,
        outcome=row.outcome,
        issued_at=row.issued_at,
    )
