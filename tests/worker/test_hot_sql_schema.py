"""The hot path's driver SQL cannot drift from the worker store's tables (issue 25, item 4).

:mod:`rewardseal_worker.store.hot_sql` keeps its statements as fixed text per backend. Every one
of them is prepared (``EXPLAIN``, which resolves every table and column without running it)
against a store made by the migrations, on SQLite and PostgreSQL; the inserts and COPYs that
write whole rows name every column of their table, in the table's order (COPY's binary rows and
the positional binds depend on that order).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from rewardseal.core.errors import RewardSealError
from rewardseal_server.driver_connections import DriverConnection
from rewardseal_server.sqlstore import StoreEngine
from rewardseal_worker.store import WorkerStore
from rewardseal_worker.store.hot_sql import _OPEN_TYPES, _RECEIPT_TYPES, HotSql
from rewardseal_worker.store.schema import metadata, open_episodes, receipts

WHOLE_ROWS = re.compile(r"^(?:INSERT INTO|COPY) (\w+) \(([^)]*)\)")
SQLITE_PARAM = re.compile(r"\?(\d+)")
PG_PARAM = re.compile(r"%\((\w+)\)s")


def null_params(backend: str, statement: str) -> Any:
    """Every parameter of ``statement`` bound to NULL (EXPLAIN resolves names, not values)."""
    if backend == "sqlite":
        numbers = [int(n) for n in SQLITE_PARAM.findall(statement)]
        return (None,) * max(numbers, default=0)
    return dict.fromkeys(PG_PARAM.findall(statement))


def explain(store: StoreEngine, statement: str) -> None:
    def work(conn: DriverConnection) -> None:
        conn.fetch(f"EXPLAIN {statement}", null_params(store.backend, statement))

    store.read_on_driver(work)


@pytest.fixture
def store(store_url: str) -> Iterator[StoreEngine]:
    WorkerStore(store_url).close()  # migrated to the newest revision
    engine = StoreEngine(store_url, what="worker store")
    yield engine
    engine.dispose()


def test_every_hot_statement_resolves_against_the_migrated_schema(store: StoreEngine) -> None:
    statements = HotSql(store.backend).statements()
    assert len(statements) >= 15
    for name, statement in statements.items():
        if statement.startswith("COPY"):  # not preparable; its columns are checked below
            continue
        try:
            explain(store, statement)
        except RewardSealError as exc:  # the statement that drifted, and the driver's why
            pytest.fail(f"{name}: {exc.__cause__ or exc}")


def test_the_check_is_not_vacuous(store: StoreEngine) -> None:
    """A statement naming a column the table lacks fails to prepare."""
    statement = HotSql(store.backend).statements()["_owners"].replace("episode_id", "episode")
    with pytest.raises(RewardSealError) as caught:
        explain(store, statement)
    assert "episode" in str(caught.value.__cause__)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_whole_row_writes_name_every_column_in_table_order(backend: str) -> None:
    checked = set()
    for name, statement in HotSql(backend).statements().items():
        found = WHOLE_ROWS.match(statement)
        if found is None:
            continue
        table, columns = found[1], [c.strip() for c in found[2].split(",")]
        assert columns == list(metadata.tables[table].columns.keys()), name
        checked.add(table)
    assert checked >= {"receipts", "open_episodes", "outbox", "credited_records", "policy_ledger"}


def test_copy_row_types_match_the_columns() -> None:
    assert len(_RECEIPT_TYPES) == len(receipts.columns)
    assert len(_OPEN_TYPES) == len(open_episodes.columns)
