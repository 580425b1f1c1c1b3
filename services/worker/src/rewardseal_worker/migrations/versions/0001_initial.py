"""The worker store as ``metadata.create_all`` made it before the dead letter (R-W-3, R-W-7, R-W-8,
R-C-5): open registrations, receipts, credits, the policy ledger, the outbox and worker state.

Every column, key, unique constraint and index as ``rewardseal_worker.store.schema`` declared
them then, unnamed constraints included, so that a store made by ``create_all`` and one made by
this revision are the same schema on SQLite and PostgreSQL (a pre-migration store of this shape
is adopted by stamping 0001: ``rewardseal_worker.store.migrating``). Timestamps are
``DateTime(timezone=True)`` (the DDL type of ``rewardseal_server.sqlstore.UTCDateTime``).

Revision ID: 0001
Revises:
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "open_episodes",
        sa.Column("contract_digest", sa.String(), primary_key=True),
        sa.Column("identity_key", sa.String(), primary_key=True),
        sa.Column("episode_id", sa.String(), nullable=False, unique=True),
        sa.Column("identity", sa.JSON(), nullable=False),
        sa.Column("baseline", sa.JSON(), nullable=True),
        _time("begun_at"),
    )
    op.create_table(
        "receipts",
        sa.Column("receipt_id", sa.String(), primary_key=True),
        sa.Column("episode_id", sa.String(), nullable=False, unique=True),
        sa.Column("contract_digest", sa.String(), nullable=False),
        sa.Column("policy_update", sa.BigInteger(), nullable=False),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        sa.Column("evidence", sa.LargeBinary(), nullable=False),
        _time("created_at"),
    )
    op.create_table(
        "credited_records",
        sa.Column("contract_digest", sa.String(), primary_key=True),
        sa.Column("record_id", sa.String(), primary_key=True),
        sa.Column("receipt_id", sa.String(), sa.ForeignKey("receipts.receipt_id"), nullable=False),
        sa.Column("identity_key", sa.String(), nullable=True),
    )
    op.create_index(
        "ix_credited_records_identity", "credited_records", ["contract_digest", "identity_key"]
    )
    op.create_table(
        "policy_ledger",
        sa.Column("contract_digest", sa.String(), primary_key=True),
        sa.Column("highest_update", sa.BigInteger(), nullable=True),
    )
    op.create_table(
        "outbox",
        sa.Column(
            "receipt_id", sa.String(), sa.ForeignKey("receipts.receipt_id"), primary_key=True
        ),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        _time("created_at"),
        sa.Column("batch_index", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _time("next_attempt_at"),
        sa.Column("last_error", sa.String(), nullable=True),
    )
    op.create_index("ix_outbox_due", "outbox", ["next_attempt_at"])
    op.create_index("ix_outbox_age", "outbox", ["created_at", "batch_index"])
    op.create_table(
        "worker_state",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("int_value", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("worker_state")
    op.drop_index("ix_outbox_age", table_name="outbox")
    op.drop_index("ix_outbox_due", table_name="outbox")
    op.drop_table("outbox")
    op.drop_table("policy_ledger")
    op.drop_index("ix_credited_records_identity", table_name="credited_records")
    op.drop_table("credited_records")
    op.drop_table("receipts")
    op.drop_table("open_episodes")
