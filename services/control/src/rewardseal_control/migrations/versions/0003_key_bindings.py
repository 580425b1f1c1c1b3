"""Keys bound to contracts (docs/spec.md R-C-10, R-C-11) and the receipt index keyed by
(contract digest, episode id) (R-C-5).

* ``issuer_keys.admitted_at``: when an admin or an enrollment credential admitted the key.
  Keys registered before this revision are not admitted: an operator approves each worker key
  once after upgrading (docs/operations.md), so no key trusted by the old rule alone (any
  worker credential could register one) keeps writing the index.
* ``issuer_key_bindings``: which contracts an admitted key may sign receipts for.
* ``issuer_key_certificates``: the bundle certificate each worker key registered with.
* ``enrollments``: one-time enrollment credentials (their hashes only).
* ``receipts``: unique on (contract_digest, episode_id) instead of episode_id alone. SQLite
  cannot drop a constraint in place, so there the table is copied (batch mode, from the table
  as 0001 made it: also offline). Downgrade restores the old constraint, which fails while two
  contracts hold receipts for one episode id (nothing is deleted to make it fit).

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

_ID = 128
_DIGEST = 71
_KEY_ID = 79
_OLD_UNIQUE = "uq_receipts_episode_id"
_NEW_UNIQUE = "uq_receipts_contract_digest_episode_id"


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _receipts(unique: sa.UniqueConstraint) -> sa.Table:
    """The receipts table as it stands with ``unique``: what SQLite's batch mode copies."""
    return sa.Table(
        "receipts",
        sa.MetaData(),
        sa.Column("receipt_id", sa.String(_ID), nullable=False),
        sa.Column("episode_id", sa.String(_ID), nullable=False),
        sa.Column("contract_digest", sa.String(_DIGEST), nullable=False),
        sa.Column("policy_checkpoint_id", sa.String(_ID), nullable=False),
        sa.Column("policy_update", sa.BigInteger(), nullable=False),
        sa.Column("oracle_tier", sa.Integer(), nullable=False),
        sa.Column("reward_outcome", sa.Integer(), nullable=False),
        sa.Column("scalar_reward", sa.Double(), nullable=True),
        sa.Column("certified", sa.Boolean(), nullable=False),
        sa.Column("development_only", sa.Boolean(), nullable=False),
        sa.Column("certificate_id", sa.String(_ID), nullable=True),
        sa.Column("certificate_state", sa.Integer(), nullable=False),
        sa.Column("calibration_scope", sa.Integer(), nullable=False),
        sa.Column("issuer_key_id", sa.String(_KEY_ID), nullable=False),
        _time("issued_at"),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        _time("recorded_at"),
        sa.PrimaryKeyConstraint("receipt_id", name="pk_receipts"),
        sa.ForeignKeyConstraint(
            ["contract_digest"], ["contracts.digest"], name="fk_receipts_contract_digest_contracts"
        ),
        sa.ForeignKeyConstraint(
            ["issuer_key_id"], ["issuer_keys.key_id"], name="fk_receipts_issuer_key_id_issuer_keys"
        ),
        unique,
        sa.Index(
            "ix_receipts_contract_digest_policy_update_receipt_id",
            "contract_digest",
            "policy_update",
            "receipt_id",
        ),
        sa.Index("ix_receipts_policy_update_receipt_id", "policy_update", "receipt_id"),
        sa.Index("ix_receipts_contract_digest_reward_outcome", "contract_digest", "reward_outcome"),
        sa.Index("ix_receipts_contract_digest_certified", "contract_digest", "certified"),
        sa.Index("ix_receipts_certificate_id", "certificate_id"),
    )


def _swap_receipt_unique(old: sa.UniqueConstraint, new_name: str, columns: list[str]) -> None:
    with op.batch_alter_table("receipts", copy_from=_receipts(old)) as batch:
        batch.drop_constraint(str(old.name), type_="unique")
        batch.create_unique_constraint(new_name, columns)


def upgrade() -> None:
    """Add admission, bindings, bundle certificates and enrollments; re-key the index."""
    op.add_column("issuer_keys", _time("admitted_at", nullable=True))
    op.create_table(
        "issuer_key_bindings",
        sa.Column("key_id", sa.String(_KEY_ID), nullable=False),
        sa.Column("contract_digest", sa.String(_DIGEST), nullable=False),
        _time("bound_at"),
        sa.PrimaryKeyConstraint("key_id", "contract_digest", name="pk_issuer_key_bindings"),
        sa.ForeignKeyConstraint(
            ["key_id"], ["issuer_keys.key_id"], name="fk_issuer_key_bindings_key_id_issuer_keys"
        ),
        sa.ForeignKeyConstraint(
            ["contract_digest"],
            ["contracts.digest"],
            name="fk_issuer_key_bindings_contract_digest_contracts",
        ),
    )
    op.create_table(
        "issuer_key_certificates",
        sa.Column("key_id", sa.String(_KEY_ID), nullable=False),
        sa.Column("certificate_id", sa.String(_ID), nullable=False),
        sa.Column("contract_digest", sa.String(_DIGEST), nullable=False),
        sa.Column("certificate_digest", sa.String(_DIGEST), nullable=False),
        _time("registered_at"),
        sa.PrimaryKeyConstraint("key_id", "certificate_id", name="pk_issuer_key_certificates"),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["issuer_keys.key_id"],
            name="fk_issuer_key_certificates_key_id_issuer_keys",
        ),
    )
    op.create_table(
        "enrollments",
        sa.Column("enrollment_id", sa.String(_ID), nullable=False),
        sa.Column("credential_hash", sa.String(_DIGEST), nullable=False),
        sa.Column("contract_digests", sa.Text(), nullable=False),
        _time("created_at"),
        _time("expires_at"),
        _time("used_at", nullable=True),
        sa.Column("used_by_key_id", sa.String(_KEY_ID), nullable=True),
        sa.PrimaryKeyConstraint("enrollment_id", name="pk_enrollments"),
        sa.UniqueConstraint("credential_hash", name="uq_enrollments_credential_hash"),
        sa.ForeignKeyConstraint(
            ["used_by_key_id"],
            ["issuer_keys.key_id"],
            name="fk_enrollments_used_by_key_id_issuer_keys",
        ),
    )
    _swap_receipt_unique(
        sa.UniqueConstraint("episode_id", name=_OLD_UNIQUE),
        _NEW_UNIQUE,
        ["contract_digest", "episode_id"],
    )


def downgrade() -> None:
    """Drop what upgrade added; the index is unique on episode_id again."""
    _swap_receipt_unique(
        sa.UniqueConstraint("contract_digest", "episode_id", name=_NEW_UNIQUE),
        _OLD_UNIQUE,
        ["episode_id"],
    )
    op.drop_table("enrollments")
    op.drop_table("issuer_key_certificates")
    op.drop_table("issuer_key_bindings")
    # Not batch mode: nothing else in issuer_keys changes, and SQLite (3.35 on) and PostgreSQL
    # both drop a plain column in place (a copy would trip the keys' foreign keys).
    op.drop_column("issuer_keys", "admitted_at")
