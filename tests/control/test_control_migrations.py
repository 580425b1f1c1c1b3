"""Control-plane schema (R-C-6): Alembic upgrade/downgrade on SQLite and PostgreSQL, the models
match the migrations, and the engine/URL rules of rewardseal_server.sqlstore."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from support.postgres import PostgresServer

from rewardseal.core.errors import Unavailable, ValidationError
from rewardseal_control import db
from rewardseal_control.models import Base
from rewardseal_control.store import ControlStore
from rewardseal_server.sqlstore import StoreEngine, normalize_url

TABLES = {
    "contracts",
    "issuer_keys",
    "certificates",
    "revocations",
    "revocation_list_heads",
    "revocation_scopes",
    "receipts",
    "audit_log",
}

RECEIPT_COLUMNS = {
    "receipt_id",
    "episode_id",
    "contract_digest",
    "policy_checkpoint_id",
    "policy_update",
    "oracle_tier",
    "reward_outcome",
    "scalar_reward",
    "certified",
    "development_only",
    "certificate_id",
    "certificate_state",
    "calibration_scope",
    "issuer_key_id",
    "issued_at",
    "envelope",
    "recorded_at",
}


def _tables(url: str) -> set[str]:
    store = db.make_store_engine(url)
    try:
        return set(inspect(store.engine).get_table_names())
    finally:
        store.dispose()


def _diff(url: str) -> list[object]:
    """What alembic autogenerate would change to make the database match the models."""
    store = db.make_store_engine(url)
    try:
        with store.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        store.dispose()


def test_migrations_ship_inside_the_package() -> None:
    assert (db.MIGRATIONS_DIR / "env.py").is_file()
    assert (db.MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert (db.MIGRATIONS_DIR / "versions" / "0002_integrity.py").is_file()
    assert (db.MIGRATIONS_DIR / "versions" / "0003_key_bindings.py").is_file()
    assert (db.MIGRATIONS_DIR / "versions" / "0004_revocation_scopes.py").is_file()
    assert (db.MIGRATIONS_DIR / "versions" / "0005_accepted_bundle_certificates.py").is_file()
    assert db.head_revision() == "0005"
    # Built in code: no alembic.ini is read.
    assert db.alembic_config().config_file_name is None


def test_upgrade_to_head_and_downgrade_to_base(store_url: str) -> None:
    assert db.current_revision(store_url) is None
    db.upgrade(store_url)
    assert db.current_revision(store_url) == db.head_revision()
    assert _tables(store_url) >= TABLES
    db.upgrade(store_url)  # at head already: a no-op
    assert db.current_revision(store_url) == db.head_revision()

    db.downgrade(store_url)
    assert db.current_revision(store_url) is None
    assert _tables(store_url) - {"alembic_version"} == set()

    # And back up again: downgrade left nothing behind that blocks a fresh upgrade.
    db.upgrade(store_url, "0001")
    assert db.current_revision(store_url) == "0001"
    assert _tables(store_url) >= TABLES - {"revocation_scopes"}
    assert "revocation_scopes" not in _tables(store_url)


def test_models_match_the_migrations(store_url: str) -> None:
    db.upgrade(store_url)
    assert _diff(store_url) == []


def test_model_comparison_detects_drift(store_url: str) -> None:
    """The comparison above is not vacuous: a missing index is reported."""
    db.upgrade(store_url)
    store = db.make_store_engine(store_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("DROP INDEX ix_receipts_contract_digest_certified"))
    finally:
        store.dispose()
    diff = _diff(store_url)
    assert any(
        op[0] == "add_index" and op[1].name == "ix_receipts_contract_digest_certified"
        for op in diff
        if isinstance(op, tuple)
    ), diff


def test_receipt_table_holds_privacy_safe_columns_only(store_url: str) -> None:
    db.upgrade(store_url)
    store = db.make_store_engine(store_url)
    try:
        columns = {c["name"] for c in inspect(store.engine).get_columns("receipts")}
        unique = inspect(store.engine).get_unique_constraints("receipts")
    finally:
        store.dispose()
    assert columns == RECEIPT_COLUMNS
    # One receipt per episode of a contract (R-C-5): the same episode id under two contracts
    # is two receipts.
    assert [u["column_names"] for u in unique] == [["contract_digest", "episode_id"]]


def test_list_filters_are_indexed(store_url: str) -> None:
    db.upgrade(store_url)
    store = db.make_store_engine(store_url)
    try:
        indexes = {
            tuple(ix["column_names"]) for ix in inspect(store.engine).get_indexes("receipts")
        }
    finally:
        store.dispose()
    assert ("contract_digest", "policy_update", "receipt_id") in indexes
    assert ("contract_digest", "reward_outcome") in indexes
    assert ("contract_digest", "certified") in indexes
    assert ("policy_update", "receipt_id") in indexes


def test_concurrent_upgrades_are_serialized(store_url: str) -> None:
    """Replicas starting together against one fresh database all succeed, migrating once."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(db.upgrade, store_url) for _ in range(4)]:
            future.result()
    assert db.current_revision(store_url) == db.head_revision()
    assert _diff(store_url) == []


def test_env_accepts_a_url_instead_of_a_connection(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'control.db'}"
    command.upgrade(db.alembic_config(url=url), "head")
    assert db.current_revision(url) == db.head_revision()
    command.downgrade(db.alembic_config(url=url), "base")
    assert db.current_revision(url) is None


@pytest.mark.parametrize(
    ("url", "dialect_words"),
    [
        ("sqlite:///offline.db", "CREATE TABLE receipts"),
        ("postgresql://u@localhost/control", "TIMESTAMP WITH TIME ZONE"),
    ],
)
def test_offline_migration_renders_sql(url: str, dialect_words: str) -> None:
    buffer = io.StringIO()
    config = db.alembic_config(url=url)
    config.output_buffer = buffer
    command.upgrade(config, "head", sql=True)
    command.downgrade(config, "head:base", sql=True)
    rendered = buffer.getvalue()
    assert dialect_words in rendered
    assert "CREATE INDEX ix_receipts_contract_digest_certified" in rendered
    assert "DROP TABLE receipts" in rendered


def test_store_without_migrate_refuses_an_old_schema(store_url: str) -> None:
    with pytest.raises(Unavailable, match="revision"):
        ControlStore(store_url, migrate=False)
    db.upgrade(store_url)
    ControlStore(store_url, migrate=False).close()


def test_sqlite_connections_are_durable_and_enforce_foreign_keys(tmp_path: Path) -> None:
    store = StoreEngine(f"sqlite:///{tmp_path / 'c.db'}", what="control store")
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    finally:
        store.dispose()


def test_postgres_urls_select_psycopg() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "mysql://u@h/db", "not a url", ""]
)
def test_unusable_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        db.make_engine(url)


def test_url_password_never_appears_in_errors(postgres_server: PostgresServer) -> None:
    url = f"postgresql://user:s3cr3t-pw@127.0.0.1:{postgres_server.port}/missing_db"
    with pytest.raises(Unavailable) as caught:
        db.current_revision(url)
    assert "s3cr3t-pw" not in str(caught.value)
    assert "s3cr3t-pw" not in repr(db.make_store_engine(url))
