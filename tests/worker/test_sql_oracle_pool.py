"""The SQLite oracle's pooled connections (R-W-6): kept between reads, never read through once the
system of record's file was replaced, moved or deleted."""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from rewardseal_mockmed.contract import TIER2_RECIPE
from rewardseal_worker.oracles import OracleUnavailable, make_reader
from rewardseal_worker.oracles.sql import SqlReader

ME = {"patient_id": "p-001"}
OTHER = {"patient_id": "p-002"}


def create_db(path: Path, note: str) -> Path:
    """A MockMed-shaped SoR with one row for p-001 whose note is ``note``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE encounters (id TEXT PRIMARY KEY, patient_id TEXT NOT NULL, "
            "type TEXT, note TEXT, status TEXT, priority TEXT)"
        )
        conn.execute(
            "INSERT INTO encounters VALUES ('enc-1', 'p-001', 'Triage', ?, 'open', NULL)", (note,)
        )
    return path


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return create_db(tmp_path / "mockmed" / "mockmed.sqlite", "first")


@pytest.fixture
def reader(tmp_path: Path, database: Path):
    bundle = tmp_path / "contracts" / "mockmed"
    bundle.mkdir(parents=True)
    made = make_reader(TIER2_RECIPE, bundle)
    assert isinstance(made, SqlReader)
    yield made
    made.close()


def count_connects(reader: SqlReader) -> list[int]:
    opened: list[int] = []
    sa.event.listen(reader.engine, "connect", lambda *_: opened.append(1))
    return opened


def notes(reader: SqlReader) -> list[str]:
    return [record["note"] for record in reader.read(ME)]


def test_connections_are_kept_between_reads(reader):
    opened = count_connects(reader)
    for _ in range(5):
        assert notes(reader) == ["first"]
        assert [len(r) for r in reader.read_many([ME, OTHER])] == [1, 0]
    assert len(opened) == 1
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda _: notes(reader), range(16))) == [["first"]] * 16
    assert len(opened) <= 4


def test_every_read_sees_the_latest_commit(reader, database):
    assert notes(reader) == ["first"]
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE encounters SET note = 'updated'")
    assert notes(reader) == ["updated"]


def test_a_replaced_file_is_read_anew(reader, database, tmp_path):
    assert notes(reader) == ["first"]
    opened = count_connects(reader)
    os.replace(create_db(tmp_path / "swap.sqlite", "second"), database)
    assert notes(reader) == ["second"]
    assert [[r["note"] for r in found] for found in reader.read_many([ME, OTHER])] == [
        ["second"],
        [],
    ]
    assert len(opened) == 1  # the stale connection was dropped, the new one is kept


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_a_file_gone_is_unavailable_not_read_through_a_kept_handle(reader, database, how):
    assert notes(reader) == ["first"]
    moved = database.with_name("elsewhere.sqlite")
    if how == "moved":
        database.rename(moved)
    else:
        database.unlink()
    with pytest.raises(OracleUnavailable, match="could not be opened"):
        reader.read(ME)
    for result in reader.read_many([ME, OTHER]):
        assert isinstance(result, OracleUnavailable)
        assert "could not be opened" in str(result)
    if how == "moved":
        moved.rename(database)
        assert notes(reader) == ["first"]


def test_the_pooled_connection_stays_read_only(reader):
    notes(reader)
    with (
        pytest.raises(sa.exc.OperationalError, match="readonly"),
        reader.engine.begin() as conn,
    ):
        conn.execute(sa.text("DELETE FROM encounters"))
    assert notes(reader) == ["first"]


def test_a_timed_out_read_leaves_the_kept_connection_reading(tmp_path):
    # SQLite's read deadline is a progress handler on the connection, and the connection is kept
    # between reads: each read must run under its own deadline (the reader's timeout as it is
    # then), never under one a timed-out read left behind.
    path = tmp_path / "contracts" / "big" / "big.sqlite"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE encounters (id TEXT PRIMARY KEY, patient_id TEXT, note TEXT)")
        conn.executemany(
            "INSERT INTO encounters VALUES (?, ?, 'n')",
            ((f"e{i}", f"p-{i}") for i in range(3_000)),
        )
    recipe = {
        "kind": "sql",
        "database": {"sqlite_path": "big.sqlite"},
        "table": "encounters",
        # Unindexed: the read is a full scan, thousands of VM steps past a 1 µs deadline.
        "identity_fields": {"patient_id": "note"},
        "timeout_seconds": 1e-6,
    }
    reader = make_reader(recipe, path.parent)
    try:
        with pytest.raises(OracleUnavailable, match="timed out"):
            reader.read({"patient_id": "missing"})
        (failed,) = reader.read_many([{"patient_id": "missing"}])
        assert isinstance(failed, OracleUnavailable)
        assert "timed out" in str(failed)
        opened = count_connects(reader)
        reader.timeout_seconds = 30.0
        assert reader.read({"patient_id": "missing"}) == []
        assert reader.read_many([{"patient_id": "n"}, {"patient_id": "x"}])[1] == []
        assert opened == []  # the same kept connection read, with the new deadline only
    finally:
        reader.close()


def test_close_hands_back_the_kept_connections(reader):
    notes(reader)
    pool = reader.engine.pool
    assert pool.checkedout() == 1
    reader.close()
    assert pool.checkedout() == 0
