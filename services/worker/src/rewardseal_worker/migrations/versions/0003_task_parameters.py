"""The task parameters an open episode was begun with (R-W-18).

Additive: one nullable JSON column on ``open_episodes``, NULL for an episode of a contract that
declares no parameters (every registration made before this revision). Downgrade drops it; an
episode of a parameterized contract still open then loses its values, and its score is refused
until it is begun again (begin again, or let the episodes close, before downgrading).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("open_episodes", sa.Column("task_parameters", sa.JSON(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN: SQLite has it since 3.35 (2021), and a plain statement
    # renders offline too (batch mode would need a live database to copy the table).
    op.drop_column("open_episodes", "task_parameters")
