"""Integrity storage (R-I-1, R-I-3, R-I-8, R-C-6): revisions, shard rows, bundles and decisions
are immutable in the database itself (triggers refuse UPDATE and DELETE on SQLite and
PostgreSQL), and migration 0002 goes up and down over existing data without touching it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import inspect, text
from support.control import start_control, stop_control
from support.integrity import agreeing_rows, audit_to_end, capture, create_system

from rewardseal_control import db
from rewardseal_control.models import IMMUTABLE_TABLES
from rewardseal_control.store import ControlStore

INTEGRITY_TABLES = {
    "integrity_revisions",
    "integrity_revision_refs",
    "integrity_open_rows",
    "integrity_shards",
    "integrity_shard_rows",
    "integrity_audits",
    "integrity_bundles",
    "integrity_decisions",
}


async def test_immutable_rows_refuse_update_and_delete(store_url: str) -> None:
    control = await start_control(store_url)
    try:
        system_id = await create_system(control)
        shard = await capture(control, agreeing_rows(30), system_id=system_id)
        audit = await audit_to_end(control, shard.shard_id)
        assert audit.bundle_id
    finally:
        await stop_control(control)
    # Every immutable table holds rows now; none of them can be changed or removed.
    assert set(IMMUTABLE_TABLES) < INTEGRITY_TABLES
    engine = db.make_store_engine(store_url)
    try:
        for table in IMMUTABLE_TABLES:
            with engine.engine.connect() as conn:
                before = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            assert before > 0, table
            column = inspect(engine.engine).get_columns(table)[0]["name"]
            for statement in (
                f"UPDATE {table} SET {column} = {column}",
                f"DELETE FROM {table}",
            ):
                with (
                    pytest.raises(sa_exc.DBAPIError, match="append-only"),
                    engine.engine.begin() as conn,
                ):
                    conn.execute(text(statement))
            with engine.engine.connect() as conn:
                after = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            assert after == before, table
        # The audit itself is the one mutable record: its state machine moves.
        with engine.engine.begin() as conn:
            moved = conn.execute(text("UPDATE integrity_audits SET error = 'x'")).rowcount
        assert moved == 1
    finally:
        engine.dispose()


def test_migration_0002_goes_up_and_down_over_existing_data(store_url: str) -> None:
    db.upgrade(store_url, "0001")
    engine = db.make_store_engine(store_url)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    contract = {
        "digest": "sha256:" + "c" * 64,
        "contract_id": "mockmed-contract",
        "contract_version": "1",
        "body": b"\x0a\x01x",
        "registered_at": at,
    }

    def contracts() -> list[tuple[object, ...]]:
        with engine.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text("SELECT digest, body FROM contracts"))]

    def tables() -> set[str]:
        return set(inspect(engine.engine).get_table_names())

    try:
        with engine.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO contracts (digest, contract_id, contract_version, body, "
                    "registered_at) VALUES (:digest, :contract_id, :contract_version, :body, "
                    ":registered_at)"
                ),
                contract,
            )
        existing = contracts()
        assert not tables() & INTEGRITY_TABLES
        db.upgrade(store_url)
        assert db.current_revision(store_url) == db.head_revision()  # 0002 and every later one
        assert tables() >= INTEGRITY_TABLES
        assert contracts() == existing
        with ControlStore(store_url) as store:
            assert store.integrity_revisions.ensure_builtins(at=at) == 6
        db.downgrade(store_url, "0001")
        assert db.current_revision(store_url) == "0001"
        assert not tables() & INTEGRITY_TABLES
        assert contracts() == existing
        if engine.backend == "sqlite":
            with engine.engine.connect() as conn:
                triggers = conn.execute(
                    text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
                ).scalar_one()
            assert triggers == 0
        db.upgrade(store_url)  # and up again: the downgrade left nothing in the way
        assert tables() >= INTEGRITY_TABLES
        assert contracts() == existing
    finally:
        engine.dispose()
