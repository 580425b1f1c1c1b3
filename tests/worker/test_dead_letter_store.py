"""The dead letter of the worker store on SQLite and PostgreSQL (R-C-12): a permanently refused
receipt moves out of the outbox in one transaction, is listed, counted and retried back into
its place; nothing is deleted; a store made before the table existed gains it on start."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, event, insert, inspect, text
from support.worker_store import count_receipts, outbox_size

from rewardseal.core.errors import NotFound
from rewardseal_worker.store import (
    DEAD_LETTER_MESSAGE_MAX,
    OutboxItem,
    ReceiptToCommit,
    Refused,
    WorkerStore,
)
from rewardseal_worker.store.migrating import MIGRATIONS
from rewardseal_worker.store.schema import outbox, receipts

CONTRACT = "sha256:" + "c" * 64
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def receipt(n: int) -> ReceiptToCommit:
    return ReceiptToCommit(
        receipt_id=f"r-{n}",
        episode_id=f"ep-{n}",
        contract_digest=CONTRACT,
        policy_update=1,
        identity_key=None,
        envelope=f"envelope-{n}".encode(),
        evidence=b"{}",
    )


def duplicate(n: int, message: str = "episode already has a receipt") -> Refused:
    return Refused(f"r-{n}", 6, "duplicate_episode", message)


@pytest.fixture
def open_store(store_url: str) -> Iterator[Callable[..., WorkerStore]]:
    stores: list[WorkerStore] = []

    def make(**options: Any) -> WorkerStore:
        store = WorkerStore(store_url, **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def due(store: WorkerStore, now: datetime) -> list[str]:
    return [item.receipt_id for item in store.outbox_due(100, now)]


def test_a_refused_receipt_moves_to_the_dead_letter_and_back(
    open_store: Callable[..., WorkerStore],
) -> None:
    store = open_store(outbox=True)
    store.commit_receipts([receipt(n) for n in range(4)])
    now = datetime.now(UTC)
    store.outbox_later(["r-1"], error="control: unavailable", now=now, delay_seconds=0)
    moved = store.dead_letter_refused(
        [duplicate(1, "x" * 2000), Refused("r-2", 5, "not_found", "contract unknown")], now=T0
    )
    assert [(m.receipt_id, m.episode_id, m.reason, m.attempts) for m in moved] == [
        ("r-1", "ep-1", "duplicate_episode", 2),
        ("r-2", "ep-2", "not_found", 1),
    ]
    assert moved[0].message == "x" * DEAD_LETTER_MESSAGE_MAX
    assert moved[1].refused_at == T0
    assert moved[1].code == 5
    assert moved[1].contract_digest == CONTRACT
    assert due(store, now) == ["r-0", "r-3"], "no longer forwarded"
    assert store.dead_letter_entries() == moved
    assert store.dead_letter_entries(limit=1) == moved[:1]
    assert store.dead_letter_counts() == {"duplicate_episode": 1, "not_found": 1}
    assert count_receipts(store) == 4, "nothing is deleted"

    # Refused again by a second forwarder, or never in the outbox: nothing moves twice.
    assert store.dead_letter_refused([duplicate(1), Refused("r-9", 6, "x", "y")], now=T0) == []
    assert store.dead_letter_refused([], now=T0) == []

    # An unknown id refuses the whole retry: nothing moves.
    with pytest.raises(NotFound, match="not in the dead letter: 'r-0'"):
        store.dead_letter_retry(["r-1", "r-0"], now=now)
    assert store.dead_letter_counts() == {"duplicate_episode": 1, "not_found": 1}
    assert store.dead_letter_retry([], now=now) == []

    later = now + timedelta(hours=1)
    assert store.dead_letter_retry(["r-2"], now=later) == ["r-2"]
    # Back in its old place (commit order), due at the retry, with its envelope and attempts.
    assert due(store, now) == ["r-0", "r-3"]
    assert store.outbox_due(100, later) == [
        OutboxItem("r-0", b"envelope-0", 0),
        OutboxItem("r-2", b"envelope-2", 1),
        OutboxItem("r-3", b"envelope-3", 0),
    ]
    assert store.dead_letter_retry(None, now=later) == ["r-1"]
    assert store.dead_letter_counts() == {}
    assert store.dead_letter_entries() == []
    assert due(store, later) == ["r-0", "r-1", "r-2", "r-3"]
    assert store.dead_letter_retry(None, now=later) == []


def test_the_move_is_one_transaction(open_store: Callable[..., WorkerStore]) -> None:
    store = open_store(outbox=True)
    store.commit_receipts([receipt(0)])

    def fail_on_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO dead_letter"):
            raise RuntimeError("injected failure")

    event.listen(store.engine, "before_cursor_execute", fail_on_insert)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            store.dead_letter_refused([duplicate(0)], now=T0)
    finally:
        event.remove(store.engine, "before_cursor_execute", fail_on_insert)
    # The outbox delete rolled back with the failed insert: the receipt is still forwarded.
    assert outbox_size(store) == 1
    assert store.dead_letter_counts() == {}


def test_two_forwarders_refusing_one_receipt_move_it_once(
    open_store: Callable[..., WorkerStore],
) -> None:
    open_store(outbox=True).commit_receipts([receipt(n) for n in range(20)])
    forwarders = 4
    barrier = threading.Barrier(forwarders)

    def refuse(_: int) -> list[str]:
        own = open_store(outbox=True)
        barrier.wait()
        return [
            m.receipt_id for m in own.dead_letter_refused([duplicate(n) for n in range(20)], now=T0)
        ]

    with ThreadPoolExecutor(forwarders) as pool:
        moved = [rid for batch in pool.map(refuse, range(forwarders)) for rid in batch]
    assert sorted(moved) == sorted(f"r-{n}" for n in range(20))
    store = open_store()
    assert store.dead_letter_counts() == {"duplicate_episode": 20}
    assert outbox_size(store) == 0


def test_a_store_made_before_the_dead_letter_gains_it_on_start(store_url: str) -> None:
    # A store as an older worker left it (its create_all made the schema of revision 0001:
    # every table but the dead letter, and no later column), two receipts waiting in the outbox.
    MIGRATIONS.upgrade(store_url, "0001")
    engine = create_engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE alembic_version"))
            for n in (0, 1):
                conn.execute(
                    insert(receipts).values(
                        receipt_id=f"r-{n}",
                        episode_id=f"ep-{n}",
                        contract_digest=CONTRACT,
                        policy_update=1,
                        envelope=f"envelope-{n}".encode(),
                        evidence=b"{}",
                        created_at=T0,
                    )
                )
                conn.execute(
                    insert(outbox).values(
                        receipt_id=f"r-{n}",
                        envelope=f"envelope-{n}".encode(),
                        created_at=T0,
                        batch_index=n,
                        attempts=3,
                        next_attempt_at=T0,
                        last_error="control refused: duplicate_episode",
                    )
                )
        assert "dead_letter" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    # Started over the old store: the table appears, and what waited is intact.
    store = WorkerStore(store_url, outbox=True)
    try:
        assert "dead_letter" in inspect(store.engine).get_table_names()
        assert store.dead_letter_counts() == {}
        assert due(store, T0) == ["r-0", "r-1"]
        [moved] = store.dead_letter_refused([duplicate(0)], now=T0)
        assert (moved.receipt_id, moved.attempts) == ("r-0", 4)
        assert due(store, T0) == ["r-1"]
        assert count_receipts(store) == 2
    finally:
        store.close()
