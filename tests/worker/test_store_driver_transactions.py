"""The hot path's transactions on the pooled driver connection (``StoreEngine.write_on_driver``
and ``read_on_driver``), on SQLite and PostgreSQL: the rules of ``StoreEngine.write`` hold
without SQLAlchemy's Connection: the write lock is taken up front, a failure rolls everything
back, a lost race runs the work again, a read leaves the connection as a write needs it, and a
driver error leaves as the store's error, parameters hidden (issue 12)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from support.postgres import PostgresServer

from rewardseal.core.errors import RewardSealError, Unavailable
from rewardseal_server.sqlstore import DriverConnection, LostRace, StoreEngine

SECRET = "P-secret-value"


@contextmanager
def items_store(url: str) -> Iterator[StoreEngine]:
    """A store over ``url`` whose database has the ``items`` table; disposed at the end."""
    engine = StoreEngine(url, what="test store")
    try:
        with engine.engine.begin() as conn:
            conn.execute(text("CREATE TABLE items (name TEXT PRIMARY KEY)"))
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def db(store_url: str) -> Iterator[StoreEngine]:
    with items_store(store_url) as engine:
        yield engine


def insert(conn: DriverConnection, name: str) -> None:
    placeholder = "?" if conn.dialect.name == "sqlite" else "%s"
    conn.run(f"INSERT INTO items (name) VALUES ({placeholder})", (name,))


def names(db: StoreEngine) -> list[str]:
    def work(conn: DriverConnection) -> list[str]:
        return [row[0] for row in conn.fetch("SELECT name FROM items ORDER BY name", ())]

    return db.read_on_driver(work)


def test_a_write_is_committed_before_it_returns(db: StoreEngine) -> None:
    assert db.write_on_driver(lambda conn: insert(conn, "a")) is None
    # Another connection (SQLAlchemy's own) sees it: committed, not merely in our session.
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM items")).scalars().all() == ["a"]


def test_a_failing_write_keeps_nothing_and_the_connection_stays_usable(db: StoreEngine) -> None:
    def work(conn: DriverConnection) -> None:
        insert(conn, "half")
        raise RuntimeError("injected after the insert")

    with pytest.raises(RuntimeError, match="injected"):
        db.write_on_driver(work)
    assert names(db) == []
    db.write_on_driver(lambda conn: insert(conn, "next"))
    assert names(db) == ["next"]


def test_a_read_leaves_the_connection_transactional_for_the_next_write(db: StoreEngine) -> None:
    # PostgreSQL reads run in autocommit; a pooled connection left so would commit a failed
    # write's first statement. One connection in play: the read's is the write's.
    assert names(db) == []

    def work(conn: DriverConnection) -> None:
        insert(conn, "half")
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError):
        db.write_on_driver(work)
    assert names(db) == []


def test_a_lost_race_runs_the_work_again_from_a_clean_transaction(db: StoreEngine) -> None:
    runs: list[int] = []

    def work(conn: DriverConnection) -> int:
        insert(conn, f"run-{len(runs)}")
        runs.append(1)
        if len(runs) < 3:
            raise LostRace("another writer won")
        return len(runs)

    assert db.write_on_driver(work) == 3
    assert names(db) == ["run-2"]  # the lost runs' rows were rolled back


def test_a_driver_error_is_the_store_error_and_names_no_parameter(db: StoreEngine) -> None:
    db.write_on_driver(lambda conn: insert(conn, SECRET))
    with pytest.raises(RewardSealError) as caught:
        db.write_on_driver(lambda conn: insert(conn, SECRET))  # the primary key is taken
    assert "test store error" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert names(db) == [SECRET]


def test_sqlite_takes_the_write_lock_before_the_work_runs(tmp_path: Any) -> None:
    path = tmp_path / "locked.db"
    with items_store(f"sqlite:///{path}") as db:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        seen: list[str] = []

        def work(conn: DriverConnection) -> None:
            # Nothing written yet, and still no other writer may begin: BEGIN IMMEDIATE.
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
            seen.append("locked")

        db.write_on_driver(work)
        assert seen == ["locked"]
        other.execute("BEGIN IMMEDIATE")  # released at the commit
        other.execute("ROLLBACK")
        other.close()


def test_an_unreachable_sqlite_file_is_unavailable(tmp_path: Any) -> None:
    db = StoreEngine(f"sqlite:///{tmp_path / 'gone' / 'store.db'}", what="test store")
    try:
        with pytest.raises(Unavailable, match="test store unavailable"):
            db.write_on_driver(lambda conn: None)
        with pytest.raises(Unavailable, match="test store unavailable"):
            db.read_on_driver(lambda conn: None)
    finally:
        db.dispose()


@pytest.mark.parametrize("kind", ["read", "write"])
def test_a_lost_postgresql_connection_is_unavailable_and_not_reused(
    postgres_server: PostgresServer, kind: str
) -> None:
    # A server-side disconnect is PostgreSQL's.
    name = postgres_server.fresh_database()
    try:
        with items_store(postgres_server.url(name)) as db:

            def work(conn: DriverConnection) -> None:
                conn.fetch("SELECT pg_terminate_backend(pg_backend_pid())", ())

            run = db.read_on_driver if kind == "read" else db.write_on_driver
            with pytest.raises(Unavailable, match="test store unavailable"):
                run(work)
            # The dead connection is not handed out again: the next transactions work.
            db.write_on_driver(lambda conn: insert(conn, "after"))
            assert names(db) == ["after"]
    finally:
        postgres_server.discard_database(name)


def test_stores_opening_one_new_sqlite_file_together_all_open_it(tmp_path: Any) -> None:
    """Replicas (or migrations) opening one new SQLite file at the same moment: the switch to
    WAL needs the file alone, and SQLite can refuse it at once ("database is locked") without
    waiting; each store retries within its busy timeout. Without the retry about one round in
    ten loses an opener here."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    openers = 6
    for index in range(100):
        url = f"sqlite:///{tmp_path / f'fresh-{index}.sqlite'}"
        together = Barrier(openers)

        def open_store(url: str = url, together: Barrier = together) -> str:
            together.wait()
            engine = StoreEngine(url, what="test store")
            try:
                with engine.engine.connect() as conn:
                    return str(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
            finally:
                engine.dispose()

        with ThreadPoolExecutor(openers) as pool:
            modes = [
                future.result() for future in [pool.submit(open_store) for _ in range(openers)]
            ]
        assert modes == ["wal"] * openers


def test_hot_path_connections_are_kept_between_transactions(db: StoreEngine) -> None:
    # The hot path takes a kept driver connection, not a pool checkout per transaction (the
    # checkout and checkin were most of the CPU a small batch cost).
    checkouts: list[int] = []
    event.listen(db.engine, "checkout", lambda *_: checkouts.append(1))
    for index in range(10):
        db.write_on_driver(lambda conn, index=index: insert(conn, f"item-{index:02d}"))
        assert len(names(db)) == index + 1
    assert len(checkouts) <= 1
    # Handed back at dispose: nothing stays checked out of the pool.
    pool: Any = db.engine.pool
    assert pool.checkedout() == 1
    db.dispose()
    assert pool.checkedout() == 0


def test_a_kept_postgresql_connection_that_died_is_replaced_before_use(
    postgres_server: PostgresServer,
) -> None:
    # The pool's pre-ping, for kept connections: a connection the server dropped between two
    # transactions (a restart, an idle timeout) is pinged, found dead and replaced; the
    # transaction itself never fails for it.
    name = postgres_server.fresh_database()
    try:
        with items_store(postgres_server.url(name)) as db:
            db.write_on_driver(lambda conn: insert(conn, "before"))
            assert postgres_server.drop_connections(name) >= 1
            db.write_on_driver(lambda conn: insert(conn, "after"))
            assert names(db) == ["after", "before"]
    finally:
        postgres_server.discard_database(name)
