"""In-process micro-benchmark of the worker's hot path: thread CPU per episode.

No gRPC and no event loop: the seeded MockMed worker's ``Scorer`` (its bundle, SQL oracle and a
fresh durable SQLite store, WAL + ``synchronous=FULL``) begins a batch of episodes
(``Scorer._begin_batch``: baseline reads, one store transaction) and scores them
(``Scorer.score_jobs_sync``: lookup, read, judge, sign, one durable commit), in this thread.
Per batch size, the median over the batches of ``time.thread_time()`` per episode, for the
begin and the score apart. ``--profile cumtime`` prints a cProfile (thread CPU) instead.

Run by hand (``make bench`` does not): ``.venv/bin/python bench/hot_path_micro.py --sizes 64,8,1``.
Seeding takes a few seconds; ``--store-url`` puts the store elsewhere (PostgreSQL).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import make_begin, make_descriptor
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.engine import ScoreJob, Scorer
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.seed import seed_mockmed
from rewardseal_worker.store import WorkerStore


class Bench:
    """A seeded scorer and a counter of fresh episode ids."""

    def __init__(self, workdir: Path, store_url: str) -> None:
        key = SigningKey.load_or_create(workdir / "worker.key")
        seeded = seed_mockmed(workdir / "data", key=key)
        bundle = load_bundle(seeded.tier2_bundle_dir, trust=TrustSet([key.public_key]))
        self.store = WorkerStore(store_url or f"sqlite:///{workdir / 'store.db'}")
        self.scorer = Scorer(
            bundle=bundle, store=self.store, reader=make_reader(bundle.recipe, bundle.path), key=key
        )
        self.digest = bundle.contract_digest
        self.counter = itertools.count()

    def round(self, size: int) -> tuple[float, float]:
        """Begin and score ``size`` fresh episodes; thread CPU seconds per episode of each."""
        ids = [f"episode.micro-{next(self.counter):09d}" for _ in range(size)]
        jobs = [
            self.scorer.begin_job(make_begin(e, self.digest, {"patient_id": f"patient-m-{i:03d}"}))
            for i, e in enumerate(ids)
        ]
        started = time.thread_time()
        begun = self.scorer._begin_batch(jobs)
        begin_cpu = time.thread_time() - started
        if any(isinstance(outcome, Exception) for outcome in begun):
            raise SystemExit(f"a begin failed: {begun[:3]}")
        scoring = [
            ScoreJob(
                make_descriptor(
                    episode_id=e,
                    policy_checkpoint_id="ckpt.micro",
                    policy_update=1,
                    reward_contract_digest=self.digest,
                )
            )
            for e in ids
        ]
        started = time.thread_time()
        scored = self.scorer.score_jobs_sync(scoring)
        score_cpu = time.thread_time() - started
        if any(isinstance(outcome, Exception) for outcome in scored):
            raise SystemExit(f"a score failed: {scored[:3]}")
        return begin_cpu / size, score_cpu / size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,8,1", help="batch sizes, comma-separated")
    parser.add_argument("--batches", type=int, default=0, help="per size (default 30 or 300)")
    parser.add_argument("--store-url", default="", help="default: a fresh SQLite file")
    parser.add_argument("--profile", default="", help="cProfile sort key; first size only")
    parser.add_argument("--callers", default="", help="with --profile: who calls these")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="rewardseal-micro-") as scratch:
        bench = Bench(Path(scratch), options.store_url)
        try:
            for size in sizes:
                batches = options.batches or (30 if size >= 32 else 300)
                for _ in range(3):  # warm-up: pools, statement caches
                    bench.round(size)
                if options.profile:
                    profile = cProfile.Profile(time.thread_time)
                    for _ in range(batches):
                        profile.runcall(bench.round, size)
                    stats = pstats.Stats(profile).sort_stats(options.profile)
                    stats.print_stats(40)
                    if options.callers:
                        stats.print_callers(options.callers)
                    return
                rounds = [bench.round(size) for _ in range(batches)]
                begin = statistics.median(b for b, _ in rounds) * 1000
                score = statistics.median(s for _, s in rounds) * 1000
                total = statistics.median(b + s for b, s in rounds) * 1000
                print(
                    f"batch {size:4d} x{batches}: begin {begin:.3f}  score {score:.3f}  "
                    f"total {total:.3f} ms thread CPU per episode",
                    flush=True,
                )
        finally:
            bench.store.close()


if __name__ == "__main__":
    main()
