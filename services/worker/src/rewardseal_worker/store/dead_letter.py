"""The dead letter (R-C-12): receipts control refused for good, out of the outbox, kept.

When control refuses a forwarded receipt permanently (:mod:`rewardseal_worker.record_refusals`:
another receipt holds the episode, no key verifies it, control does not know its contract, ...),
resending it can never succeed, and an outbox that retried it forever would hide it among the
receipts that are merely waiting. :meth:`DeadLetterStore.dead_letter_refused` moves its outbox
row here, in one transaction, with the refusal's code, reason and message, the time and the
number of attempts. Nothing is deleted: the receipt itself stays in ``receipts``, and
:meth:`DeadLetterStore.dead_letter_retry` (``rewardseal-worker outbox dead-letter retry``) puts
rows back into the outbox, due at once and in their old place, once the cause is fixed.

A receipt is in the outbox or in the dead letter, never in both: both moves delete from one
table and insert into the other in the same transaction, and only rows the delete returned are
moved (two forwarders refused the same receipt: one moves it, the other finds nothing).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, preview
from rewardseal_server.sqlstore import as_utc, chunks
from rewardseal_worker.store import schema
from rewardseal_worker.store.core import StorePart

DEAD_LETTER_MESSAGE_MAX = 500
"""Longest refusal message kept on a dead-letter row (longer text is cut)."""

_INSERT_DEAD = insert(schema.dead_letter)
_INSERT_OUTBOX = insert(schema.outbox)


@dataclass(frozen=True)
class Refused:
    """A receipt control refused permanently: what :meth:`DeadLetterStore.dead_letter_refused`
    keeps of the refusal."""

    receipt_id: str
    code: int
    """The ``google.rpc.Code`` number control answered."""
    reason: str
    """The ``ErrorInfo`` reason (``duplicate_episode``, ``signature_invalid``, ...)."""
    message: str
    """Control's message: ids and rules, never record contents (cut to
    :data:`DEAD_LETTER_MESSAGE_MAX`)."""


@dataclass(frozen=True)
class DeadLetter:
    """One row of the dead letter, with its receipt's episode and contract."""

    receipt_id: str
    episode_id: str
    contract_digest: str
    code: int
    reason: str
    message: str
    attempts: int
    """Forwarding attempts that failed, the permanent refusal included."""
    refused_at: datetime


class DeadLetterStore(StorePart):
    """The dead-letter part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def dead_letter_refused(self, refused: Sequence[Refused], *, now: datetime) -> list[DeadLetter]:
        """Move the outbox rows of ``refused`` into the dead letter, in one transaction; the
        rows moved (a receipt no longer in the outbox is skipped), in outbox order."""
        by_id = {r.receipt_id: r for r in refused}
        if not by_id:
            return []
        at = as_utc(now)

        def work(conn: Connection) -> list[DeadLetter]:
            taken: list[Any] = []
            for chunk in chunks(sorted(by_id)):
                taken += conn.execute(schema.DEAD_LETTER_TAKE, {"receipt_ids": chunk}).all()
            if not taken:
                return []
            conn.execute(
                _INSERT_DEAD,
                [
                    {
                        "receipt_id": row.receipt_id,
                        "created_at": row.created_at,
                        "batch_index": row.batch_index,
                        "attempts": row.attempts + 1,
                        "code": by_id[row.receipt_id].code,
                        "reason": by_id[row.receipt_id].reason,
                        "message": by_id[row.receipt_id].message[:DEAD_LETTER_MESSAGE_MAX],
                        "refused_at": at,
                    }
                    for row in taken
                ],
            )
            order = {row.receipt_id: (row.created_at, row.batch_index) for row in taken}
            moved = _entries(conn, list(order))
            return sorted(moved, key=lambda e: (order[e.receipt_id], e.receipt_id))

        return self._db.write(work)

    def dead_letter_entries(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letter, oldest refusal first (at most ``limit`` rows; None: all)."""
        statement = schema.DEAD_LETTER_LIST
        if limit is not None:
            statement = statement.limit(max(limit, 0))
        rows = self._db.read(lambda conn: conn.execute(statement).all())
        return [_entry(row) for row in rows]

    def dead_letter_counts(self) -> dict[str, int]:
        """Rows in the dead letter per refusal reason (absent: none)."""
        rows = self._db.read(lambda conn: conn.execute(schema.DEAD_LETTER_COUNTS).all())
        return {str(row.reason): int(row.n) for row in rows}

    def dead_letter_retry(self, receipt_ids: Collection[str] | None, *, now: datetime) -> list[str]:
        """Put dead-letter rows back into the outbox, due at ``now`` and in their old place
        (attempts kept), in one transaction; the ids moved, sorted. ``None``: every row.

        Raises:
            NotFound: an id in ``receipt_ids`` is not in the dead letter (nothing is moved).
        """
        wanted = None if receipt_ids is None else sorted(set(receipt_ids))
        if wanted == []:
            return []
        at = as_utc(now)

        def work(conn: Connection) -> list[str]:
            released: list[Any] = []
            if wanted is None:
                released = list(conn.execute(schema.DEAD_LETTER_RELEASE_ALL).all())
            else:
                for chunk in chunks(wanted):
                    released += conn.execute(
                        schema.DEAD_LETTER_RELEASE, {"receipt_ids": chunk}
                    ).all()
                missing = sorted(set(wanted) - {row.receipt_id for row in released})
                if missing:
                    # Raised inside the transaction: the rows released above go back.
                    shown = ", ".join(preview(m) for m in missing[:5])
                    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                    raise NotFound(f"not in the dead letter: {shown}{more}")
            if not released:
                return []
            ids = sorted(row.receipt_id for row in released)
            envelopes: dict[str, bytes] = {}
            for chunk in chunks(ids):
                envelopes.update(
                    (row.receipt_id, bytes(row.envelope))
                    for row in conn.execute(schema.ENVELOPES, {"receipt_ids": chunk})
                )
            conn.execute(
                _INSERT_OUTBOX,
                [
                    {
                        "receipt_id": row.receipt_id,
                        "envelope": envelopes[row.receipt_id],
                        "created_at": row.created_at,
                        "batch_index": row.batch_index,
                        "attempts": row.attempts,
                        "next_attempt_at": at,
                        "last_error": f"retried from the dead letter (was {row.reason})",
                    }
                    for row in released
                ],
            )
            return ids

        return self._db.write(work)


def _entries(conn: Connection, receipt_ids: list[str]) -> list[DeadLetter]:
    found: list[DeadLetter] = []
    for chunk in chunks(sorted(receipt_ids)):
        statement = schema.DEAD_LETTER_LIST.where(schema.dead_letter.c.receipt_id.in_(chunk))
        found += [_entry(row) for row in conn.execute(statement)]
    return found


def _entry(row: Any) -> DeadLetter:
    return DeadLetter(
        receipt_id=row.receipt_id,
        episode_id=row.episode_id,
        contract_digest=row.contract_digest,
        code=int(row.code),
        reason=row.reason,
        message=row.message,
        attempts=int(row.attempts),
        refused_at=as_utc(row.refused_at),
    )
