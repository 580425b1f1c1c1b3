"""WorkerStore on SQLite and PostgreSQL (R-W-3 one open episode and one credit per record, R-W-7
policy ledger, R-W-8 durable, exactly one receipt per episode)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, event, inspect, select
from support.worker_store import (
    begin_episode,
    count_receipts,
    credited_record_ids,
    open_episode,
    outbox_oldest,
    outbox_size,
)

from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    PolicyUpdateRegressed,
    RewardSealError,
    Unavailable,
    ValidationError,
)
from rewardseal_worker.identity import Identity
from rewardseal_worker.store import (
    IN_CHUNK,
    OUTBOX_ERROR_MAX,
    BeginItem,
    CommitResult,
    Committed,
    CreditsTaken,
    Duplicate,
    KeptRegistration,
    OpenEpisode,
    OutboxItem,
    ReceiptToCommit,
    Regressed,
    StoredReceipt,
    WorkerStore,
)
from rewardseal_worker.store.schema import (
    credited_records,
    open_episodes,
    outbox,
    policy_ledger,
    receipts,
)

CONTRACT = "sha256:" + "c" * 64
OTHER_CONTRACT = "sha256:" + "d" * 64
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TTL = 600.0
PATIENT = {"patient_id": "P-001"}
OTHER_PATIENT = {"patient_id": "P-002"}
BASELINE: list[dict[str, Any]] = [{"id": "enc-1", "patient_id": "P-001", "type": "Intake"}]


def key(identity: dict[str, str]) -> str:
    """The canonical identity string the worker uses."""
    return canonical_json(identity).decode()


def item(
    episode_id: str,
    receipt_id: str | None = None,
    *,
    contract: str = CONTRACT,
    policy_update: int = 100,
    identity: dict[str, str] | None = PATIENT,
    credited: tuple[str, ...] = (),
) -> ReceiptToCommit:
    """A receipt to commit; envelope and evidence bytes name the receipt so they can be checked."""
    rid = receipt_id or f"r-{episode_id}"
    return ReceiptToCommit(
        receipt_id=rid,
        episode_id=episode_id,
        contract_digest=contract,
        policy_update=policy_update,
        identity_key=None if identity is None else key(identity),
        envelope=b"envelope:" + rid.encode(),
        evidence=b'{"receipt":"' + rid.encode() + b'"}',
        credited_record_ids=credited,
    )


@pytest.fixture
def open_store(store_url: str) -> Iterator[Callable[..., WorkerStore]]:
    """A factory of WorkerStore instances on the test's database, all closed at teardown.

    Keyword arguments go to WorkerStore (``outbox=True``).
    """
    stores: list[WorkerStore] = []
    lock = threading.Lock()

    def make(**options: Any) -> WorkerStore:
        store = WorkerStore(store_url, **options)
        with lock:
            stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(open_store: Callable[[], WorkerStore]) -> WorkerStore:
    """One store on a fresh database."""
    return open_store()


def begin(
    store: WorkerStore,
    episode_id: str,
    *,
    identity: dict[str, str] = PATIENT,
    at: datetime = T0,
    baseline: list[dict[str, Any]] | None = BASELINE,
    contract: str = CONTRACT,
) -> None:
    begin_episode(
        store,
        contract_digest=contract,
        episode_id=episode_id,
        identity=identity,
        baseline=baseline,
        begun_at=at,
        ttl_seconds=TTL,
    )


# ---------------------------------------------------------------- episodes (R-W-1, R-W-3)


def test_begin_open_close_lifecycle(store: WorkerStore) -> None:
    assert open_episode(store, CONTRACT, "ep-1") is None
    begin(store, "ep-1")
    assert open_episode(store, CONTRACT, "ep-1") == OpenEpisode(
        identity=Identity(PATIENT), baseline=BASELINE, begun_at=T0
    )
    assert open_episode(store, OTHER_CONTRACT, "ep-1") is None

    [result] = store.commit_receipts([item("ep-1", credited=("enc-2",))])
    assert result == Committed(receipt_id="r-ep-1")
    assert result.stored
    assert open_episode(store, CONTRACT, "ep-1") is None, "commit closes the open episode"
    # The identity is free again for the next episode.
    begin(store, "ep-2", at=T0 + timedelta(seconds=1))
    assert open_episode(store, CONTRACT, "ep-2") is not None


def test_begun_at_is_utc_aware_and_baseline_none_kept(store: WorkerStore) -> None:
    local = T0.astimezone(__import__("datetime").timezone(timedelta(hours=5)))
    begin(store, "ep-1", at=local, baseline=None)
    opened = open_episode(store, CONTRACT, "ep-1")
    assert opened is not None
    assert opened.baseline is None
    assert opened.begun_at == T0
    assert opened.begun_at.tzinfo is not None
    assert opened.begun_at.utcoffset() == timedelta(0)


def test_empty_baseline_is_not_none(store: WorkerStore) -> None:
    begin(store, "ep-1", baseline=[])
    opened = open_episode(store, CONTRACT, "ep-1")
    assert opened is not None
    assert opened.baseline == []


def test_second_episode_on_busy_identity_is_refused(store: WorkerStore) -> None:
    begin(store, "ep-1")
    with pytest.raises(IdentityBusy) as info:
        begin(store, "ep-2", at=T0 + timedelta(seconds=TTL - 1))
    assert info.value.reason == "identity_busy"
    assert open_episode(store, CONTRACT, "ep-2") is None
    # Another identity, or the same identity on another contract, is not busy.
    begin(store, "ep-3", identity=OTHER_PATIENT)
    begin(store, "ep-4", contract=OTHER_CONTRACT)


def test_stale_open_episode_is_reclaimed_after_ttl(store: WorkerStore) -> None:
    begin(store, "ep-1")
    begin(store, "ep-2", at=T0 + timedelta(seconds=TTL), baseline=[])
    assert open_episode(store, CONTRACT, "ep-1") is None
    reclaimed = open_episode(store, CONTRACT, "ep-2")
    assert reclaimed is not None
    assert reclaimed.baseline == []


def test_rebegin_same_episode_is_idempotent_and_keeps_baseline(store: WorkerStore) -> None:
    begin(store, "ep-1")
    begin(store, "ep-1", at=T0 + timedelta(seconds=5), baseline=[{"id": "other"}])
    begin(store, "ep-1", at=T0 + timedelta(seconds=TTL * 3), baseline=None)
    assert open_episode(store, CONTRACT, "ep-1") == OpenEpisode(
        identity=Identity(PATIENT), baseline=BASELINE, begun_at=T0
    )


def test_a_rebegin_is_told_what_the_first_registration_holds(store: WorkerStore) -> None:
    # The first begin could not read a baseline; the re-begin could. The episode is judged
    # against the first (none: it will be unscored), so the re-begin must not say "recorded".
    assert store.begin_episodes([begin_item("ep-1", baseline=None)]) == [None]
    later = T0 + timedelta(seconds=30)
    assert store.begin_episodes([begin_item("ep-1", at=later, baseline=BASELINE)]) == [
        KeptRegistration(begun_at=T0, baseline_recorded=False)
    ]
    # And within one batch: the second item meets the first's registration.
    assert store.begin_episodes(
        [
            begin_item("ep-2", identity=OTHER_PATIENT, at=later, baseline=[]),
            begin_item("ep-2", identity=OTHER_PATIENT, at=later, baseline=None),
        ]
    ) == [None, KeptRegistration(begun_at=later, baseline_recorded=True)]


def test_same_episode_on_another_identity_conflicts_until_stale(store: WorkerStore) -> None:
    begin(store, "ep-1")
    with pytest.raises(IdentityConflict):
        begin(store, "ep-1", identity=OTHER_PATIENT, at=T0 + timedelta(seconds=1))
    begin(store, "ep-1", identity=OTHER_PATIENT, at=T0 + timedelta(seconds=TTL))
    moved = open_episode(store, CONTRACT, "ep-1")
    assert moved is not None
    assert moved.identity == OTHER_PATIENT


def test_begin_after_receipt_is_duplicate_with_receipt_id(store: WorkerStore) -> None:
    begin(store, "ep-1")
    store.commit_receipts([item("ep-1", "receipt-abc")])
    with pytest.raises(DuplicateEpisode) as info:
        begin(store, "ep-1", at=T0 + timedelta(seconds=1))
    assert info.value.metadata == {"receipt_id": "receipt-abc"}
    assert info.value.reason == "duplicate_episode"
    assert open_episode(store, CONTRACT, "ep-1") is None


def test_begin_registers_under_the_identitys_canonical_key(store: WorkerStore) -> None:
    """The key an identity is registered (and later credited) under is its canonical JSON,
    whatever order its names came in: the key rows written before Identity existed carry."""
    unsorted = {"site": "S-1", "patient_id": "P-001"}
    assert Identity(unsorted).key == key(unsorted) == '{"patient_id":"P-001","site":"S-1"}'
    begin(store, "ep-1", identity=unsorted)
    assert open_rows(store) == {(CONTRACT, key(unsorted), "ep-1")}
    registered = open_episode(store, CONTRACT, "ep-1")
    assert registered is not None
    assert registered.identity == unsorted
    assert registered.identity.key == key(unsorted)


# ---------------------------------------------------------------- receipts (R-W-8)


def test_receipt_lookup_by_id_and_episode(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "rid-1")])
    expected = StoredReceipt(
        receipt_id="rid-1",
        episode_id="ep-1",
        contract_digest=CONTRACT,
        envelope=b"envelope:rid-1",
        evidence=b'{"receipt":"rid-1"}',
    )
    assert store.receipt_by_id("rid-1") == expected
    assert store.receipt_by_episode("ep-1") == expected
    assert store.receipt_by_id("missing") is None
    assert store.receipt_by_episode("missing") is None
    assert store.commit_receipts([]) == []


def test_duplicates_in_one_batch_store_only_the_first(store: WorkerStore) -> None:
    results = store.commit_receipts(
        [
            item("ep-1", "first", policy_update=100, credited=("enc-a",)),
            item("ep-2", "other"),
            item("ep-1", "second", policy_update=200, credited=("enc-b",)),
        ]
    )
    assert results == [
        Committed(receipt_id="first"),
        Committed(receipt_id="other"),
        Duplicate(receipt_id="second", duplicate_of="first", episode_id="ep-1"),
    ]
    assert not results[2].stored
    assert store.receipt_by_id("second") is None
    assert count_receipts(store) == 2
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == {"enc-a"}
    assert store.highest_policy_update(CONTRACT) == 100, "a duplicate does not move the ledger"


def test_duplicate_across_batches_points_at_the_stored_receipt(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "first")])
    [again] = store.commit_receipts([item("ep-1", "retry", credited=("enc-z",))])
    assert isinstance(again, Duplicate)
    assert again.duplicate_of == "first"
    assert store.receipt_by_id("retry") is None
    assert count_receipts(store) == 1
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == set()


def test_duplicate_wins_over_regression(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "first", policy_update=100)])
    store.commit_receipts([item("ep-2", policy_update=300)])
    [again] = store.commit_receipts([item("ep-1", "retry", policy_update=100)])
    assert again == Duplicate(receipt_id="retry", duplicate_of="first", episode_id="ep-1")


def test_credited_record_is_never_credited_twice(store: WorkerStore) -> None:
    [first] = store.commit_receipts([item("ep-1", credited=("enc-2", "enc-3"))])
    assert first.stored
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == {"enc-2", "enc-3"}
    assert credited_record_ids(store, CONTRACT, key(OTHER_PATIENT)) == set()
    assert credited_record_ids(store, OTHER_CONTRACT, key(PATIENT)) == set()

    [second] = store.commit_receipts([item("ep-2", credited=("enc-3", "enc-4"))])
    assert second == CreditsTaken(receipt_id="r-ep-2", credit_conflicts=("enc-3",))
    assert not second.stored
    assert store.receipt_by_episode("ep-2") is None
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == {"enc-2", "enc-3"}

    # In one batch: the second claim on the same record is refused too.
    results = store.commit_receipts(
        [item("ep-3", credited=("enc-5",)), item("ep-4", credited=("enc-5",))]
    )
    assert results[0].stored
    assert results[1] == CreditsTaken(receipt_id="r-ep-4", credit_conflicts=("enc-5",))
    # The same record id under another contract is another record.
    [other] = store.commit_receipts([item("ep-5", contract=OTHER_CONTRACT, credited=("enc-3",))])
    assert other.stored


def test_credits_without_identity_are_excluded_for_every_identity(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", identity=None, credited=("enc-9",))])
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == {"enc-9"}
    assert credited_record_ids(store, CONTRACT, key(OTHER_PATIENT)) == {"enc-9"}


# ---------------------------------------------------------------- policy ledger (R-W-7)


def test_policy_update_regression_stores_nothing(store: WorkerStore) -> None:
    assert store.highest_policy_update(CONTRACT) is None
    begin(store, "ep-2")
    store.commit_receipts([item("ep-1", policy_update=10, identity=OTHER_PATIENT)])
    assert store.highest_policy_update(CONTRACT) == 10

    [regressed] = store.commit_receipts([item("ep-2", policy_update=9, credited=("enc-7",))])
    # The commit names the window it refused against (highest 10, no lag: the store's default).
    assert regressed == Regressed(receipt_id="r-ep-2", policy_update=9, highest=10, max_lag=0)
    assert not regressed.stored
    assert store.receipt_by_episode("ep-2") is None
    assert credited_record_ids(store, CONTRACT, key(PATIENT)) == set()
    assert open_episode(store, CONTRACT, "ep-2") is not None, "the episode stays open"
    assert store.highest_policy_update(CONTRACT) == 10

    # Equal is not a regression; the ledger only moves up; contracts are independent.
    results = store.commit_receipts(
        [
            item("ep-2", policy_update=10),
            item("ep-3", policy_update=12),
            item("ep-4", policy_update=11),
            item("ep-5", policy_update=1, contract=OTHER_CONTRACT),
        ]
    )
    assert [isinstance(r, Regressed) for r in results] == [False, False, True, False]
    assert store.highest_policy_update(CONTRACT) == 12
    assert store.highest_policy_update(OTHER_CONTRACT) == 1


def test_a_policy_lag_accepts_a_window_below_the_highest(store: WorkerStore) -> None:
    """With ``max_lag`` an item up to that far below the highest commits and leaves the ledger
    where it is; below the window it is refused naming the window (R-W-7, issue 27)."""
    store.commit_receipts([item("ep-k1", policy_update=11, identity=OTHER_PATIENT)], max_lag=1)
    results = store.commit_receipts(
        [
            item("ep-k0", policy_update=10, identity=THIRD),  # 11 - 1: in the window
            item("ep-k2", policy_update=12, identity=FOURTH),  # raises the highest to 12
            item("ep-k1b", policy_update=10, identity=FIFTH),  # 12 - 1 > 10: below it now
            item("ep-k1c", policy_update=11),  # in the window of 12
        ],
        max_lag=1,
    )
    assert results == [
        Committed("r-ep-k0"),
        Committed("r-ep-k2"),
        Regressed("r-ep-k1b", policy_update=10, highest=12, max_lag=1),
        Committed("r-ep-k1c"),
    ]
    error = results[2].error()
    assert isinstance(error, PolicyUpdateRegressed)
    assert error.metadata == {"highest": "12", "max_policy_lag": "1", "lowest_accepted": "11"}
    assert "--max-policy-lag" in error.message
    assert "REWARDSEAL_WORKER_MAX_POLICY_LAG" in error.message
    # An item within the window never lowers the highest; the stored rows are the accepted.
    assert store.highest_policy_update(CONTRACT) == 12
    assert store.receipt_by_episode("ep-k1b") is None
    [late] = store.commit_receipts([item("ep-k1d", policy_update=11, identity=THIRD)], max_lag=1)
    assert late.stored
    assert store.highest_policy_update(CONTRACT) == 12
    # Lag 0 is the strict rule: the same update below the highest is refused.
    [strict] = store.commit_receipts([item("ep-k1e", policy_update=11, identity=FOURTH)])
    assert strict == Regressed("r-ep-k1e", policy_update=11, highest=12, max_lag=0)
    with pytest.raises(ValueError, match="max_lag"):
        store.commit_receipts([item("ep-k1f", policy_update=12)], max_lag=-1)


def test_a_lagging_first_batch_moves_the_highest_only_forward(store: WorkerStore) -> None:
    """On an empty ledger the first stored item starts the ledger; an item after it within
    the lag commits below it; the jump bound is unchanged by the lag."""
    results = store.commit_receipts(
        [
            item("ep-f1", policy_update=20, identity=OTHER_PATIENT),
            item("ep-f0", policy_update=18, identity=THIRD),  # 20 - 2
            item("ep-fx", policy_update=17, identity=FOURTH),  # below 20 - 2
            item("ep-fj", policy_update=26, identity=FIFTH),  # more than 5 above 20
        ],
        max_lag=2,
        max_jump=5,
    )
    assert [type(r).__name__ for r in results] == ["Committed", "Committed", "Regressed", "Jumped"]
    assert store.highest_policy_update(CONTRACT) == 20


# ---------------------------------------------------------------- batch API (set-based)

THIRD = {"patient_id": "P-003"}
FOURTH = {"patient_id": "P-004"}
FIFTH = {"patient_id": "P-005"}
SIXTH = {"patient_id": "P-006"}


def table_rows(store: WorkerStore, table: Table) -> set[tuple[Any, ...]]:
    """Every row of a store table (read directly, to check exactly what was stored)."""
    with store.engine.connect() as conn:
        return {tuple(row) for row in conn.execute(select(table))}


def open_rows(store: WorkerStore) -> set[tuple[str, str, str]]:
    """(contract, identity, episode id) of every open registration."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(
                open_episodes.c.contract_digest,
                open_episodes.c.identity_key,
                open_episodes.c.episode_id,
            )
        )
        return {(c, i, e) for c, i, e in rows}


def begin_item(
    episode_id: str,
    *,
    identity: dict[str, str] = PATIENT,
    at: datetime = T0,
    baseline: list[dict[str, Any]] | None = BASELINE,
    contract: str = CONTRACT,
) -> BeginItem:
    return BeginItem(
        contract_digest=contract,
        episode_id=episode_id,
        identity=Identity(identity),
        baseline=baseline,
        begun_at=at,
        ttl_seconds=TTL,
    )


@contextmanager
def counting_statements(store: WorkerStore) -> Iterator[list[str]]:
    """The SQL statements the store sends while the block runs (BEGIN/COMMIT not included; a
    COPY stream is one)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split(None, 1)[0].upper() in ("SELECT", "INSERT", "UPDATE", "DELETE", "COPY"):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def test_lookup_reports_receipts_open_registrations_and_ledger(store: WorkerStore) -> None:
    begin(store, "ep-open", identity=OTHER_PATIENT)
    begin(store, "ep-open-2", identity=THIRD, baseline=None)
    begin(store, "ep-other-contract", contract=OTHER_CONTRACT)
    store.commit_receipts([item("ep-done", "rid-done", policy_update=7)])
    store.commit_receipts([item("ep-done-elsewhere", "rid-x", contract=OTHER_CONTRACT)])

    found = store.lookup(
        CONTRACT,
        [
            "ep-done",
            "ep-open",
            "ep-open-2",
            "ep-other-contract",
            "ep-done-elsewhere",
            "ep-missing",
            "ep-open",
        ],
    )
    # A receipt counts whatever its contract (one receipt per episode id); a registration only
    # on the looked-up contract.
    assert dict(found.receipts) == {"ep-done": "rid-done", "ep-done-elsewhere": "rid-x"}
    assert dict(found.open) == {
        "ep-open": OpenEpisode(identity=Identity(OTHER_PATIENT), baseline=BASELINE, begun_at=T0),
        "ep-open-2": OpenEpisode(identity=Identity(THIRD), baseline=None, begun_at=T0),
    }
    assert found.highest == 7
    # Agrees with the single-item reads.
    for episode in ("ep-open", "ep-open-2", "ep-other-contract", "ep-missing"):
        assert found.open.get(episode) == open_episode(store, CONTRACT, episode)

    empty = store.lookup(OTHER_CONTRACT, [])
    assert dict(empty.receipts) == {}
    assert dict(empty.open) == {}
    assert empty.highest == 100
    assert store.lookup("sha256:" + "e" * 64, ["ep-open"]).highest is None


def test_credited_for_matches_credited_record_ids(store: WorkerStore) -> None:
    store.commit_receipts(
        [
            item("ep-1", identity=PATIENT, credited=("enc-1", "enc-2")),
            item("ep-2", identity=OTHER_PATIENT, credited=("enc-3",)),
            item("ep-3", identity=None, credited=("enc-9",)),
            item("ep-4", identity=THIRD, contract=OTHER_CONTRACT, credited=("enc-4",)),
        ]
    )
    keys = [key(PATIENT), key(OTHER_PATIENT), key(THIRD), key(FOURTH)]
    credited = store.credited_for(CONTRACT, keys)
    assert credited == {
        key(PATIENT): {"enc-1", "enc-2", "enc-9"},
        key(OTHER_PATIENT): {"enc-3", "enc-9"},
        key(THIRD): {"enc-9"},  # its own credit is on the other contract
        key(FOURTH): {"enc-9"},
    }
    for identity_key in keys:
        assert credited[identity_key] == credited_record_ids(store, CONTRACT, identity_key)
    assert store.credited_for(OTHER_CONTRACT, {key(THIRD), key(PATIENT)}) == {
        key(THIRD): {"enc-4"},
        key(PATIENT): set(),
    }
    assert store.credited_for(CONTRACT, []) == {}


def test_batch_reads_and_commit_use_a_constant_number_of_statements(store: WorkerStore) -> None:
    def run(first: int, size: int) -> tuple[int, int, int]:
        numbers = range(first, first + size)
        identities = [{"patient_id": f"Q-{n}"} for n in numbers]
        outcomes = store.begin_episodes(
            [begin_item(f"ep-{n}", identity=i) for n, i in zip(numbers, identities, strict=True)]
        )
        assert outcomes == [None] * size
        with counting_statements(store) as reads:
            found = store.lookup(CONTRACT, [f"ep-{n}" for n in numbers])
        assert len(found.open) == size
        assert set(found.credited) == {key(i) for i in identities}
        with counting_statements(store) as writes:
            results = store.commit_receipts(
                [
                    item(f"ep-{n}", identity=i, credited=(f"enc-{n}-a", f"enc-{n}-b"))
                    for n, i in zip(numbers, identities, strict=True)
                ]
            )
        assert all(r.stored for r in results)
        # PostgreSQL: the receipts in one COPY stream (SQLite: one INSERT).
        copies = [w for w in writes if w.startswith("COPY receipts")]
        assert len(copies) == (1 if store.dialect == "postgresql" else 0)
        with counting_statements(store) as begins:
            store.begin_episodes(
                [
                    begin_item(f"ep-next-{n}", identity=i, at=T0 + timedelta(seconds=1))
                    for n, i in zip(numbers, identities, strict=True)
                ]
            )
        return len(reads), len(writes), len(begins)

    store.commit_receipts([item("ep-first")])  # the contract's ledger row exists from here on
    small = run(0, 2)
    large = run(1000, 64)
    assert small == large
    reads, writes, begins = large
    assert reads == 1  # lookup: one query (receipts, registrations, ledger, credited records)
    # Ledger lock, existing receipts and taken credits (one query; on SQLite, whose BEGIN
    # IMMEDIATE holds the lock already, the ledgers come in that query too), receipts, credits,
    # close registrations (and the ledger raise, when the batch raises it).
    assert writes == (4 if store.dialect == "sqlite" else 5)
    # Registrations and existing receipts (SQLite: one query; PostgreSQL: the registrations
    # locked FOR UPDATE, which takes no UNION, then the receipts), insert.
    assert begins == (2 if store.dialect == "sqlite" else 3)


def test_batches_longer_than_one_in_list_are_chunked(store: WorkerStore) -> None:
    size = IN_CHUNK * 2 + 17
    identities = [{"patient_id": f"Q-{n}"} for n in range(size)]
    outcomes = store.begin_episodes(
        [begin_item(f"ep-{n}", identity=i) for n, i in enumerate(identities)]
    )
    assert outcomes == [None] * size
    # Every item meets an earlier one of the same batch: all refused, nothing changes.
    again = store.begin_episodes(
        [begin_item(f"ep-again-{n}", identity=i) for n, i in enumerate(identities)]
    )
    assert all(isinstance(o, IdentityBusy) for o in again)
    found = store.lookup(CONTRACT, [f"ep-{n}" for n in range(size)] + ["ep-missing"])
    assert len(found.open) == size
    results = store.commit_receipts(
        [item(f"ep-{n}", identity=i, credited=(f"enc-{n}",)) for n, i in enumerate(identities)]
    )
    assert all(r.stored for r in results)
    found = store.lookup(CONTRACT, [f"ep-{n}" for n in range(size)])
    assert found.receipts == {f"ep-{n}": f"r-ep-{n}" for n in range(size)}
    assert dict(found.open) == {}
    credited = store.credited_for(CONTRACT, [key(i) for i in identities])
    assert credited == {key(i): {f"enc-{n}"} for n, i in enumerate(identities)}
    # The whole batch again: every item is a duplicate, every credit already taken.
    repeat = store.commit_receipts(
        [item(f"ep-{n}", f"retry-{n}", identity=i) for n, i in enumerate(identities)]
    )
    assert [r.duplicate_of for r in repeat] == [f"r-ep-{n}" for n in range(size)]
    conflicts = store.commit_receipts(
        [item(f"ep-new-{n}", credited=(f"enc-{n}",)) for n in range(size)]
    )
    assert [r.credit_conflicts for r in conflicts] == [(f"enc-{n}",) for n in range(size)]
    assert count_receipts(store) == size


def test_begin_episodes_mixed_outcomes_in_one_batch(store: WorkerStore) -> None:
    begin(store, "ep-holder")  # PATIENT, fresh
    begin(store, "ep-stale", identity=OTHER_PATIENT, at=T0 - timedelta(seconds=TTL))
    begin(store, "ep-elsewhere", identity=THIRD)
    begin(store, "ep-moving", identity=FIFTH, at=T0 - timedelta(seconds=TTL))
    begin(store, "ep-done", identity=SIXTH)
    store.commit_receipts([item("ep-done", "rid-done", identity=SIXTH)])
    later = T0 + timedelta(seconds=1)

    outcomes = store.begin_episodes(
        [
            begin_item("ep-new", identity=FOURTH),  # 0 registered
            begin_item("ep-done", identity=FOURTH),  # 1 has a receipt
            begin_item("ep-2", identity=PATIENT),  # 2 identity busy (stored holder)
            begin_item("ep-holder", at=later, baseline=[]),  # 3 idempotent, baseline kept
            begin_item("ep-reclaim", identity=OTHER_PATIENT),  # 4 stale holder reclaimed
            begin_item("ep-elsewhere", identity=SIXTH),  # 5 open for another identity
            begin_item("ep-new", identity=SIXTH, at=later),  # 6 open earlier in this batch
            begin_item("ep-new-2", identity=FOURTH, at=later),  # 7 busy earlier in this batch
            begin_item("ep-new", identity=FOURTH, at=later),  # 8 idempotent within the batch
            begin_item("ep-moving", identity=SIXTH),  # 9 stale elsewhere: moves to SIXTH
            begin_item("ep-first", identity={"patient_id": "P-7"}),  # 10 registered...
            # 11 ...and reclaimed by a later begin of this batch once stale
            begin_item("ep-second", identity={"patient_id": "P-7"}, at=T0 + timedelta(seconds=TTL)),
            begin_item("ep-other", identity=PATIENT, contract=OTHER_CONTRACT),  # 12 other contract
        ]
    )
    kinds = [None if o is None else type(o) for o in outcomes]
    assert kinds == [
        None,
        DuplicateEpisode,
        IdentityBusy,
        KeptRegistration,
        None,
        IdentityConflict,
        IdentityConflict,
        IdentityBusy,
        KeptRegistration,
        None,
        None,
        None,
        None,
    ]
    # An idempotent re-begin says what the registration that stands holds: ep-holder's from
    # before this batch, ep-new's from item 0 of it (not the re-begins' own time).
    assert outcomes[3] == KeptRegistration(begun_at=T0, baseline_recorded=True)
    assert outcomes[8] == KeptRegistration(begun_at=T0, baseline_recorded=True)
    assert isinstance(outcomes[1], DuplicateEpisode)
    assert outcomes[1].metadata == {"receipt_id": "rid-done"}

    assert open_rows(store) == {
        (CONTRACT, key(PATIENT), "ep-holder"),
        (CONTRACT, key(OTHER_PATIENT), "ep-reclaim"),
        (CONTRACT, key(THIRD), "ep-elsewhere"),
        (CONTRACT, key(FOURTH), "ep-new"),
        (CONTRACT, key(SIXTH), "ep-moving"),
        (CONTRACT, key({"patient_id": "P-7"}), "ep-second"),
        (OTHER_CONTRACT, key(PATIENT), "ep-other"),
    }
    holder = open_episode(store, CONTRACT, "ep-holder")
    assert holder is not None
    assert holder.baseline == BASELINE
    assert holder.begun_at == T0
    assert count_receipts(store) == 1
    assert store.begin_episodes([]) == []


def test_commit_receipts_mixed_batch(store: WorkerStore) -> None:
    for episode, identity in [
        ("ep-a", PATIENT),
        ("ep-b", OTHER_PATIENT),
        ("ep-c", THIRD),
        ("ep-d", FOURTH),
        ("ep-f", FIFTH),
    ]:
        begin(store, episode, identity=identity)
    store.commit_receipts([item("ep-old", "r-old", policy_update=100, credited=("enc-1",))])

    batch = [
        item("ep-a", policy_update=100, credited=("enc-2",)),  # 0 stored
        item("ep-old", "r-old-retry", credited=("enc-8",)),  # 1 duplicate of a stored one
        item("ep-a", "r-a2", policy_update=130),  # 2 duplicate within the batch
        item("ep-b", policy_update=99, identity=OTHER_PATIENT),  # 3 regressed
        item("ep-c", identity=THIRD, credited=("enc-3", "enc-1")),  # 4 conflict: stored credit
        item("ep-d", identity=FOURTH, credited=("enc-2", "enc-5")),  # 5 conflict: in batch
        item("ep-e", policy_update=120, credited=("enc-3",)),  # 6 stored (4 took nothing)
        item("ep-f", policy_update=110, identity=FIFTH),  # 7 regressed within the batch
        item("ep-c", "r-c2", identity=THIRD, policy_update=120, credited=("enc-4",)),  # 8
        item("ep-g", contract=OTHER_CONTRACT, policy_update=1, credited=("enc-1",)),  # 9
        item("ep-b", "r-b2", policy_update=120, identity=OTHER_PATIENT),  # 10 (3 was refused)
        item("ep-h", policy_update=121, credited=("enc-6", "enc-6", "enc-7")),  # 11 stored
        item("ep-i", "r-i", credited=("enc-6",)),  # 12 regressed: checked before credits
    ]
    results = store.commit_receipts(batch)
    assert results == [
        Committed("r-ep-a"),
        Duplicate("r-old-retry", duplicate_of="r-old", episode_id="ep-old"),
        Duplicate("r-a2", duplicate_of="r-ep-a", episode_id="ep-a"),
        Regressed("r-ep-b", policy_update=99, highest=100, max_lag=0),
        CreditsTaken("r-ep-c", credit_conflicts=("enc-1",)),
        CreditsTaken("r-ep-d", credit_conflicts=("enc-2",)),
        Committed("r-ep-e"),
        Regressed("r-ep-f", policy_update=110, highest=120, max_lag=0),
        Committed("r-c2"),
        Committed("r-ep-g"),
        Committed("r-b2"),
        Committed("r-ep-h"),
        # 100 < 121: regression is checked first.
        Regressed("r-i", policy_update=100, highest=121, max_lag=0),
    ]
    stored = {(r, e, c, p) for r, e, c, p, *_ in table_rows(store, receipts)}
    assert stored == {
        ("r-old", "ep-old", CONTRACT, 100),
        ("r-ep-a", "ep-a", CONTRACT, 100),
        ("r-ep-e", "ep-e", CONTRACT, 120),
        ("r-c2", "ep-c", CONTRACT, 120),
        ("r-ep-g", "ep-g", OTHER_CONTRACT, 1),
        ("r-b2", "ep-b", CONTRACT, 120),
        ("r-ep-h", "ep-h", CONTRACT, 121),
    }
    assert table_rows(store, credited_records) == {
        (CONTRACT, "enc-1", "r-old", key(PATIENT)),
        (CONTRACT, "enc-2", "r-ep-a", key(PATIENT)),
        (CONTRACT, "enc-3", "r-ep-e", key(PATIENT)),
        (CONTRACT, "enc-4", "r-c2", key(THIRD)),
        (CONTRACT, "enc-6", "r-ep-h", key(PATIENT)),
        (CONTRACT, "enc-7", "r-ep-h", key(PATIENT)),
        (OTHER_CONTRACT, "enc-1", "r-ep-g", key(PATIENT)),
    }
    assert table_rows(store, policy_ledger) == {(CONTRACT, 121), (OTHER_CONTRACT, 1)}
    # Registrations of stored episodes are closed; refused ones stay open.
    assert open_rows(store) == {
        (CONTRACT, key(FOURTH), "ep-d"),
        (CONTRACT, key(FIFTH), "ep-f"),
    }
    stored_receipt = store.receipt_by_id("r-c2")
    assert stored_receipt is not None
    assert stored_receipt.envelope == b"envelope:r-c2"


def test_a_reused_receipt_id_fails_the_whole_batch(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "rid-1")])
    begin(store, "ep-2")
    for batch in (
        [item("ep-2", "fresh", credited=("enc-1",)), item("ep-3", "rid-1")],
        [item("ep-2", "same", credited=("enc-1",)), item("ep-3", "same", identity=None)],
    ):
        with pytest.raises(RewardSealError, match="already used by another episode"):
            store.commit_receipts(batch)
        assert count_receipts(store) == 1
        assert credited_record_ids(store, CONTRACT, key(PATIENT)) == set()
        assert open_episode(store, CONTRACT, "ep-2") is not None
        assert store.highest_policy_update(CONTRACT) == 100


# ---------------------------------------------------------------- durability and backends


def test_everything_survives_reopening(open_store: Callable[[], WorkerStore]) -> None:
    first = open_store()
    begin(first, "ep-open", identity=OTHER_PATIENT)
    first.commit_receipts([item("ep-1", "rid-1", policy_update=42, credited=("enc-1",))])
    first.close()

    again = open_store()
    assert count_receipts(again) == 1
    stored = again.receipt_by_id("rid-1")
    assert stored is not None
    assert stored.envelope == b"envelope:rid-1"
    assert again.highest_policy_update(CONTRACT) == 42
    assert credited_record_ids(again, CONTRACT, key(PATIENT)) == {"enc-1"}
    opened = open_episode(again, CONTRACT, "ep-open")
    assert opened is not None
    assert opened.baseline == BASELINE
    [dup] = again.commit_receipts([item("ep-1", "rid-2")])
    assert dup.duplicate_of == "rid-1"


def test_ping(store: WorkerStore) -> None:
    store.ping()


def test_concurrent_commits_one_episode_yield_one_receipt(
    open_store: Callable[[], WorkerStore],
) -> None:
    open_store()  # schema exists before the race; each thread still opens its own store
    threads = 16
    barrier = threading.Barrier(threads)

    def commit(n: int) -> CommitResult:
        own = open_store()
        barrier.wait()
        [result] = own.commit_receipts([item("ep-race", f"rid-{n}", credited=(f"enc-{n}",))])
        return result

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(commit, range(threads)))

    stored = [r for r in results if r.stored]
    assert len(stored) == 1
    winner = stored[0].receipt_id
    duplicates = [r for r in results if not r.stored]
    assert len(duplicates) == threads - 1
    assert {r.duplicate_of for r in duplicates} == {winner}
    check = open_store()
    assert count_receipts(check) == 1
    assert credited_record_ids(check, CONTRACT, key(PATIENT)) == {f"enc-{winner[4:]}"}


def test_concurrent_commits_of_one_episode_under_two_contracts_yield_one_receipt(
    open_store: Callable[[], WorkerStore],
) -> None:
    """The contracts' ledger locks do not order these commits: the unique episode id does."""
    open_store()
    threads = 16
    barrier = threading.Barrier(threads)

    def commit(n: int) -> CommitResult:
        own = open_store()
        contract = CONTRACT if n % 2 else OTHER_CONTRACT
        batch = [
            item(f"ep-side-{n}", contract=contract, identity=None, credited=(f"side-{n}",)),
            item("ep-race", f"rid-{n}", contract=contract, credited=(f"enc-{n}",)),
        ]
        barrier.wait()
        side, result = own.commit_receipts(batch)
        assert side.stored
        return result

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(commit, range(threads)))

    [winner] = [r.receipt_id for r in results if r.stored]
    assert {r.duplicate_of for r in results if not r.stored} == {winner}
    check = open_store()
    assert count_receipts(check) == threads + 1
    stored = check.receipt_by_episode("ep-race")
    assert stored is not None
    assert stored.receipt_id == winner
    credited = {record for _, record, _, _ in table_rows(check, credited_records)}
    assert credited == {f"side-{n}" for n in range(threads)} | {f"enc-{winner[4:]}"}


def test_concurrent_begin_batches_admit_one_episode_per_identity(
    open_store: Callable[[], WorkerStore],
) -> None:
    open_store()
    threads, identities = 8, 12
    barrier = threading.Barrier(threads)

    def begin_batch(n: int) -> list[RewardSealError | None]:
        own = open_store()
        order = list(range(identities))
        if n % 2:
            order.reverse()
        batch = [begin_item(f"ep-{n}-{i}", identity={"patient_id": f"Q-{i}"}) for i in order]
        barrier.wait()
        return own.begin_episodes(batch)

    with ThreadPoolExecutor(threads) as pool:
        outcomes = [o for batch in pool.map(begin_batch, range(threads)) for o in batch]
    assert sum(o is None for o in outcomes) == identities
    assert all(o is None or isinstance(o, IdentityBusy) for o in outcomes)
    rows = open_rows(open_store())
    assert len(rows) == identities
    assert {identity for _, identity, _ in rows} == {
        key({"patient_id": f"Q-{i}"}) for i in range(identities)
    }


_COMMIT_IN_CHILD = """
import json, sys, time
from pathlib import Path
from rewardseal_worker.store import ReceiptToCommit, WorkerStore
url, go, n = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
store = WorkerStore(url)
store.ping()
(go.parent / f"ready-{n}").touch()
while not go.exists():
    time.sleep(0.005)
[result] = store.commit_receipts([ReceiptToCommit(
    receipt_id=f"proc-{n}", episode_id="ep-proc", contract_digest=sys.argv[4],
    policy_update=100, identity_key=None, envelope=b"e", evidence=b"{}",
    credited_record_ids=(f"enc-{n}",))])
store.close()
print(json.dumps({"stored": result.stored, "duplicate_of": getattr(result, "duplicate_of", None)}))
"""


def test_concurrent_commits_across_processes_yield_one_receipt(
    store_url: str, tmp_path: Path
) -> None:
    WorkerStore(store_url).close()
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _COMMIT_IN_CHILD, store_url, str(go), str(n), CONTRACT],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < len(processes) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # every child has connected: release them together
    outputs = [json.loads(p.communicate(timeout=60)[0]) for p in processes]
    assert [p.returncode for p in processes] == [0] * len(processes)
    winners = [o for o in outputs if o["stored"]]
    assert len(winners) == 1
    check = WorkerStore(store_url)
    try:
        stored = check.receipt_by_episode("ep-proc")
        assert stored is not None
        assert {o["duplicate_of"] for o in outputs if not o["stored"]} == {stored.receipt_id}
        assert count_receipts(check) == 1
    finally:
        check.close()


def test_concurrent_begins_on_one_identity_admit_one(
    open_store: Callable[[], WorkerStore],
) -> None:
    open_store()
    threads = 8
    barrier = threading.Barrier(threads)

    def try_begin(n: int) -> str:
        own = open_store()
        barrier.wait()
        try:
            begin(own, f"ep-{n}")
        except IdentityBusy:
            return "busy"
        return "ok"

    with ThreadPoolExecutor(threads) as pool:
        outcomes = list(pool.map(try_begin, range(threads)))
    assert sorted(outcomes) == ["busy"] * (threads - 1) + ["ok"]


@pytest.fixture
def two_writers(open_store: Callable[[], WorkerStore]) -> tuple[WorkerStore, WorkerStore]:
    """Two stores on one database, for a writer that moves in the middle of the other's
    transaction: PostgreSQL only (SQLite's BEGIN IMMEDIATE keeps other writers out)."""
    store, other = open_store(), open_store()
    if store.dialect == "sqlite":
        pytest.skip("SQLite: BEGIN IMMEDIATE keeps other writers out of the transaction")
    return store, other


@contextmanager
def just_before(store: WorkerStore, prefix: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` (once) just before ``store`` first sends a statement starting ``prefix``:
    another writer's move in the middle of this store's transaction."""
    done: list[bool] = []

    def listener(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(prefix) and not done:
            done.append(True)
            action()

    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        yield
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    assert done, f"no statement started {prefix!r}"


def test_a_registration_copy_that_meets_a_concurrent_begin_runs_again(
    two_writers: tuple[WorkerStore, WorkerStore],
) -> None:
    # PostgreSQL registers a batch by COPY, which has no ON CONFLICT: a begin committed by
    # another writer between the batch's locked read and its COPY (a new slot: no row to lock)
    # fails the COPY. The batch runs again and meets the registration like any other.
    store, other = two_writers
    with just_before(store, "COPY open_episodes", lambda: begin(other, "ep-intruder")):
        outcomes = store.begin_episodes(
            [begin_item("ep-mine"), begin_item("ep-free", identity=THIRD)]
        )
    assert [type(o) for o in outcomes] == [IdentityBusy, type(None)]
    assert open_rows(store) == {
        (CONTRACT, key(PATIENT), "ep-intruder"),
        (CONTRACT, key(THIRD), "ep-free"),
    }


def test_a_receipt_copy_that_meets_a_concurrent_commit_runs_again_carefully(
    two_writers: tuple[WorkerStore, WorkerStore],
) -> None:
    # The same for receipts: another contract's commit (whose ledger lock this batch does not
    # hold) gives the episode its receipt between this batch's check and its COPY. The batch
    # runs again the careful way, and the episode is told it is a duplicate.
    store, other = two_writers

    def intrude() -> None:
        [result] = other.commit_receipts(
            [item("ep-race", "rid-theirs", contract=OTHER_CONTRACT, identity=None)]
        )
        assert result.stored

    with just_before(store, "COPY receipts", intrude):
        side, raced = store.commit_receipts(
            [item("ep-side", "rid-side", identity=None), item("ep-race", "rid-mine")]
        )
    assert side.stored
    assert raced.duplicate_of == "rid-theirs"
    assert {r for r, *_ in table_rows(store, receipts)} == {"rid-side", "rid-theirs"}


def test_concurrent_multi_contract_batches_do_not_deadlock(
    open_store: Callable[[], WorkerStore],
) -> None:
    """Batches touching two contracts in opposite orders all commit (locks taken in order)."""
    open_store()
    threads, rounds = 8, 5
    barrier = threading.Barrier(threads)

    def run(n: int) -> int:
        own = open_store()
        barrier.wait()
        contracts = [CONTRACT, OTHER_CONTRACT] if n % 2 else [OTHER_CONTRACT, CONTRACT]
        stored = 0
        for r in range(rounds):
            batch = [
                item(f"ep-{n}-{r}-{c[-1]}", contract=c, policy_update=100, identity=None)
                for c in contracts
            ]
            stored += sum(res.stored for res in own.commit_receipts(batch))
        return stored

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(run, range(threads)))
    assert total == threads * rounds * 2
    assert count_receipts(open_store()) == total


def test_sqlite_pragmas_in_effect(tmp_path: Path) -> None:
    store = WorkerStore(f"sqlite:///{tmp_path / 'worker.db'}")
    assert store.dialect == "sqlite"
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 5000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    store.close()


def test_unusable_urls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        WorkerStore("sqlite://")
    with pytest.raises(ValidationError):
        WorkerStore("sqlite:///:memory:")
    with pytest.raises(ValidationError):
        WorkerStore("mysql://localhost/db")
    with pytest.raises(Unavailable):
        WorkerStore(f"sqlite:///{tmp_path / 'missing-dir' / 'worker.db'}")


# ---------------------------------------------------------------- outbox (R-C-5)


def envelope_of(receipt_id: str) -> bytes:
    """The envelope bytes ``item`` gives a receipt."""
    return b"envelope:" + receipt_id.encode()


def due_ids(store: WorkerStore, now: datetime, limit: int = 1000) -> list[str]:
    return [entry.receipt_id for entry in store.outbox_due(limit, now)]


def outbox_rows(store: WorkerStore) -> dict[str, tuple[Any, ...]]:
    """receipt_id -> (created_at, attempts, next_attempt_at, last_error) of every outbox row."""
    return {r: (c, a, n, e) for r, _, c, _, a, n, e in table_rows(store, outbox)}


def test_outbox_holds_every_stored_receipt_in_commit_order(
    open_store: Callable[..., WorkerStore],
) -> None:
    store = open_store(outbox=True)
    assert store.outbox_enabled
    store.commit_receipts([item("ep-old", "r-old", credited=("enc-1",))])
    results = store.commit_receipts(
        [
            item("ep-z", "r-z"),  # stored
            item("ep-old", "r-old-retry"),  # duplicate of a stored receipt
            item("ep-a", "r-a", policy_update=99),  # regressed
            item("ep-m", "r-m", credited=("enc-1",)),  # credit conflict
            item("ep-b", "r-b", credited=("enc-2",)),  # stored
            item("ep-z", "r-z2"),  # duplicate within the batch
            item("ep-c", "r-c", credited=("enc-2",)),  # credit conflict within the batch
            item("ep-k", "r-k"),  # stored
        ]
    )
    assert [r.stored for r in results] == [True, False, False, False, True, False, False, True]
    now = datetime.now(UTC)
    # Oldest first; within one commit in batch order (not receipt-id order).
    assert store.outbox_due(100, now) == [
        OutboxItem("r-old", envelope_of("r-old"), 0),
        OutboxItem("r-z", envelope_of("r-z"), 0),
        OutboxItem("r-b", envelope_of("r-b"), 0),
        OutboxItem("r-k", envelope_of("r-k"), 0),
    ]
    assert outbox_size(store) == 4
    created = {r: c for r, _, _, _, _, _, c in table_rows(store, receipts)}
    rows = outbox_rows(store)
    assert rows == {rid: (created[rid], 0, created[rid], None) for rid in created}
    assert all(c.tzinfo is not None for c in created.values())
    # Only rows whose next attempt is due: none before they were committed.
    assert store.outbox_due(100, min(created.values()) - timedelta(microseconds=1)) == []
    assert due_ids(store, now, limit=2) == ["r-old", "r-z"]


def test_outbox_off_writes_nothing_but_the_table_exists(
    open_store: Callable[..., WorkerStore],
) -> None:
    store = open_store()
    assert not store.outbox_enabled
    begin(store, "ep-1")
    [result] = store.commit_receipts([item("ep-1", "r-1", credited=("enc-1",))])
    assert result.stored
    assert "outbox" in inspect(store.engine).get_table_names()
    now = datetime.now(UTC)
    assert outbox_size(store) == 0
    assert store.outbox_due(10, now) == []
    assert outbox_oldest(store, now) is None
    # Forwarding turned on later forwards what is committed from then on.
    later = open_store(outbox=True)
    later.commit_receipts([item("ep-2", "r-2")])
    assert due_ids(later, datetime.now(UTC)) == ["r-2"]
    assert outbox_size(store) == 1


def test_outbox_done_later_and_due_with_backoff(open_store: Callable[..., WorkerStore]) -> None:
    store = open_store(outbox=True)
    store.commit_receipts([item("ep-1", "r-1"), item("ep-2", "r-2"), item("ep-3", "r-3")])
    [created] = {c for c, *_ in outbox_rows(store).values()}
    now = created + timedelta(seconds=5)
    assert outbox_oldest(store, now) == 5.0
    assert outbox_oldest(store, created - timedelta(seconds=1)) == 0.0, "never negative"

    store.outbox_later(["r-1", "missing"], error="control: unavailable", now=now, delay_seconds=30)
    assert due_ids(store, now) == ["r-2", "r-3"]
    assert due_ids(store, now + timedelta(seconds=29.999)) == ["r-2", "r-3"]
    due = store.outbox_due(10, now + timedelta(seconds=30))
    assert due[0] == OutboxItem("r-1", envelope_of("r-1"), 1), "still the oldest once due"
    assert [d.receipt_id for d in due] == ["r-1", "r-2", "r-3"]
    assert outbox_rows(store)["r-1"] == (
        created,
        1,
        now + timedelta(seconds=30),
        "control: unavailable",
    )
    # Each failure counts; the last error is kept (cut to its bound); a naive now is UTC.
    naive = (now + timedelta(seconds=40)).replace(tzinfo=None)
    store.outbox_later({"r-1", "r-2"}, error="x" * 2000, now=naive, delay_seconds=0.5)
    rows = outbox_rows(store)
    assert rows["r-1"][1:] == (2, now + timedelta(seconds=40.5), "x" * OUTBOX_ERROR_MAX)
    assert rows["r-2"][1:] == (1, now + timedelta(seconds=40.5), "x" * OUTBOX_ERROR_MAX)
    assert due_ids(store, now + timedelta(seconds=40)) == ["r-3"]
    assert outbox_oldest(store, now) == 5.0, "a backed-off row still counts for the age"

    store.outbox_done(["r-2", "missing"])
    store.outbox_done([])
    store.outbox_later([], error="unused", now=now, delay_seconds=1)
    assert outbox_size(store) == 2
    assert due_ids(store, now + timedelta(hours=1)) == ["r-1", "r-3"]
    store.outbox_done(("r-1", "r-3", "r-3"))
    assert outbox_size(store) == 0
    assert outbox_oldest(store, now) is None
    assert count_receipts(store) == 3, "forwarding never touches the receipts"

    with pytest.raises(ValidationError):
        store.outbox_due(0, now)
    for delay in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            store.outbox_later(["r-1"], error="e", now=now, delay_seconds=delay)


def test_outbox_rows_roll_back_with_a_failed_batch(
    open_store: Callable[..., WorkerStore],
) -> None:
    store = open_store(outbox=True)
    # A failure after the outbox insert (here: the ledger raise) rolls the rows back too.
    seen: list[str] = []

    def fail_on_ledger(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split("(", 1)[0].strip())
        if statement.startswith("UPDATE policy_ledger"):
            raise RuntimeError("injected failure")

    event.listen(store.engine, "before_cursor_execute", fail_on_ledger)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            store.commit_receipts([item("ep-1", "r-1", credited=("enc-1",))])
    finally:
        event.remove(store.engine, "before_cursor_execute", fail_on_ledger)
    assert "INSERT INTO outbox" in seen, "the outbox row was written before the failure"
    assert outbox_size(store) == 0
    assert count_receipts(store) == 0

    # A batch refused as a whole (a reused receipt id) leaves no outbox row either.
    store.commit_receipts([item("ep-1", "r-1")])
    with pytest.raises(RewardSealError, match="already used by another episode"):
        store.commit_receipts([item("ep-2", "fresh"), item("ep-3", "r-1")])
    assert due_ids(store, datetime.now(UTC)) == ["r-1"]
    assert set(outbox_rows(store)) == {r for r, *_ in table_rows(store, receipts)}


def test_outbox_adds_one_statement_to_a_commit(open_store: Callable[..., WorkerStore]) -> None:
    store = open_store(outbox=True)
    store.commit_receipts([item("ep-first")])  # the contract's ledger row exists from here on
    counts = []
    for size in (2, 64):
        with counting_statements(store) as writes:
            store.commit_receipts(
                [item(f"ep-{size}-{n}", credited=(f"enc-{size}-{n}",)) for n in range(size)]
            )
        counts.append(len(writes))
    # test_batch_reads_and_commit_...: 5 (SQLite: 4), and the outbox insert
    assert counts == [5, 5] if store.dialect == "sqlite" else [6, 6]
    assert outbox_size(store) == 1 + 2 + 64


_COMMIT_AND_CRASH = """
import os, sys
from rewardseal_worker.store import ReceiptToCommit, WorkerStore
store = WorkerStore(sys.argv[1], outbox=True)
store.commit_receipts([ReceiptToCommit(
    receipt_id=f"crash-{n}", episode_id=f"ep-crash-{n}", contract_digest=sys.argv[2],
    policy_update=100, identity_key=None, envelope=f"env-{n}".encode(), evidence=b"{}")
    for n in range(3)])
os._exit(0)  # no close, no flush: the process dies right after the commit returned
"""


def test_outbox_survives_a_crash_between_commit_and_forward(
    store_url: str, open_store: Callable[..., WorkerStore]
) -> None:
    open_store()  # the schema exists before the child runs
    child = subprocess.run(
        [sys.executable, "-c", _COMMIT_AND_CRASH, store_url, CONTRACT], timeout=60, check=False
    )
    assert child.returncode == 0
    after = open_store(outbox=True)
    now = datetime.now(UTC)
    assert after.outbox_due(10, now) == [
        OutboxItem(f"crash-{n}", f"env-{n}".encode(), 0) for n in range(3)
    ]
    # A forwarder that fails midway and dies: what it did not finish stays, attempts kept.
    after.outbox_done(["crash-0"])
    after.outbox_later(["crash-1"], error="control: unavailable", now=now, delay_seconds=0)
    after.close()
    again = open_store()
    assert again.outbox_due(10, now) == [
        OutboxItem("crash-1", b"env-1", 1),
        OutboxItem("crash-2", b"env-2", 0),
    ]


def test_concurrent_commits_keep_receipts_and_outbox_in_step(
    open_store: Callable[..., WorkerStore],
) -> None:
    open_store()
    threads = 8
    barrier = threading.Barrier(threads)

    def commit(n: int) -> list[CommitResult]:
        own = open_store(outbox=True)
        barrier.wait()
        return own.commit_receipts(
            [item("ep-shared", f"shared-{n}", identity=None), item(f"ep-own-{n}", identity=None)]
        )

    with ThreadPoolExecutor(threads) as pool:
        results = [r for batch in pool.map(commit, range(threads)) for r in batch]
    stored = {r.receipt_id for r in results if r.stored}
    assert len(stored) == threads + 1
    check = open_store()
    assert set(due_ids(check, datetime.now(UTC))) == stored
    assert {r for r, *_ in table_rows(check, receipts)} == stored
