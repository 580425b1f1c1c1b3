"""What the certified reward adds to a trainer step (``make bench``; not a test).

The TRL reward function (``rewardseal.trainers.trl.CertifiedRewardFunction``) is called exactly
as TRL 1.16 calls it, against real processes: ``rewardseal-worker serve --seed-mockmed`` (tier-2
sql oracle over the seeded MockMed SQLite database, durable SQLite receipt store) and
``rewardseal-mockmed serve`` over that same database.

- ``score_only``: the rollout already ran (BeginEpisode and the policy's row written before the
  call, outside the timing); the reward function scores the batch in one ``ScoreEpisodes``,
  verifies every receipt, fills and builds the metadata columns. What a trainer whose rollout
  talks to the worker itself pays per step.
- ``actor.sync`` / ``actor.async``: the reward function runs the episodes: per completion a
  BeginEpisode and the completion's action report executed through MockMed's REST API (the
  ``MockMedActor``), then one ``ScoreEpisodes``. The blocking path does them one after another;
  the asyncio variant (``as_async()``, TRL's concurrent path) overlaps them.

Batches of 8 and 64 completions (groups of 8, every completion the gold write). Results go to
bench/results/trainer.json: median and p99 per batch and per completion, in milliseconds, and the
async/sync ratio.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from stack_bench import mockmed  # noqa: E402
from worker_bench import Worker, percentile, run_bench, start_worker, write_rows  # noqa: E402

from rewardseal.core.signing import TrustSet  # noqa: E402
from rewardseal.rpc.worker_client import AsyncWorkerClient, WorkerClient  # noqa: E402
from rewardseal.trainers.trl import CertifiedRewardFunction  # noqa: E402
from rewardseal_kit.actors import MockMedActor  # noqa: E402
from rewardseal_kit.extradup import CONTROL, mockmed_write_spec, scripted_completion  # noqa: E402
from rewardseal_kit.mockmed import IDENTITY_KEY  # noqa: E402

RESULTS = BENCH / "results" / "trainer.json"
GROUP = 8
BATCHES = (8, 64)
CHECKPOINT = "policy.checkpoint.bench"


class State:
    """The one field of TRL's TrainerState the reward function reads."""

    def __init__(self, step: int) -> None:
        self.global_step = step


class Bench:
    """One worker, one MockMed, and a fresh set of patients for every batch."""

    def __init__(self, worker: Worker, url: str, token: str) -> None:
        self.worker = worker
        self.url = url
        self.token = token
        self.trust = TrustSet([bytes.fromhex(worker.info["public_key"])])
        self.digest = str(worker.info["contract_digest"])
        self.counter = 0

    def patients(self, count: int, tag: str) -> list[str]:
        names = [f"patient-bench-{tag}-{self.counter + i:07d}" for i in range(count)]
        self.counter += count
        return names

    def client(self) -> WorkerClient:
        """A blocking client pinned to the worker's key."""
        return WorkerClient(self.worker.target, token=self.worker.info["token"], trust=self.trust)

    def function(self, client: WorkerClient, actor: MockMedActor | None) -> CertifiedRewardFunction:
        return CertifiedRewardFunction(
            client,
            reward_contract_digest=self.digest,
            policy_checkpoint_id=CHECKPOINT,
            num_generations=GROUP,
            actor=actor,
            policy_update=0,
        )

    def score_only(self, size: int, repeats: int) -> list[float]:
        """Per-batch seconds of the reward call when the rollout already began and acted."""
        timings: list[float] = []
        with WorkerClient(
            self.worker.target, token=self.worker.info["token"], trust=self.trust
        ) as client:
            function = self.function(client, None)
            for _ in range(repeats):
                patients = self.patients(size, "score")
                ids = [f"episode.bench.{name}" for name in patients]
                for episode_id, patient in zip(ids, patients, strict=True):
                    client.begin(episode_id, self.digest, {IDENTITY_KEY: patient})
                write_rows(self.worker.database, patients)
                started = time.perf_counter()
                rewards = function(
                    prompts=["p"] * size,
                    completions=["c"] * size,
                    episode_id=ids,
                    oracle_identity=[{IDENTITY_KEY: p} for p in patients],
                    trainer_state=State(0),
                )
                timings.append(time.perf_counter() - started)
                assert rewards == [1.0] * size, rewards
        return timings

    def _actor_kwargs(self, size: int) -> dict[str, Any]:
        # One row per group, copied to its GROUP completions as TRL does.
        rows = self.patients(size // GROUP, "actor")
        return {
            "prompts": ["Create the triage encounter."] * size,
            "completions": [
                scripted_completion(CONTROL, mockmed_write_spec(row))
                for row in rows
                for _ in range(GROUP)
            ],
            "oracle_identity": [{IDENTITY_KEY: row} for row in rows for _ in range(GROUP)],
            "episode_id": [f"row-{row}" for row in rows for _ in range(GROUP)],
            "trainer_state": State(0),
        }

    def actor_sync(self, size: int, repeats: int) -> list[float]:
        """Per-batch seconds of the reward call running the episodes, blocking path."""
        timings: list[float] = []
        actor = MockMedActor(self.url, self.token)
        with WorkerClient(
            self.worker.target, token=self.worker.info["token"], trust=self.trust
        ) as client:
            function = self.function(client, actor)
            for _ in range(repeats):
                kwargs = self._actor_kwargs(size)
                started = time.perf_counter()
                rewards = function(**kwargs)
                timings.append(time.perf_counter() - started)
                assert rewards == [1.0] * size, function.metadata_columns()
        return timings

    async def actor_async(self, size: int, repeats: int) -> list[float]:
        """Per-batch seconds of the reward call running the episodes, asyncio path."""
        timings: list[float] = []
        actor = MockMedActor(self.url, self.token)
        token = self.worker.info["token"]
        with self.client() as client:
            async_client = AsyncWorkerClient(self.worker.target, token=token, trust=self.trust)
            function = self.function(client, actor).as_async(async_client)
            try:
                for _ in range(repeats):
                    kwargs = self._actor_kwargs(size)
                    started = time.perf_counter()
                    rewards = await function(**kwargs)
                    timings.append(time.perf_counter() - started)
                    assert rewards == [1.0] * size, function.metadata_columns()
            finally:
                await async_client.close()
        return timings


def per_batch(timings: Sequence[float], size: int) -> dict[str, float]:
    """Median and p99 per batch, and the median per completion, in milliseconds."""
    median = statistics.median(timings)
    return {
        "batches": len(timings),
        "batch_p50_ms": round(median * 1000, 2),
        "batch_p99_ms": round(percentile(timings, 99) * 1000, 2),
        "per_completion_p50_ms": round(median * 1000 / size, 3),
    }


async def measure(bench: Bench, repeats: Callable[[int], int]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size in BATCHES:
        score = await asyncio.to_thread(bench.score_only, size, repeats(size))
        sync = await asyncio.to_thread(bench.actor_sync, size, repeats(size))
        overlapped = await bench.actor_async(size, repeats(size))
        results[f"batch_{size}"] = {
            "score_only": per_batch(score, size),
            "actor": {
                "sync": per_batch(sync, size),
                "async": per_batch(overlapped, size),
                "async_over_sync_p50": round(
                    statistics.median(overlapped) / statistics.median(sync), 3
                ),
            },
        }
    return results


async def main(quick: bool) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-trainer-bench-"))
    try:
        worker = start_worker(workdir / "data", seed=True)
        try:
            with mockmed(worker.data_dir) as (url, token):
                bench = Bench(worker, url, token)
                scale = 0.25 if quick else 1.0

                def repeats(size: int) -> int:
                    return max(3, round((240 if size == 8 else 40) * scale / 4))

                return {
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "quick": quick,
                    "worker": "sql oracle over SQLite, durable SQLite receipt store, own process",
                    "mockmed": "rewardseal-mockmed over the same SQLite database, own process",
                    "group_size": GROUP,
                    **await measure(bench, repeats),
                }
        finally:
            worker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_bench(main, __doc__, RESULTS)
