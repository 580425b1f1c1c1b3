"""The dead letter (R-C-12): receipts control refused for good, moved out of the outbox.

Additive, one table with its index, as ``metadata.create_all`` made it (a pre-migration store
that has it is adopted by stamping 0002). Downgrade drops it: the receipts it held stay in
``receipts`` but are no longer queued for control (retry them first to keep them forwarded).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dead_letter",
        sa.Column(
            "receipt_id", sa.String(), sa.ForeignKey("receipts.receipt_id"), primary_key=True
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("batch_index", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("code", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("refused_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_dead_letter_refused", "dead_letter", ["refused_at"])


def downgrade() -> None:
    op.drop_index("ix_dead_letter_refused", table_name="dead_letter")
    op.drop_table("dead_letter")
