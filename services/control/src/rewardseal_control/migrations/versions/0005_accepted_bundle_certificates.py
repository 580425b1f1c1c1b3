"""Bundle certificates an admin accepted (R-C-11): what acceptance needs to be stored.

Additive, two columns:

* ``enrollments.accepts_bundle_certificate``: the key enrolled with this credential has the
  bundle certificate it registers with accepted (recorded among control's certificates, so
  listed and revocable). False for every enrollment made before.
* ``issuer_key_certificates.body``: the registered bundle certificate's deterministic bytes,
  so an admin's later approval can accept it. Null for rows registered before (the worker's
  next registration of the same certificate fills it in).

Downgrade drops both (certificates already accepted stay among control's certificates).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Not batch mode: plain columns added and dropped in place (SQLite 3.35 on and PostgreSQL
    # both do; a table copy would trip the foreign keys), as 0003 does for issuer_keys.
    op.add_column(
        "enrollments",
        sa.Column(
            "accepts_bundle_certificate",
            sa.Boolean(),
            nullable=False,
            server_default=sa.false(),
        ),
    )
    op.add_column("issuer_key_certificates", sa.Column("body", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("issuer_key_certificates", "body")
    op.drop_column("enrollments", "accepts_bundle_certificate")
