"""The SQL oracle over a PostgreSQL system of record (``url_env``), on a real server.

The reader runs its statements, compiled once for the dialect, on the driver cursor: single and
batched reads must give what the rows say (typed columns as JSON scalars, only the identity's
rows, the id column as ``"id"``), the identity stays a bound parameter, the database refuses
writes, and a driver error or the server's statement timeout is OracleUnavailable naming the
table only, never the URL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from support.postgres import PostgresServer

from rewardseal_worker.oracles.base import OracleUnavailable
from rewardseal_worker.oracles.sql import SqlReader

ENV = "REWARDSEAL_TEST_SOR_URL"


def recipe(table: str = "encounters", timeout: float = 2.0) -> dict[str, object]:
    return {
        "kind": "sql",
        "database": {"url_env": ENV},
        "table": table,
        "id_column": "id",
        "identity_fields": {"patient_id": "patient_id"},
        "timeout_seconds": timeout,
    }


@pytest.fixture(scope="module")
def sor(postgres_server: PostgresServer) -> Iterator[str]:
    """A database with an ``encounters`` table of typed columns; its SQLAlchemy URL."""
    name = postgres_server.fresh_database()
    url = postgres_server.url(name)
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as db:
        db.execute(
            "CREATE TABLE encounters (id integer PRIMARY KEY, patient_id text NOT NULL,"
            " type text, priority integer, score numeric, seen_at timestamptz)"
        )
        db.execute("CREATE INDEX encounters_patient ON encounters (patient_id)")
        db.execute(
            "CREATE VIEW slow_encounters AS"
            " SELECT e.*, (SELECT 1 FROM pg_sleep(0.5)) AS nap FROM encounters e"
        )
        db.execute(
            "INSERT INTO encounters VALUES"
            " (1, 'p-001', 'Intake', 2, 1.50, '2026-01-02T03:04:05Z'),"
            " (2, 'p-002', 'Triage', NULL, 3, NULL),"
            " (3, 'p-001', 'Triage', 1, NULL, NULL)"
        )
    yield url
    postgres_server.discard_database(name)


@pytest.fixture(scope="module")
def reader(sor: str) -> Iterator[SqlReader]:
    made = SqlReader.from_recipe(recipe(), Path("."), environ={ENV: sor})
    yield made
    made.close()


FIRST = {
    "id": "1",
    "patient_id": "p-001",
    "type": "Intake",
    "priority": 2,
    "score": 1.5,
    "seen_at": "2026-01-02T03:04:05+00:00",
}
THIRD = {"id": "3", "patient_id": "p-001", "type": "Triage", "priority": 1, "score": None}


def test_single_and_batched_reads_give_each_identity_its_typed_rows(reader: SqlReader) -> None:
    assert reader.read({"patient_id": "p-001"}) == [FIRST, {**THIRD, "seen_at": None}]
    assert reader.read({"patient_id": "nobody"}) == []
    many = reader.read_many(
        [{"patient_id": "p-002"}, {"patient_id": "nobody"}, {"patient_id": "p-001"}]
    )
    assert many == [
        [
            {
                "id": "2",
                "patient_id": "p-002",
                "type": "Triage",
                "priority": None,
                "score": 3,
                "seen_at": None,
            }
        ],
        [],
        [FIRST, {**THIRD, "seen_at": None}],
    ]


def test_the_identity_is_bound_and_the_database_refuses_writes(reader: SqlReader, sor: str) -> None:
    seen: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        seen.append((statement, parameters))

    sa.event.listen(reader.engine, "before_cursor_execute", capture)
    try:
        hostile = "p-001' OR '1'='1"
        assert reader.read({"patient_id": hostile}) == []
    finally:
        sa.event.remove(reader.engine, "before_cursor_execute", capture)
    ((statement, parameters),) = seen
    assert "p-001" not in statement
    assert hostile in dict(parameters).values()  # type: ignore[call-overload]
    with pytest.raises(sa.exc.DBAPIError, match="read-only"), reader.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM encounters"))


def test_driver_errors_and_timeouts_are_unavailable_without_the_url(sor: str) -> None:
    missing = SqlReader.from_recipe(recipe(table="no_such_table"), Path("."), environ={ENV: sor})
    try:
        for result in (
            missing.read_many([{"patient_id": "p-001"}, {"patient_id": "p-002"}]),
            missing.read_many([{"patient_id": "p-001"}]),
        ):
            assert all(isinstance(r, OracleUnavailable) for r in result)
            assert all("no_such_table" in str(r) and "127.0.0.1" not in str(r) for r in result)
        # The failed statement's connection went back to the pool cleanly: the next read works.
        good = SqlReader(
            missing.engine,
            table="encounters",
            id_column="id",
            identity_fields={"patient_id": "patient_id"},
            timeout_seconds=2.0,
            sqlite=False,
        )
        assert [r["id"] for r in good.read({"patient_id": "p-001"})] == ["1", "3"]
    finally:
        missing.close()
    slow = SqlReader.from_recipe(
        recipe(table="slow_encounters", timeout=0.1), Path("."), environ={ENV: sor}
    )
    try:
        # The server's statement_timeout cancels the read, single and batched alike.
        with pytest.raises(OracleUnavailable, match=r"read timed out after 0\.1s"):
            slow.read({"patient_id": "p-001"})
        (result,) = slow.read_many([{"patient_id": "p-001"}])
        assert isinstance(result, OracleUnavailable)
    finally:
        slow.close()


def test_a_kept_connection_the_server_dropped_is_replaced_before_a_read(
    postgres_server: PostgresServer, sor: str
) -> None:
    # As the pool's pre-ping did at every checkout: a kept connection is pinged before it reads
    # again, so a server restart or an idle timeout between two reads fails neither.
    fresh = SqlReader.from_recipe(recipe(), Path("."), environ={ENV: sor})
    try:
        assert [r["id"] for r in fresh.read({"patient_id": "p-001"})] == ["1", "3"]
        assert postgres_server.drop_connections(sor.rsplit("/", 1)[1]) >= 1
        assert [r["id"] for r in fresh.read({"patient_id": "p-001"})] == ["1", "3"]
    finally:
        fresh.close()
