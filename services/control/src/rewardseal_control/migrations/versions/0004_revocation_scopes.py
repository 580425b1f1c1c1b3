"""Revocation of every certificate of a contract or of a checker configuration (R-C-13).

Additive: one new table, nothing before it is touched. A row revokes, permanently, every
certificate whose ``reward_contract_digest`` (kind ``contract``) or
``checker_configuration_digest`` (kind ``checker``) is ``digest``; the signed revocation list
carries it as one entry. Downgrade drops the table (the lists already signed keep their bytes).

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DIGEST = 71


def upgrade() -> None:
    op.create_table(
        "revocation_scopes",
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("digest", sa.String(_DIGEST), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("list_version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "digest", name="pk_revocation_scopes"),
        sa.CheckConstraint("kind IN ('contract', 'checker')", name="ck_revocation_scopes_kind"),
    )


def downgrade() -> None:
    op.drop_table("revocation_scopes")
