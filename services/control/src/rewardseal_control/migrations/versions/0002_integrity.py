"""Reward integrity (docs/spec.md §12): revisions, signal shards, audits, bundles, decisions.

Additive: new tables only, nothing of 0001 is touched. Revisions (and their references), sealed
shards and their rows, bundles and decisions are immutable: triggers refuse an UPDATE or DELETE
of their rows in the database itself (and a TRUNCATE on PostgreSQL), so not even a bug or a
hand-typed statement in this service can rewrite evidence. Downgrade drops the triggers and
the tables (a DROP TABLE fires no row trigger).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = 128
_DIGEST = 71
_KEY_ID = 79
_RUN_ID = 200

IMMUTABLE = (
    "integrity_revisions",
    "integrity_revision_refs",
    "integrity_shards",
    "integrity_shard_rows",
    "integrity_bundles",
    "integrity_decisions",
)
"""Equal to rewardseal_control.models.IMMUTABLE_TABLES (a migration never imports models)."""
_PG_FUNCTION = "rewardseal_refuse_change"


def _time(name: str, *, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _revision_fk(column: str, table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column],
        ["integrity_revisions.revision_id"],
        name=f"fk_{table}_{column}_integrity_revisions",
    )


def _create_tables() -> None:
    op.create_table(
        "integrity_revisions",
        sa.Column("revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(64), nullable=True),
        sa.Column("builtin", sa.Boolean(), nullable=False),
        sa.Column("independent", sa.Boolean(), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        _time("created_at"),
        sa.PrimaryKeyConstraint("revision_id", name="pk_integrity_revisions"),
        sa.CheckConstraint(
            "kind IN ('system', 'protocol', 'profile')", name="ck_integrity_revisions_kind"
        ),
    )
    op.create_index(
        "ix_integrity_revisions_kind_created_at_revision_id",
        "integrity_revisions",
        ["kind", "created_at", "revision_id"],
    )
    op.create_table(
        "integrity_revision_refs",
        sa.Column("revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("ref", sa.String(16), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("revision_id", "ref", "value", name="pk_integrity_revision_refs"),
        _revision_fk("revision_id", "integrity_revision_refs"),
    )
    op.create_index(
        "ix_integrity_revision_refs_ref_value", "integrity_revision_refs", ["ref", "value"]
    )
    op.create_table(
        "integrity_open_rows",
        sa.Column("run_id", sa.String(_RUN_ID), nullable=False),
        sa.Column("boundary", sa.BigInteger(), nullable=False),
        sa.Column("record_id", sa.String(2 * _ID), nullable=False),
        sa.Column("candidate", sa.BigInteger(), nullable=False),
        sa.Column("system_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("protocol_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        _time("appended_at"),
        sa.PrimaryKeyConstraint(
            "run_id", "boundary", "record_id", "candidate", name="pk_integrity_open_rows"
        ),
        _revision_fk("system_revision_id", "integrity_open_rows"),
        _revision_fk("protocol_revision_id", "integrity_open_rows"),
    )
    op.create_table(
        "integrity_shards",
        sa.Column("shard_id", sa.String(_DIGEST), nullable=False),
        sa.Column("run_id", sa.String(_RUN_ID), nullable=False),
        sa.Column("boundary", sa.BigInteger(), nullable=False),
        sa.Column("system_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("protocol_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("captured", sa.BigInteger(), nullable=False),
        sa.Column("exact", sa.Boolean(), nullable=False),
        sa.Column("core_rows", sa.BigInteger(), nullable=False),
        sa.Column("diagnostic_rows", sa.BigInteger(), nullable=False),
        sa.Column("manifest", sa.Text(), nullable=False),
        _time("sealed_at"),
        sa.PrimaryKeyConstraint("shard_id", name="pk_integrity_shards"),
        sa.UniqueConstraint("run_id", "boundary", name="uq_integrity_shards_run_id_boundary"),
        _revision_fk("system_revision_id", "integrity_shards"),
        _revision_fk("protocol_revision_id", "integrity_shards"),
    )
    op.create_table(
        "integrity_shard_rows",
        sa.Column("shard_id", sa.String(_DIGEST), nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("shard_id", "position", name="pk_integrity_shard_rows"),
        sa.ForeignKeyConstraint(
            ["shard_id"],
            ["integrity_shards.shard_id"],
            name="fk_integrity_shard_rows_shard_id_integrity_shards",
        ),
    )
    op.create_table(
        "integrity_bundles",
        sa.Column("bundle_id", sa.String(_DIGEST), nullable=False),
        sa.Column("evidence_digest", sa.String(_DIGEST), nullable=False),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        sa.Column("signer_key_id", sa.String(_KEY_ID), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        _time("issued_at"),
        sa.PrimaryKeyConstraint("bundle_id", name="pk_integrity_bundles"),
    )
    op.create_index(
        "ix_integrity_bundles_evidence_digest", "integrity_bundles", ["evidence_digest"]
    )
    op.create_table(
        "integrity_audits",
        sa.Column("audit_id", sa.String(_ID), nullable=False),
        sa.Column("run_id", sa.String(_RUN_ID), nullable=False),
        sa.Column("boundary", sa.BigInteger(), nullable=False),
        sa.Column("shard_id", sa.String(_DIGEST), nullable=False),
        sa.Column("system_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("protocol_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("profile_revision_id", sa.String(_DIGEST), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("claim", sa.String(64), nullable=True),
        _time("lease_until", nullable=True),
        sa.Column("evidence_digest", sa.String(_DIGEST), nullable=True),
        sa.Column("bundle_id", sa.String(_DIGEST), nullable=True),
        sa.Column("bundle_reused", sa.Boolean(), nullable=False),
        sa.Column("retry_of", sa.String(_ID), nullable=True),
        sa.Column("retry_reason", sa.Text(), nullable=False),
        sa.Column("cancel_reason", sa.Text(), nullable=False),
        _time("created_at"),
        _time("updated_at"),
        sa.PrimaryKeyConstraint("audit_id", name="pk_integrity_audits"),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'cancelled')",
            name="ck_integrity_audits_state",
        ),
        sa.ForeignKeyConstraint(
            ["shard_id"],
            ["integrity_shards.shard_id"],
            name="fk_integrity_audits_shard_id_integrity_shards",
        ),
        _revision_fk("profile_revision_id", "integrity_audits"),
        sa.ForeignKeyConstraint(
            ["bundle_id"],
            ["integrity_bundles.bundle_id"],
            name="fk_integrity_audits_bundle_id_integrity_bundles",
        ),
    )
    for columns in (
        ["state", "created_at", "audit_id"],
        ["run_id", "created_at", "audit_id"],
        ["created_at", "audit_id"],
    ):
        op.create_index(f"ix_integrity_audits_{'_'.join(columns)}", "integrity_audits", columns)
    op.create_table(
        "integrity_decisions",
        sa.Column("audit_id", sa.String(_ID), nullable=False),
        sa.Column("sequence", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        _time("at"),
        sa.PrimaryKeyConstraint("audit_id", "sequence", name="pk_integrity_decisions"),
        sa.ForeignKeyConstraint(
            ["audit_id"],
            ["integrity_audits.audit_id"],
            name="fk_integrity_decisions_audit_id_integrity_audits",
        ),
    )


def _create_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            f"CREATE FUNCTION {_PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            "BEGIN\n"
            "  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP\n"
            "    USING ERRCODE = 'integrity_constraint_violation';\n"
            "END\n"
            "$$"
        )
        for table in IMMUTABLE:
            op.execute(
                f"CREATE TRIGGER trg_{table}_immutable BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {_PG_FUNCTION}()"
            )
            op.execute(
                f"CREATE TRIGGER trg_{table}_no_truncate BEFORE TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {_PG_FUNCTION}()"
            )
        return
    for table in IMMUTABLE:
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER trg_{table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {operation} refused'); END"
            )


def _drop_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table in IMMUTABLE:
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_immutable ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_truncate ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {_PG_FUNCTION}()")
        return
    for table in IMMUTABLE:
        for operation in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_{operation}")


def upgrade() -> None:
    """Create the integrity tables, their indexes and the immutability triggers."""
    _create_tables()
    _create_triggers()


def downgrade() -> None:
    """Drop the triggers, then the integrity tables (children first)."""
    _drop_triggers()
    for table in (
        "integrity_decisions",
        "integrity_audits",
        "integrity_bundles",
        "integrity_shard_rows",
        "integrity_shards",
        "integrity_open_rows",
        "integrity_revision_refs",
        "integrity_revisions",
    ):
        op.drop_table(table)
