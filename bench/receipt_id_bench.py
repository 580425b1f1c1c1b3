"""What the shape of a receipt id costs the durable commit (by hand; not run by ``make bench``).

Usage: ``.venv/bin/python bench/receipt_id_bench.py [--prefill 60000] [--batches 300]``

Two worker stores (durable SQLite files: WAL, ``synchronous=FULL``) in this process, each first
filled with ``--prefill`` receipts, then committing batches of 64 receipts with
``WorkerStore.commit_receipts``, the two taking turns batch by batch (so a change in the
machine's background load falls on both alike). One store names receipts as the worker did
before ids were time-ordered (``rcpt.`` + 16 random bytes: every id lands somewhere in the
primary-key index), the other as ``new_receipt_id`` does now (the issue time in milliseconds
first: a batch's ids land together at the end of the index). Episode ids are sequential in both,
as a trainer's counter would make them. Prints, per shape, the median thread CPU and wall time
per 64-receipt commit; results in ``bench/results/receipt_ids.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rewardseal_worker.engine import new_receipt_id
from rewardseal_worker.store import ReceiptToCommit, WorkerStore

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "receipt_ids.json"
CONTRACT = "sha256:" + "c" * 64
BATCH = 64
ENVELOPE = os.urandom(900)  # about a signed receipt envelope; random: incompressible
EVIDENCE = os.urandom(100)  # about a packed evidence document


def random_id() -> str:
    """The receipt id before time-ordered ids: 16 random bytes."""
    return f"rcpt.{os.urandom(16).hex()}"


def ordered_id() -> str:
    """The receipt id ``new_receipt_id`` makes: issue time in ms, then 16 random bytes."""
    return new_receipt_id(issued_at=datetime.now(UTC))


class Side:
    """One store and its way of naming receipts."""

    def __init__(self, name: str, make_id: Callable[[], str], workdir: Path) -> None:
        self.name, self.make_id = name, make_id
        self.store = WorkerStore(f"sqlite:///{workdir / f'{name}.db'}")
        self.count = 0
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def batch(self) -> list[ReceiptToCommit]:
        items = []
        for _ in range(BATCH):
            self.count += 1
            items.append(
                ReceiptToCommit(
                    receipt_id=self.make_id(),
                    episode_id=f"episode.bench-{self.count:09d}",
                    contract_digest=CONTRACT,
                    policy_update=1,
                    identity_key=None,
                    envelope=ENVELOPE,
                    evidence=EVIDENCE,
                    credited_record_ids=(),
                )
            )
        return items

    def commit(self, *, timed: bool) -> None:
        items = self.batch()
        cpu, wall = time.thread_time(), time.perf_counter()
        results = self.store.commit_receipts(items)
        if timed:
            self.cpu.append(time.thread_time() - cpu)
            self.wall.append(time.perf_counter() - wall)
        if not all(result.stored for result in results):
            raise SystemExit(f"{self.name}: a receipt was not stored")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefill", type=int, default=60_000, help="receipts before timing")
    parser.add_argument("--batches", type=int, default=300, help="timed batches per shape")
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewardseal-receipt-ids-") as workdir:
        sides = [
            Side("random", random_id, Path(workdir)),
            Side("ordered", ordered_id, Path(workdir)),
        ]
        try:
            for side in sides:
                for _ in range(options.prefill // BATCH):
                    side.commit(timed=False)
            for n in range(options.batches):
                for side in sides if n % 2 == 0 else reversed(sides):
                    side.commit(timed=True)
            report = {
                "what": "WorkerStore.commit_receipts of 64 receipts, SQLite WAL synchronous=FULL, "
                "after the prefill; medians per commit, the two shapes taking turns",
                "prefill_receipts": options.prefill,
                "batches": options.batches,
                "shapes": {
                    side.name: {
                        "cpu_ms_per_commit": round(statistics.median(side.cpu) * 1000, 3),
                        "wall_ms_per_commit": round(statistics.median(side.wall) * 1000, 3),
                    }
                    for side in sides
                },
                "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        finally:
            for side in sides:
                side.store.close()
    shapes = report["shapes"]
    for name in ("cpu_ms_per_commit", "wall_ms_per_commit"):
        report[f"random_over_ordered_{name}"] = round(
            shapes["random"][name] / shapes["ordered"][name], 2
        )
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
