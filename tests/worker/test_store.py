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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rewardseal.digest import canonical_json
from rewardseal.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    Unavailable,
    ValidationError,
)
from rewardseal_worker.store import (
    CommitResult,
    OpenEpisode,
    ReceiptToCommit,
    StoredReceipt,
    WorkerStore,
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
def open_store(store_url: str) -> Iterator[Callable[[], WorkerStore]]:
    """A factory of WorkerStore instances on the test's database, all closed at teardown."""
    stores: list[WorkerStore] = []
    lock = threading.Lock()

    def make() -> WorkerStore:
        store = WorkerStore(store_url)
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
    store.begin_episode(
        contract_digest=contract,
        episode_id=episode_id,
        identity_key=key(identity),
        baseline=baseline,
        begun_at=at,
        ttl_seconds=TTL,
    )


# ---------------------------------------------------------------- episodes (R-W-1, R-W-3)


def test_begin_open_close_lifecycle(store: WorkerStore) -> None:
    assert store.open_episode(CONTRACT, "ep-1") is None
    begin(store, "ep-1")
    assert store.open_episode(CONTRACT, "ep-1") == OpenEpisode(
        identity_key=key(PATIENT), identity=PATIENT, baseline=BASELINE, begun_at=T0
    )
    assert store.open_episode(OTHER_CONTRACT, "ep-1") is None

    [result] = store.commit_receipts([item("ep-1", credited=("enc-2",))])
    assert result == CommitResult(receipt_id="r-ep-1")
    assert result.stored
    assert store.open_episode(CONTRACT, "ep-1") is None, "commit closes the open episode"
    # The identity is free again for the next episode.
    begin(store, "ep-2", at=T0 + timedelta(seconds=1))
    assert store.open_episode(CONTRACT, "ep-2") is not None


def test_begun_at_is_utc_aware_and_baseline_none_kept(store: WorkerStore) -> None:
    local = T0.astimezone(__import__("datetime").timezone(timedelta(hours=5)))
    begin(store, "ep-1", at=local, baseline=None)
    opened = store.open_episode(CONTRACT, "ep-1")
    assert opened is not None
    assert opened.baseline is None
    assert opened.begun_at == T0
    assert opened.begun_at.tzinfo is not None
    assert opened.begun_at.utcoffset() == timedelta(0)


def test_empty_baseline_is_not_none(store: WorkerStore) -> None:
    begin(store, "ep-1", baseline=[])
    opened = store.open_episode(CONTRACT, "ep-1")
    assert opened is not None
    assert opened.baseline == []


def test_second_episode_on_busy_identity_is_refused(store: WorkerStore) -> None:
    begin(store, "ep-1")
    with pytest.raises(IdentityBusy) as info:
        begin(store, "ep-2", at=T0 + timedelta(seconds=TTL - 1))
    assert info.value.reason == "identity_busy"
    assert store.open_episode(CONTRACT, "ep-2") is None
    # Another identity, or the same identity on another contract, is not busy.
    begin(store, "ep-3", identity=OTHER_PATIENT)
    begin(store, "ep-4", contract=OTHER_CONTRACT)


def test_stale_open_episode_is_reclaimed_after_ttl(store: WorkerStore) -> None:
    begin(store, "ep-1")
    begin(store, "ep-2", at=T0 + timedelta(seconds=TTL), baseline=[])
    assert store.open_episode(CONTRACT, "ep-1") is None
    reclaimed = store.open_episode(CONTRACT, "ep-2")
    assert reclaimed is not None
    assert reclaimed.baseline == []


def test_rebegin_same_episode_is_idempotent_and_keeps_baseline(store: WorkerStore) -> None:
    begin(store, "ep-1")
    begin(store, "ep-1", at=T0 + timedelta(seconds=5), baseline=[{"id": "other"}])
    begin(store, "ep-1", at=T0 + timedelta(seconds=TTL * 3), baseline=None)
    assert store.open_episode(CONTRACT, "ep-1") == OpenEpisode(
        identity_key=key(PATIENT), identity=PATIENT, baseline=BASELINE, begun_at=T0
    )


def test_same_episode_on_another_identity_conflicts_until_stale(store: WorkerStore) -> None:
    begin(store, "ep-1")
    with pytest.raises(IdentityConflict):
        begin(store, "ep-1", identity=OTHER_PATIENT, at=T0 + timedelta(seconds=1))
    begin(store, "ep-1", identity=OTHER_PATIENT, at=T0 + timedelta(seconds=TTL))
    moved = store.open_episode(CONTRACT, "ep-1")
    assert moved is not None
    assert moved.identity == OTHER_PATIENT


def test_begin_after_receipt_is_duplicate_with_receipt_id(store: WorkerStore) -> None:
    begin(store, "ep-1")
    store.commit_receipts([item("ep-1", "receipt-abc")])
    with pytest.raises(DuplicateEpisode) as info:
        begin(store, "ep-1", at=T0 + timedelta(seconds=1))
    assert info.value.metadata == {"receipt_id": "receipt-abc"}
    assert info.value.reason == "duplicate_episode"
    assert store.open_episode(CONTRACT, "ep-1") is None


def test_begin_checks_identity_argument(store: WorkerStore) -> None:
    with pytest.raises(ValidationError):
        store.begin_episode(
            contract_digest=CONTRACT,
            episode_id="ep-1",
            identity_key="not json",
            baseline=None,
            begun_at=T0,
            ttl_seconds=TTL,
        )
    with pytest.raises(ValidationError):
        store.begin_episode(
            contract_digest=CONTRACT,
            episode_id="ep-1",
            identity_key=key(PATIENT),
            identity=OTHER_PATIENT,
            baseline=None,
            begun_at=T0,
            ttl_seconds=TTL,
        )
    store.begin_episode(
        contract_digest=CONTRACT,
        episode_id="ep-1",
        identity_key=key(PATIENT),
        identity=PATIENT,
        baseline=None,
        begun_at=T0,
        ttl_seconds=TTL,
    )


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
        CommitResult(receipt_id="first"),
        CommitResult(receipt_id="other"),
        CommitResult(receipt_id="second", duplicate_of="first"),
    ]
    assert not results[2].stored
    assert store.receipt_by_id("second") is None
    assert store.count_receipts() == 2
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == {"enc-a"}
    assert store.highest_policy_update(CONTRACT) == 100, "a duplicate does not move the ledger"


def test_duplicate_across_batches_points_at_the_stored_receipt(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "first")])
    [again] = store.commit_receipts([item("ep-1", "retry", credited=("enc-z",))])
    assert again.duplicate_of == "first"
    assert store.receipt_by_id("retry") is None
    assert store.count_receipts() == 1
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == set()


def test_duplicate_wins_over_regression(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", "first", policy_update=100)])
    store.commit_receipts([item("ep-2", policy_update=300)])
    [again] = store.commit_receipts([item("ep-1", "retry", policy_update=100)])
    assert again == CommitResult(receipt_id="retry", duplicate_of="first")


def test_credited_record_is_never_credited_twice(store: WorkerStore) -> None:
    [first] = store.commit_receipts([item("ep-1", credited=("enc-2", "enc-3"))])
    assert first.stored
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == {"enc-2", "enc-3"}
    assert store.credited_record_ids(CONTRACT, key(OTHER_PATIENT)) == set()
    assert store.credited_record_ids(OTHER_CONTRACT, key(PATIENT)) == set()

    [second] = store.commit_receipts([item("ep-2", credited=("enc-3", "enc-4"))])
    assert second == CommitResult(receipt_id="r-ep-2", credit_conflicts=("enc-3",))
    assert not second.stored
    assert store.receipt_by_episode("ep-2") is None
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == {"enc-2", "enc-3"}

    # In one batch: the second claim on the same record is refused too.
    results = store.commit_receipts(
        [item("ep-3", credited=("enc-5",)), item("ep-4", credited=("enc-5",))]
    )
    assert results[0].stored
    assert results[1].credit_conflicts == ("enc-5",)
    # The same record id under another contract is another record.
    [other] = store.commit_receipts([item("ep-5", contract=OTHER_CONTRACT, credited=("enc-3",))])
    assert other.stored


def test_credits_without_identity_are_excluded_for_every_identity(store: WorkerStore) -> None:
    store.commit_receipts([item("ep-1", identity=None, credited=("enc-9",))])
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == {"enc-9"}
    assert store.credited_record_ids(CONTRACT, key(OTHER_PATIENT)) == {"enc-9"}


# ---------------------------------------------------------------- policy ledger (R-W-7)


def test_policy_update_regression_stores_nothing(store: WorkerStore) -> None:
    assert store.highest_policy_update(CONTRACT) is None
    begin(store, "ep-2")
    store.commit_receipts([item("ep-1", policy_update=10, identity=OTHER_PATIENT)])
    assert store.highest_policy_update(CONTRACT) == 10

    [regressed] = store.commit_receipts([item("ep-2", policy_update=9, credited=("enc-7",))])
    assert regressed == CommitResult(receipt_id="r-ep-2", regressed=True)
    assert not regressed.stored
    assert store.receipt_by_episode("ep-2") is None
    assert store.credited_record_ids(CONTRACT, key(PATIENT)) == set()
    assert store.open_episode(CONTRACT, "ep-2") is not None, "the episode stays open"
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
    assert [r.regressed for r in results] == [False, False, True, False]
    assert store.highest_policy_update(CONTRACT) == 12
    assert store.highest_policy_update(OTHER_CONTRACT) == 1


# ---------------------------------------------------------------- durability and backends


def test_everything_survives_reopening(open_store: Callable[[], WorkerStore]) -> None:
    first = open_store()
    begin(first, "ep-open", identity=OTHER_PATIENT)
    first.commit_receipts([item("ep-1", "rid-1", policy_update=42, credited=("enc-1",))])
    first.close()

    again = open_store()
    assert again.count_receipts() == 1
    stored = again.receipt_by_id("rid-1")
    assert stored is not None
    assert stored.envelope == b"envelope:rid-1"
    assert again.highest_policy_update(CONTRACT) == 42
    assert again.credited_record_ids(CONTRACT, key(PATIENT)) == {"enc-1"}
    opened = again.open_episode(CONTRACT, "ep-open")
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
    assert check.count_receipts() == 1
    assert check.credited_record_ids(CONTRACT, key(PATIENT)) == {f"enc-{winner[4:]}"}


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
print(json.dumps({"stored": result.stored, "duplicate_of": result.duplicate_of}))
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
        assert check.count_receipts() == 1
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
    assert open_store().count_receipts() == total


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
