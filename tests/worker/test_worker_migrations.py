"""The worker store's schema under Alembic migrations (R-W-17), on SQLite and PostgreSQL.

Upgrade and downgrade; the migrations make exactly what ``metadata.create_all`` made (the worker's
only schema step before them) and agree with the tables; a store made before migrations is
adopted by ``rewardseal-worker migrate``; ``serve`` refuses a schema that is older, newer or
unversioned in one line naming that command, and creates a fresh database at the newest revision
(processes racing on it included).
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Table, insert, inspect, text
from support.worker_store import count_receipts

from rewardseal.core.errors import Unavailable
from rewardseal_server.cli_failures import EXIT_RUNTIME
from rewardseal_server.sqlstore import StoreEngine
from rewardseal_worker.cli import main as worker_main
from rewardseal_worker.settings import DB_FILE
from rewardseal_worker.store import WorkerStore
from rewardseal_worker.store.migrating import (
    MIGRATIONS,
    MIGRATIONS_DIR,
    PRE_MIGRATION_SHAPES,
    shape_of,
)
from rewardseal_worker.store.schema import metadata, outbox, receipts

CONTRACT = "sha256:" + "c" * 64
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
HEAD = "0003"
TABLES = {
    "open_episodes",
    "receipts",
    "credited_records",
    "policy_ledger",
    "outbox",
    "dead_letter",
    "worker_state",
}


def engine_for(url: str) -> StoreEngine:
    return StoreEngine(url, what="worker store")


def run(url: str, work: Callable[[Any], Any]) -> Any:
    """``work(connection)`` in one committed transaction on a fresh engine."""
    store = engine_for(url)
    try:
        with store.engine.begin() as conn:
            return work(conn)
    finally:
        store.dispose()


def open_episode_columns(url: str) -> list[str]:
    return [c["name"] for c in run(url, lambda conn: inspect(conn).get_columns("open_episodes"))]


def tables(url: str) -> set[str]:
    return set(run(url, lambda conn: inspect(conn).get_table_names())) - {"alembic_version"}


def diff(url: str) -> list[Any]:
    """What alembic autogenerate would change to make the database match the tables."""

    def work(conn: Any) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))

    return list(run(url, work))


def structure(url: str) -> dict[str, Any]:
    """Every table's columns (type, nullability, default), key, foreign keys, indexes and
    unique constraints, by name where the database names them (PostgreSQL names even the
    constraints the schema leaves unnamed)."""

    def work(conn: Any) -> dict[str, Any]:
        seen = inspect(conn)
        return {
            table: {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                    for c in seen.get_columns(table)
                ],
                "key": seen.get_pk_constraint(table),
                "foreign": sorted(
                    (f["name"] or "", *f["constrained_columns"], f["referred_table"])
                    for f in seen.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (str(i["name"]), *i["column_names"], str(i["unique"]))
                    for i in seen.get_indexes(table)
                ),
                "unique": sorted(
                    (u["name"] or "", *u["column_names"])
                    for u in seen.get_unique_constraints(table)
                ),
            }
            for table in sorted(seen.get_table_names())
            if table != "alembic_version"
        }

    return dict(run(url, work))


def create_all(url: str, *, leave_out: frozenset[str] = frozenset()) -> None:
    """A store as a worker before migrations made it (``metadata.create_all`` of that build:
    the schema of revision 0002, or 0001 without the dead letter), with a receipt waiting in the
    outbox. Later revisions (0003 on) were never made by ``create_all``."""
    MIGRATIONS.upgrade(url, "0001" if "dead_letter" in leave_out else "0002")
    run(url, lambda conn: conn.execute(text("DROP TABLE alembic_version")))

    def work(conn: Any) -> None:
        conn.execute(
            insert(receipts).values(
                receipt_id="r-0",
                episode_id="ep-0",
                contract_digest=CONTRACT,
                policy_update=1,
                envelope=b"envelope-0",
                evidence=b"{}",
                created_at=T0,
            )
        )
        conn.execute(
            insert(outbox).values(
                receipt_id="r-0",
                envelope=b"envelope-0",
                created_at=T0,
                batch_index=0,
                attempts=0,
                next_attempt_at=T0,
            )
        )

    run(url, work)


def set_revision(url: str, revision: str) -> None:
    run(
        url,
        lambda conn: conn.execute(
            text("UPDATE alembic_version SET version_num = :r"), {"r": revision}
        ),
    )


# ---------------------------------------------------------------------- the migrations


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0002_dead_letter.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0003_task_parameters.py").is_file()
    assert MIGRATIONS.head() == HEAD
    # Built in code: no alembic.ini is read.
    assert MIGRATIONS.config().config_file_name is None


def test_upgrade_to_head_and_downgrade_to_base(store_url: str) -> None:
    assert MIGRATIONS.current(store_url) is None
    MIGRATIONS.upgrade(store_url)
    assert MIGRATIONS.current(store_url) == HEAD
    assert tables(store_url) == TABLES
    MIGRATIONS.upgrade(store_url)  # at head already: a no-op
    assert MIGRATIONS.current(store_url) == HEAD

    MIGRATIONS.downgrade(store_url, "0002")
    assert MIGRATIONS.current(store_url) == "0002"
    assert "task_parameters" not in open_episode_columns(store_url)
    MIGRATIONS.downgrade(store_url, "0001")
    assert MIGRATIONS.current(store_url) == "0001"
    assert tables(store_url) == TABLES - {"dead_letter"}
    MIGRATIONS.downgrade(store_url)
    assert MIGRATIONS.current(store_url) is None
    assert tables(store_url) == set()

    # And back up again: the downgrade left nothing behind that blocks a fresh upgrade.
    MIGRATIONS.upgrade(store_url, "0001")
    assert tables(store_url) == TABLES - {"dead_letter"}
    MIGRATIONS.upgrade(store_url)
    assert MIGRATIONS.current(store_url) == HEAD
    assert diff(store_url) == []


def test_the_tables_match_the_migrations(store_url: str) -> None:
    MIGRATIONS.upgrade(store_url)
    assert diff(store_url) == []


def test_table_comparison_detects_drift(store_url: str) -> None:
    """The comparison above is not vacuous: a missing index is reported."""
    MIGRATIONS.upgrade(store_url)
    run(store_url, lambda conn: conn.execute(text("DROP INDEX ix_outbox_due")))
    assert any(
        op[0] == "add_index" and op[1].name == "ix_outbox_due"
        for op in diff(store_url)
        if isinstance(op, tuple)
    )


def test_the_migrations_make_exactly_what_create_all_made(store_url: str) -> None:
    MIGRATIONS.upgrade(store_url)
    migrated = structure(store_url)
    MIGRATIONS.downgrade(store_url)
    run(store_url, lambda conn: conn.execute(text("DROP TABLE alembic_version")))
    run(store_url, lambda conn: metadata.create_all(conn))
    assert structure(store_url) == migrated
    assert set(migrated) == TABLES


@pytest.mark.parametrize("revision", sorted(PRE_MIGRATION_SHAPES))
def test_each_adoptable_shape_is_what_its_revision_makes(store_url: str, revision: str) -> None:
    MIGRATIONS.upgrade(store_url, revision)
    assert run(store_url, shape_of) == PRE_MIGRATION_SHAPES[revision]


def test_the_task_parameters_revision_keeps_open_episodes_on_upgrade_and_downgrade(
    store_url: str,
) -> None:
    """0003 (R-W-18) adds a nullable column: a registration made at 0002 survives the upgrade
    with no parameters, and one made at 0003 survives the downgrade without its column."""
    MIGRATIONS.upgrade(store_url, "0002")
    row = {
        "contract_digest": CONTRACT,
        "identity_key": "k-1",
        "episode_id": "ep-1",
        "identity": '{"patient_id": "p-1"}',
        "begun_at": T0,
    }
    statement = text(
        "INSERT INTO open_episodes (contract_digest, identity_key, episode_id, identity, "
        "begun_at) VALUES (:contract_digest, :identity_key, :episode_id, :identity, :begun_at)"
    )
    run(store_url, lambda conn: conn.execute(statement, row))
    MIGRATIONS.upgrade(store_url)
    assert "task_parameters" in open_episode_columns(store_url)
    read = text("SELECT episode_id, task_parameters FROM open_episodes ORDER BY episode_id")
    assert [tuple(r) for r in run(store_url, lambda conn: conn.execute(read).all())] == [
        ("ep-1", None)
    ]
    run(
        store_url,
        lambda conn: conn.execute(
            text(
                "INSERT INTO open_episodes (contract_digest, identity_key, episode_id, "
                "identity, begun_at, task_parameters) VALUES (:c, 'k-2', 'ep-2', :i, :t, :p)"
            ),
            {"c": CONTRACT, "i": '{"patient_id": "p-2"}', "t": T0, "p": '{"qty": 3}'},
        ),
    )
    MIGRATIONS.downgrade(store_url, "0002")
    assert "task_parameters" not in open_episode_columns(store_url)
    ids = text("SELECT episode_id FROM open_episodes ORDER BY episode_id")
    assert [r[0] for r in run(store_url, lambda conn: conn.execute(ids).all())] == [
        "ep-1",
        "ep-2",
    ]
    MIGRATIONS.upgrade(store_url)
    assert diff(store_url) == []


@pytest.mark.parametrize(
    ("url", "dialect_words"),
    [
        ("sqlite:///offline.db", "CREATE TABLE dead_letter"),
        ("postgresql://u@localhost/worker", "TIMESTAMP WITH TIME ZONE"),
    ],
)
def test_offline_migration_renders_sql(url: str, dialect_words: str) -> None:
    buffer = io.StringIO()
    config = MIGRATIONS.config(url=url)
    config.output_buffer = buffer
    command.upgrade(config, "head", sql=True)
    command.downgrade(config, "head:base", sql=True)
    rendered = buffer.getvalue()
    assert dialect_words in rendered
    assert "CREATE INDEX ix_dead_letter_refused" in rendered
    assert "DROP TABLE receipts" in rendered


# ---------------------------------------------------------------------- adopting a store


def test_migrate_adopts_a_store_create_all_made(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create_all(store_url)
    assert MIGRATIONS.current(store_url) is None
    assert worker_main(["migrate", "--db-url", store_url]) == 0
    assert capsys.readouterr().out == f"worker store at revision {HEAD}\n"
    assert MIGRATIONS.current(store_url) == HEAD
    assert diff(store_url) == []
    store = WorkerStore(store_url, migrate=False)  # as serve opens it
    try:
        assert count_receipts(store) == 1
        assert [item.receipt_id for item in store.outbox_due(10, T0)] == ["r-0"]
    finally:
        store.close()


def test_a_store_made_before_the_dead_letter_is_stamped_0001_then_upgraded(store_url: str) -> None:
    create_all(store_url, leave_out=frozenset({"dead_letter"}))
    MIGRATIONS.upgrade(store_url, "0001")  # recognised and stamped: nothing else to do
    assert MIGRATIONS.current(store_url) == "0001"
    assert "dead_letter" not in tables(store_url)
    MIGRATIONS.upgrade(store_url)
    assert MIGRATIONS.current(store_url) == HEAD
    assert tables(store_url) == TABLES
    assert diff(store_url) == []


def test_a_schema_no_worker_made_is_refused_and_left_alone(store_url: str) -> None:
    def partial(conn: Any) -> None:
        table: Table = metadata.tables["receipts"]
        table.create(conn)

    run(store_url, partial)
    with pytest.raises(Unavailable, match="rewardseal-worker migrate adopts only") as caught:
        MIGRATIONS.upgrade(store_url)
    assert "(receipts)" in caught.value.message
    assert MIGRATIONS.current(store_url) is None
    assert tables(store_url) == {"receipts"}


# ---------------------------------------------------------------------- the start-up rule


def test_a_fresh_database_is_created_at_head_by_processes_starting_together(
    store_url: str,
) -> None:
    def start() -> None:
        WorkerStore(store_url, migrate=False).close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(start) for _ in range(4)]:
            future.result()
    assert MIGRATIONS.current(store_url) == HEAD
    assert diff(store_url) == []


def older(url: str) -> None:
    MIGRATIONS.upgrade(url, "0001")


def newer(url: str) -> None:
    MIGRATIONS.upgrade(url)
    set_revision(url, "0099")


def unversioned(url: str) -> None:
    create_all(url)


REFUSALS: dict[str, tuple[Callable[[str], None], str]] = {
    "older": (
        older,
        "worker store schema is at revision '0001', this build needs '0003': run the "
        "migrations (rewardseal-worker migrate)",
    ),
    "newer": (
        newer,
        "worker store schema is at revision '0099', newer than this build's '0003': run the "
        "build that migrated it (rewardseal-worker migrate of this build cannot take it back)",
    ),
    "unversioned": (
        unversioned,
        "worker store schema has no revision, this build needs '0003': run the migrations "
        "(rewardseal-worker migrate)",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_the_store_refuses_a_schema_not_at_head_unless_migrating(store_url: str, case: str) -> None:
    make, line = REFUSALS[case]
    make(store_url)
    with pytest.raises(Unavailable) as caught:
        WorkerStore(store_url, migrate=False)
    assert caught.value.message == line
    if case == "newer":  # nor can this build's migrate move it
        with pytest.raises(Unavailable) as caught:
            MIGRATIONS.upgrade(store_url)
        assert caught.value.message == line
        return
    MIGRATIONS.upgrade(store_url)
    WorkerStore(store_url, migrate=False).close()


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_serve_refuses_a_schema_not_at_head_in_one_line(
    capfd: pytest.CaptureFixture[str],
    seeded_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    processes: int,
) -> None:
    for name in ("REWARDSEAL_WORKER_DB_URL", "REWARDSEAL_WORKER_PROCESSES"):
        monkeypatch.delenv(name, raising=False)
    data_dir = tmp_path / "worker"
    shutil.copytree(seeded_template, data_dir)
    (data_dir / DB_FILE).unlink(missing_ok=True)
    make, line = REFUSALS[case]
    make(f"sqlite:///{data_dir / DB_FILE}")
    argv = ["serve", "--data-dir", str(data_dir), "--port", "0", "--processes", str(processes)]
    code = worker_main(argv)
    err = capfd.readouterr().err
    lines = [entry for entry in err.splitlines() if entry.strip()]
    assert code == EXIT_RUNTIME, err
    assert lines == [f"rewardseal-worker: {line}"]


def test_migrate_to_a_revision_this_build_lacks_is_a_usage_error(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert worker_main(["migrate", "--db-url", store_url, "--revision", "0099"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "rewardseal-worker: cannot migrate the worker store: Can't locate revision identified "
        "by '0099'"
    ]
    assert MIGRATIONS.current(store_url) is None
