"""Read a worker's receipt store behind its back (SQLite or PostgreSQL), for durability tests.

Reads go straight to the tables, not through the worker: a test can then check what is really
on disk (one receipt per episode, every envelope signed) while the worker is down or after a
crash.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import create_engine, text

from rewardseal.core.receipts import open_receipt
from rewardseal.core.signing import TrustSet
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope


@dataclass(frozen=True)
class StoredRow:
    """One row of the ``receipts`` table."""

    receipt_id: str
    episode_id: str
    envelope: bytes


def read_receipts(db_url: str) -> list[StoredRow]:
    """Every receipt row in the store at ``db_url``."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT receipt_id, episode_id, envelope FROM receipts"))
            return [StoredRow(r.receipt_id, r.episode_id, bytes(r.envelope)) for r in rows]
    finally:
        engine.dispose()


def episodes_with_more_than_one_receipt(db_url: str) -> dict[str, int]:
    """Episode id -> receipt count, for every episode stored more than once (SQL GROUP BY)."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT episode_id, COUNT(*) AS n FROM receipts "
                    "GROUP BY episode_id HAVING COUNT(*) > 1"
                )
            )
            return {r.episode_id: int(r.n) for r in rows}
    finally:
        engine.dispose()


def verify_rows(rows: list[StoredRow], trust: TrustSet) -> dict[str, RewardEvidenceReceipt]:
    """Open (verify, parse, validate) every stored envelope; episode id -> receipt.

    Fails if an envelope does not verify, or names another episode or receipt id than its row.
    """
    receipts: dict[str, RewardEvidenceReceipt] = {}
    for row in rows:
        receipt = open_receipt(SignedEnvelope.FromString(row.envelope), trust).receipt
        assert receipt.episode_id == row.episode_id, row
        assert receipt.receipt_id == row.receipt_id, row
        receipts[row.episode_id] = receipt
    counts = Counter(row.episode_id for row in rows)
    assert max(counts.values(), default=1) == 1, counts.most_common(3)
    return receipts
