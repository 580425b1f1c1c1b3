"""The outbox (R-C-5): receipts waiting to be forwarded to the control plane.

With the outbox on (``WorkerStore(url, outbox=True)``), every receipt
:meth:`~rewardseal_worker.store.receipts.ReceiptStore.commit_receipts` stores gets an outbox
row (its id and envelope) in the same transaction, so no receipt is stored without its row and
no row exists without its receipt. A forwarder reads due rows (:meth:`OutboxStore.outbox_due`),
deletes what control recorded (:meth:`OutboxStore.outbox_done`) and backs off the rest
(:meth:`OutboxStore.outbox_later`): delivery is at least once, and control is idempotent by
receipt id. Scoring never waits on control. The table always exists, so forwarding can be
turned on later; it then forwards receipts committed from then on.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal_server.sqlstore import as_utc, chunks
from rewardseal_worker.store import schema
from rewardseal_worker.store.core import StorePart

OUTBOX_ERROR_MAX = 500
"""Longest ``last_error`` kept on an outbox row (longer text is cut)."""


@dataclass(frozen=True)
class OutboxItem:
    """A stored receipt waiting to be forwarded to the control plane."""

    receipt_id: str
    envelope: bytes
    """The serialized ``SignedEnvelope`` of the receipt (what control records)."""
    attempts: int
    """How many forwarding attempts failed so far."""


@dataclass(frozen=True)
class OutboxBacklog:
    """How much waits in the outbox: its rows and when the oldest was committed."""

    depth: int
    oldest: datetime | None
    """None when the outbox is empty."""


class OutboxStore(StorePart):
    """The outbox part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def outbox_due(self, limit: int, now: datetime) -> list[OutboxItem]:
        """Up to ``limit`` outbox rows due at ``now``, oldest first (in commit order).

        Raises:
            ValidationError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ValidationError("limit must be at least 1")
        rows = self._db.read(
            lambda conn: conn.execute(schema.OUTBOX_DUE, {"now": now, "limit": limit}).all()
        )
        return [OutboxItem(row.receipt_id, bytes(row.envelope), int(row.attempts)) for row in rows]

    def outbox_backlog(self) -> OutboxBacklog:
        """The number of outbox rows and the commit time of the oldest (one read)."""
        row = self._db.read(lambda conn: conn.execute(schema.OUTBOX_BACKLOG).one())
        return OutboxBacklog(int(row.depth), as_utc(row.oldest) if row.oldest else None)

    def outbox_done(self, receipt_ids: Collection[str]) -> None:
        """Delete the outbox rows of receipts control has recorded (unknown ids are ignored)."""
        ids = sorted(set(receipt_ids))
        if not ids:
            return

        def work(conn: Connection) -> None:
            for chunk in chunks(ids):
                conn.execute(schema.OUTBOX_DONE, {"receipt_ids": chunk})

        self._db.write(work)

    def outbox_later(
        self, receipt_ids: Collection[str], *, error: str, now: datetime, delay_seconds: float
    ) -> None:
        """Record a failed attempt: count it, keep ``error`` and retry ``delay_seconds`` after
        ``now`` (unknown ids are ignored).

        ``error`` is kept on the rows (cut to :data:`OUTBOX_ERROR_MAX` characters); it must be
        the forwarder's own text (an error class or reason), never record contents.

        Raises:
            ValidationError: ``delay_seconds`` is negative or not finite.
        """
        if not math.isfinite(delay_seconds) or delay_seconds < 0:
            raise ValidationError("delay_seconds must be a finite number of seconds, at least 0")
        ids = sorted(set(receipt_ids))
        if not ids:
            return
        values = {
            "b_next": as_utc(now) + timedelta(seconds=delay_seconds),
            "b_error": error[:OUTBOX_ERROR_MAX],
        }

        def work(conn: Connection) -> None:
            for chunk in chunks(ids):
                conn.execute(schema.OUTBOX_LATER, {**values, "receipt_ids": chunk})

        self._db.write(work)
