"""Initial control-plane schema: contracts, issuer keys, certificates, revocation, receipts,
audit log (docs/spec.md R-C-6).

Written out by hand, constraint and index names included, so that upgrade and downgrade do the
same thing on SQLite and PostgreSQL whatever version of SQLAlchemy renders them. Timestamps are
``DateTime(timezone=True)`` (the DDL type of ``rewardseal_server.sqlstore.UTCDateTime``).

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 128
_DIGEST = 71
_KEY_ID = 79


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    """Create every table and index."""
    op.create_table(
        "contracts",
        sa.Column("digest", sa.String(_DIGEST), nullable=False),
        sa.Column("contract_id", sa.String(_ID), nullable=False),
        sa.Column("contract_version", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        _time("registered_at"),
        sa.PrimaryKeyConstraint("digest", name="pk_contracts"),
    )
    op.create_index("ix_contracts_contract_id", "contracts", ["contract_id"])
    op.create_index("ix_contracts_registered_at_digest", "contracts", ["registered_at", "digest"])

    op.create_table(
        "issuer_keys",
        sa.Column("key_id", sa.String(_KEY_ID), nullable=False),
        sa.Column("public_key", sa.LargeBinary(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=False),
        _time("not_before"),
        _time("not_after", nullable=True),
        _time("retired_at", nullable=True),
        _time("registered_at"),
        sa.PrimaryKeyConstraint("key_id", name="pk_issuer_keys"),
        sa.CheckConstraint("role IN ('worker', 'organization')", name="ck_issuer_keys_role"),
        sa.CheckConstraint("length(public_key) = 32", name="ck_issuer_keys_public_key_size"),
    )
    op.create_index(
        "ix_issuer_keys_registered_at_key_id", "issuer_keys", ["registered_at", "key_id"]
    )
    op.create_index(
        "ix_issuer_keys_role_registered_at_key_id",
        "issuer_keys",
        ["role", "registered_at", "key_id"],
    )

    op.create_table(
        "certificates",
        sa.Column("certificate_id", sa.String(_ID), nullable=False),
        sa.Column("contract_digest", sa.String(_DIGEST), nullable=False),
        sa.Column("digest", sa.String(_DIGEST), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("scope", sa.Integer(), nullable=False),
        sa.Column("issuer", sa.Integer(), nullable=False),
        sa.Column("issuer_key_id", sa.String(_KEY_ID), nullable=False),
        sa.Column("issued_at_policy_update", sa.BigInteger(), nullable=False),
        sa.Column("expiry_policy_updates", sa.BigInteger(), nullable=False),
        sa.Column("epsilon", sa.Double(), nullable=False),
        _time("issued_at"),
        sa.PrimaryKeyConstraint("certificate_id", name="pk_certificates"),
        sa.ForeignKeyConstraint(
            ["contract_digest"],
            ["contracts.digest"],
            name="fk_certificates_contract_digest_contracts",
        ),
        sa.ForeignKeyConstraint(
            ["issuer_key_id"],
            ["issuer_keys.key_id"],
            name="fk_certificates_issuer_key_id_issuer_keys",
        ),
        sa.UniqueConstraint("digest", name="uq_certificates_digest"),
    )
    op.create_index(
        "ix_certificates_contract_digest_issued_at_certificate_id",
        "certificates",
        ["contract_digest", "issued_at", "certificate_id"],
    )
    op.create_index(
        "ix_certificates_issued_at_certificate_id",
        "certificates",
        ["issued_at", "certificate_id"],
    )

    op.create_table(
        "revocations",
        sa.Column("certificate_id", sa.String(_ID), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        _time("revoked_at"),
        sa.Column("list_version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("certificate_id", name="pk_revocations"),
        sa.ForeignKeyConstraint(
            ["certificate_id"],
            ["certificates.certificate_id"],
            name="fk_revocations_certificate_id_certificates",
        ),
    )

    op.create_table(
        "revocation_list_heads",
        sa.Column("version", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        _time("issued_at"),
        _time("expires_at"),
        sa.PrimaryKeyConstraint("version", name="pk_revocation_list_heads"),
    )

    op.create_table(
        "receipts",
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
            ["contract_digest"],
            ["contracts.digest"],
            name="fk_receipts_contract_digest_contracts",
        ),
        sa.ForeignKeyConstraint(
            ["issuer_key_id"],
            ["issuer_keys.key_id"],
            name="fk_receipts_issuer_key_id_issuer_keys",
        ),
        sa.UniqueConstraint("episode_id", name="uq_receipts_episode_id"),
    )
    op.create_index(
        "ix_receipts_contract_digest_policy_update_receipt_id",
        "receipts",
        ["contract_digest", "policy_update", "receipt_id"],
    )
    op.create_index(
        "ix_receipts_policy_update_receipt_id", "receipts", ["policy_update", "receipt_id"]
    )
    op.create_index(
        "ix_receipts_contract_digest_reward_outcome",
        "receipts",
        ["contract_digest", "reward_outcome"],
    )
    op.create_index(
        "ix_receipts_contract_digest_certified", "receipts", ["contract_digest", "certified"]
    )
    op.create_index("ix_receipts_certificate_id", "receipts", ["certificate_id"])

    op.create_table(
        "audit_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        _time("at"),
        sa.Column("actor", sa.String(_ID), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_action_id", "audit_log", ["action", "id"])


def downgrade() -> None:
    """Drop every index and table, dependents first."""
    op.drop_index("ix_audit_log_action_id", table_name="audit_log")
    op.drop_table("audit_log")

    op.drop_index("ix_receipts_certificate_id", table_name="receipts")
    op.drop_index("ix_receipts_contract_digest_certified", table_name="receipts")
    op.drop_index("ix_receipts_contract_digest_reward_outcome", table_name="receipts")
    op.drop_index("ix_receipts_policy_update_receipt_id", table_name="receipts")
    op.drop_index("ix_receipts_contract_digest_policy_update_receipt_id", table_name="receipts")
    op.drop_table("receipts")

    op.drop_table("revocation_list_heads")
    op.drop_table("revocations")

    op.drop_index("ix_certificates_issued_at_certificate_id", table_name="certificates")
    op.drop_index(
        "ix_certificates_contract_digest_issued_at_certificate_id", table_name="certificates"
    )
    op.drop_table("certificates")

    op.drop_index("ix_issuer_keys_role_registered_at_key_id", table_name="issuer_keys")
    op.drop_index("ix_issuer_keys_registered_at_key_id", table_name="issuer_keys")
    op.drop_table("issuer_keys")

    op.drop_index("ix_contracts_registered_at_digest", table_name="contracts")
    op.drop_index("ix_contracts_contract_id", table_name="contracts")
    op.drop_table("contracts")
