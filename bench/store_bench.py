"""Micro-benchmark of the worker store's part of scoring (not a test; not run by ``make bench``).

Usage: ``.venv/bin/python bench/store_bench.py [--episodes 256] [--batch 64] [--backend both]``

For each backend (durable SQLite file: WAL, synchronous=FULL; and a throwaway local PostgreSQL
server with fsync on, when its binaries are installed) it times, per episode:

- ``begin``: registering the episodes, one ``begin_episodes`` call per episode (``per-item``) or
  per batch (``batched``);
- ``reads``: what ``Scorer._prepare`` reads before judging: per episode ``receipt_by_episode``,
  ``highest_policy_update``, ``open_episode``, ``credited_record_ids`` (``per-item``), or per
  batch one ``lookup`` and one ``credited_for`` (``batched``);
- ``commit``: one ``commit_receipts`` per batch (every episode credits one record);
- ``store``: reads + commit, the store part of a scoring batch.

The ``batched`` variant runs only when the store has those methods. Each run uses a fresh
database and store; ``--warmup`` episodes go through the same steps first, untimed, so that the
numbers are those of a running worker (SQLAlchemy compiles each statement once per engine).
Prints milliseconds per episode (median of ``--repeat`` runs). ``--store PATH`` benchmarks
another copy of ``store.py`` (e.g. a version from before the store became a package, taken with
``git show``, for a before/after comparison); the per-item steps the worker no longer takes
(one registration, one identity's credits) come from ``tests/support/worker_store.py``, and
every variant needs the store's ``begin_episodes``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.worker_store import (  # noqa: E402
    count_receipts,
    credited_record_ids,
    open_episode,
)

from rewardseal.core.digest import canonical_json  # noqa: E402
from rewardseal_server.sqlstore import sqlite_url  # noqa: E402
from rewardseal_worker import store as store_module  # noqa: E402
from rewardseal_worker.identity import Identity  # noqa: E402

WorkerStore = store_module.WorkerStore

CONTRACT = "sha256:" + "c" * 64
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
TTL = 600.0
ENVELOPE = b"x" * 700  # about the size of a signed receipt envelope
EVIDENCE = b"y" * 400


def identity(n: int) -> dict[str, str]:
    return {"patient_id": f"P-{n:06d}"}


def key(n: int) -> str:
    return canonical_json(identity(n)).decode()


def baseline(n: int) -> list[dict[str, Any]]:
    return [{"id": f"enc-{n}-0", "patient_id": f"P-{n:06d}", "type": "Intake"}]


def to_commit(n: int) -> Any:
    return store_module.ReceiptToCommit(
        receipt_id=f"rcpt-{n:06d}",
        episode_id=f"ep-{n:06d}",
        contract_digest=CONTRACT,
        policy_update=100,
        identity_key=key(n),
        envelope=ENVELOPE,
        evidence=EVIDENCE,
        credited_record_ids=(f"enc-{n}-1",),
    )


def to_begin(n: int) -> Any:
    # A store from before the Identity value (``--store``) takes the key string instead.
    names = {field.name for field in dataclasses.fields(store_module.BeginItem)}
    who = (
        {"identity_key": key(n)} if "identity_key" in names else {"identity": Identity(identity(n))}
    )
    return store_module.BeginItem(
        contract_digest=CONTRACT,
        episode_id=f"ep-{n:06d}",
        **who,
        baseline=baseline(n),
        begun_at=T0,
        ttl_seconds=TTL,
    )


def begin_per_item(store: Any, batch: list[int]) -> None:
    for n in batch:
        [outcome] = store.begin_episodes([to_begin(n)])
        assert outcome is None, outcome


def begin_batched(store: Any, batch: list[int]) -> None:
    outcomes = store.begin_episodes([to_begin(n) for n in batch])
    assert all(o is None for o in outcomes), outcomes


def reads_per_item(store: Any, batch: list[int]) -> None:
    for n in batch:
        assert store.receipt_by_episode(f"ep-{n:06d}") is None
        store.highest_policy_update(CONTRACT)
        assert open_episode(store, CONTRACT, f"ep-{n:06d}") is not None
        credited_record_ids(store, CONTRACT, key(n))


def reads_batched(store: Any, batch: list[int]) -> None:
    found = store.lookup(CONTRACT, [f"ep-{n:06d}" for n in batch])
    assert not found.receipts
    assert len(found.open) == len(batch)
    store.credited_for(CONTRACT, {key(n) for n in batch})


def commit(store: Any, batch: list[int]) -> None:
    results = store.commit_receipts([to_commit(n) for n in batch])
    assert all(r.stored for r in results), results


def one_run(
    url: str,
    episodes: int,
    size: int,
    warmup: int,
    begin: Callable[[Any, list[int]], None],
    reads: Callable[[Any, list[int]], None],
) -> dict[str, float]:
    store = WorkerStore(url)
    try:
        store.ping()
        first = 1_000_000  # warm-up episodes: numbered apart from the timed ones
        for offset in range(0, warmup, size):
            batch = list(range(first + offset, first + min(offset + size, warmup)))
            begin(store, batch)
            reads(store, batch)
            commit(store, batch)
        batches = [list(range(i, min(i + size, episodes))) for i in range(0, episodes, size)]
        seconds = {"begin": 0.0, "reads": 0.0, "commit": 0.0}
        for batch in batches:
            start = time.perf_counter()
            begin(store, batch)
            seconds["begin"] += time.perf_counter() - start
        for batch in batches:
            start = time.perf_counter()
            reads(store, batch)
            middle = time.perf_counter()
            commit(store, batch)
            seconds["reads"] += middle - start
            seconds["commit"] += time.perf_counter() - middle
        assert count_receipts(store) == episodes + warmup
    finally:
        store.close()
    ms = {name: value * 1000 / episodes for name, value in seconds.items()}
    ms["store"] = ms["reads"] + ms["commit"]
    return ms


@contextmanager
def sqlite_urls(root: Path) -> Iterator[Callable[[], str]]:
    counter = iter(range(1_000_000))
    yield lambda: sqlite_url(root / f"store-{next(counter)}.db")


@contextmanager
def postgres_urls() -> Iterator[Callable[[], str]]:
    from support.postgres import PostgresServer  # type: ignore[import-not-found]

    server = PostgresServer()
    server.start()
    try:
        yield lambda: server.url(server.create_database())
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", type=Path, help="benchmark this store.py instead")
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    args = parser.parse_args()
    if args.store is not None:
        global store_module, WorkerStore
        spec = importlib.util.spec_from_file_location("store_under_test", args.store)
        assert spec is not None
        assert spec.loader is not None
        store_module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = store_module  # dataclasses look their module up
        spec.loader.exec_module(store_module)
        WorkerStore = store_module.WorkerStore
    variants: list[tuple[str, Callable[..., None], Callable[..., None]]] = [
        ("per-item", begin_per_item, reads_per_item)
    ]
    if hasattr(WorkerStore, "lookup"):
        variants.append(("batched", begin_batched, reads_batched))
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    print(
        f"{args.episodes} episodes (after {args.warmup} warm-up), batches of {args.batch}; "
        f"ms per episode (median of {args.repeat})"
    )
    print(f"{'backend':<11} {'variant':<9} {'begin':>7} {'reads':>7} {'commit':>7} {'store':>7}")
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        for backend in backends:
            urls = sqlite_urls(Path(tmp)) if backend == "sqlite" else postgres_urls()
            try:
                context = urls.__enter__()
            except Exception as exc:  # no PostgreSQL binaries here
                print(f"{backend:<11} skipped: {exc}")
                continue
            try:
                for name, begin, reads in variants:
                    runs = [
                        one_run(context(), args.episodes, args.batch, args.warmup, begin, reads)
                        for _ in range(args.repeat)
                    ]
                    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                    print(
                        f"{backend:<11} {name:<9} {med['begin']:7.3f} {med['reads']:7.3f} "
                        f"{med['commit']:7.3f} {med['store']:7.3f}"
                    )
            finally:
                urls.__exit__(None, None, None)


if __name__ == "__main__":
    main()
