"""Worker throughput and latency through the real server (``make bench``; not a test).

Starts ``rewardseal-worker serve --seed-mockmed`` as its own process on a free loopback port
(durable SQLite receipt store, synchronous=FULL) and drives it from this process with grpc.aio:

- batched: 8 concurrent clients, each: one BeginEpisodes(64), write their rows, one
  ScoreEpisodes(64);
- unary at concurrency 1, 8 and 64: begin, write the row, ScoreEpisode;
- the same unary run against a system of record of 10 rows and of 50,000 rows;
- bytes on disk per receipt.

Every number is wall-clock on this machine, with client and server sharing its cores. Results
go to bench/results/worker.json (medians and p99 in milliseconds, episodes per second).

``--processes 1,2`` measures ``serve --processes N`` instead: for each N, on SQLite and on a
throwaway PostgreSQL (tests/support/postgres.py), unary at concurrency 64 and the batched run,
every caller on a connection of its own, plus the children's CPU per episode; results in
bench/results/worker_processes.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal_mockmed.seeding import add_background_rows, count_encounters

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "worker.json"
PROCESSES_RESULTS = ROOT / "bench" / "results" / "worker_processes.json"
WORKER = Path(sys.executable).parent / "rewardseal-worker"
BATCH = 64
BATCH_CLIENTS = 8


@dataclass
class Worker:
    """A worker process and what the bench needs to call it."""

    process: subprocess.Popen[bytes]
    info: dict[str, Any]
    data_dir: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.info['port']}"

    @property
    def database(self) -> Path:
        return self.data_dir / "mockmed" / "mockmed.sqlite"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_worker(
    data_dir: Path,
    *,
    seed: bool,
    processes: int = 1,
    db_url: str | None = None,
    extra_args: Sequence[str] = (),
) -> Worker:
    """Start the worker process (``processes`` > 1: a supervisor and its children) and wait for
    its ready file; ``extra_args`` go to ``serve`` as they are."""
    ready = data_dir.parent / f"ready-{os.getpid()}-{time.monotonic_ns()}.json"
    args = [str(WORKER), "serve", "--data-dir", str(data_dir), "--port", "0"]
    args += ["--ready-file", str(ready)] + (["--seed-mockmed"] if seed else [])
    args += ["--processes", str(processes)] + (["--db-url", db_url] if db_url else [])
    args += list(extra_args)
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the worker did not start")
        time.sleep(0.05)
    return Worker(process, json.loads(ready.read_text()), data_dir)


def write_rows(database: Path, patients: Sequence[str]) -> None:
    """The policy's writes for a group of episodes: one Triage row each, one transaction."""
    with sqlite3.connect(database, timeout=30) as conn:
        conn.executemany(
            "INSERT INTO encounters (id, patient_id, type, note, status) VALUES (?, ?, ?, ?, ?)",
            [(f"enc-{p}", p, "Triage", "Follow-up in 2 weeks.", "open") for p in patients],
        )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def summary(latencies: Sequence[float], episodes: int, seconds: float) -> dict[str, float]:
    """Episodes per second and latency quantiles in milliseconds."""
    return {
        "episodes": episodes,
        "seconds": round(seconds, 3),
        "episodes_per_second": round(episodes / seconds, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(percentile(latencies, 99) * 1000, 2),
    }


class Load:
    """Drives one worker with raw stubs (the client's receipt verification is measured apart)."""

    def __init__(self, worker: Worker, run: str, *, connections: int = 1) -> None:
        """``connections``: callers are spread over this many connections of their own (gRPC
        otherwise shares one among a process's channels, and the kernel gives each connection
        to one server process of ``serve --processes N``)."""
        self.worker = worker
        self.run = run
        self.connections = connections
        self.digest = worker.info["contract_digest"]
        self.metadata = (("authorization", f"Bearer {worker.info['token']}"),)
        self.counter = 0

    def next_ids(self, count: int) -> list[str]:
        ids = [f"{self.run}-{self.counter + i:07d}" for i in range(count)]
        self.counter += count
        return ids

    def descriptor(self, name: str) -> Any:
        return make_descriptor(
            episode_id=f"episode.{name}",
            policy_checkpoint_id="policy.checkpoint.bench",
            policy_update=1,
            reward_contract_digest=self.digest,
        )

    async def begin(self, stub: pb_grpc.RewardWorkerServiceStub, name: str) -> None:
        await stub.BeginEpisode(
            pb.BeginEpisodeRequest(
                episode_id=f"episode.{name}",
                reward_contract_digest=self.digest,
                oracle_identity={"patient_id": f"patient-{name}"},
            ),
            metadata=self.metadata,
            timeout=60,
        )

    async def begin_many(self, stub: pb_grpc.RewardWorkerServiceStub, names: list[str]) -> None:
        """One ``BeginEpisodes`` call for ``names`` (the issue's batched workload); every item
        must be registered."""
        answer = await stub.BeginEpisodes(
            pb.BeginEpisodesRequest(
                items=[
                    pb.BeginEpisodeRequest(
                        episode_id=f"episode.{name}",
                        reward_contract_digest=self.digest,
                        oracle_identity={"patient_id": f"patient-{name}"},
                    )
                    for name in names
                ]
            ),
            metadata=self.metadata,
            timeout=120,
        )
        refused = [r.error.reason for r in answer.results if not r.HasField("begun")]
        if refused:
            raise SystemExit(f"BeginEpisodes refused {len(refused)} items: {refused[:3]}")

    def channels(self) -> list[grpc.aio.Channel]:
        """:attr:`connections` channels to the worker, each on its own connection."""
        options = [("grpc.use_local_subchannel_pool", 1)] if self.connections > 1 else []
        return [
            grpc.aio.insecure_channel(self.worker.target, options=options)
            for _ in range(self.connections)
        ]

    async def unary(self, concurrency: int, per_task: int) -> dict[str, Any]:
        channels = self.channels()
        stubs = [pb_grpc.RewardWorkerServiceStub(c) for c in channels]
        score_latency: list[float] = []
        episode_latency: list[float] = []
        outcomes: dict[str, int] = {}

        async def task(stub: pb_grpc.RewardWorkerServiceStub) -> None:
            for _ in range(per_task):
                (name,) = self.next_ids(1)
                started = time.perf_counter()
                await self.begin(stub, name)
                await asyncio.to_thread(write_rows, self.worker.database, [f"patient-{name}"])
                scored = time.perf_counter()
                answer = await stub.ScoreEpisode(
                    pb.ScoreEpisodeRequest(descriptor=self.descriptor(name)),
                    metadata=self.metadata,
                    timeout=60,
                )
                done = time.perf_counter()
                score_latency.append(done - scored)
                episode_latency.append(done - started)
                outcomes["unscored" if answer.envelope.unscored else "scored"] = (
                    outcomes.get("unscored" if answer.envelope.unscored else "scored", 0) + 1
                )

        started = time.perf_counter()
        await asyncio.gather(*(task(stubs[i % len(stubs)]) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(c.close() for c in channels))
        result = summary(episode_latency, concurrency * per_task, elapsed)
        result["score_p50_ms"] = round(statistics.median(score_latency) * 1000, 2)
        result["score_p99_ms"] = round(percentile(score_latency, 99) * 1000, 2)
        result["concurrency"] = concurrency
        result["outcomes"] = outcomes
        return result

    async def batched(self, clients: int, batches: int) -> dict[str, Any]:
        channels = self.channels()
        stubs = [pb_grpc.RewardWorkerServiceStub(c) for c in channels]
        latencies: list[float] = []
        score_latencies: list[float] = []
        verified = 0

        async def client(stub: pb_grpc.RewardWorkerServiceStub) -> None:
            nonlocal verified
            for _ in range(batches):
                names = self.next_ids(BATCH)
                started = time.perf_counter()
                await self.begin_many(stub, names)
                await asyncio.to_thread(
                    write_rows, self.worker.database, [f"patient-{n}" for n in names]
                )
                scored = time.perf_counter()
                answer = await stub.ScoreEpisodes(
                    pb.ScoreEpisodesRequest(descriptors=[self.descriptor(n) for n in names]),
                    metadata=self.metadata,
                    timeout=120,
                )
                done = time.perf_counter()
                latencies.append(done - started)
                score_latencies.append(done - scored)
                verified += sum(1 for r in answer.results if r.HasField("envelope"))

        started = time.perf_counter()
        await asyncio.gather(*(client(stubs[i % len(stubs)]) for i in range(clients)))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(c.close() for c in channels))
        result = summary(latencies, clients * batches * BATCH, elapsed)
        result["batch_score_p50_ms"] = round(statistics.median(score_latencies) * 1000, 2)
        result["receipts"] = verified
        result["clients"] = clients
        result["batch_size"] = BATCH
        return result


def receipt_bytes(data_dir: Path) -> dict[str, float]:
    """Bytes on disk per receipt: the store file after a WAL checkpoint, over its receipts."""
    store = data_dir / "worker.sqlite"
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        receipts = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
        payload = conn.execute(
            "SELECT AVG(LENGTH(envelope)), AVG(LENGTH(evidence)) FROM receipts"
        ).fetchone()
    size = store.stat().st_size
    return {
        "receipts": receipts,
        "store_bytes": size,
        "bytes_per_receipt": round(size / max(receipts, 1), 1),
        "envelope_bytes_avg": round(payload[0] or 0, 1),
        "evidence_bytes_avg": round(payload[1] or 0, 1),
    }


async def sor_size(template: Path, workdir: Path, rows: int, episodes: int) -> dict[str, Any]:
    """Unary Begin+Score at concurrency 8 against a SoR holding ``rows`` background rows."""
    data_dir = workdir / f"sor-{rows}"
    shutil.copytree(template, data_dir)
    database = data_dir / "mockmed" / "mockmed.sqlite"
    with sqlite3.connect(database) as conn:
        conn.execute("DELETE FROM encounters")
    if rows:
        add_background_rows(database, rows, seed=7)
    worker = start_worker(data_dir, seed=False)
    try:
        result = await Load(worker, f"sor{rows}").unary(8, episodes // 8)
    finally:
        worker.stop()
    result["sor_rows"] = count_encounters(database) - episodes
    return result


async def main(quick: bool) -> dict[str, Any]:
    scale = 0.25 if quick else 1.0
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-bench-"))
    try:
        template = workdir / "template"
        seeded = start_worker(template, seed=True)
        seeded.stop()
        results: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "store": "SQLite, WAL, synchronous=FULL",
        }
        main_dir = workdir / "main"
        shutil.copytree(template, main_dir)
        worker = start_worker(main_dir, seed=False)
        try:
            load = Load(worker, "main")
            await load.unary(8, 8)  # warm-up, not reported
            results["batched"] = await with_server_cpu(
                worker, lambda: load.batched(BATCH_CLIENTS, max(1, int(8 * scale)))
            )
            results["unary"] = {}
            for c, n in ((1, 300), (8, 150), (64, 24)):
                results["unary"][f"c{c}"] = await with_server_cpu(
                    worker, lambda c=c, n=n: load.unary(c, max(2, int(n * scale)))
                )
        finally:
            worker.stop()
        results["disk"] = receipt_bytes(main_dir)
        episodes = max(80, int(800 * scale))
        small = await sor_size(template, workdir, 10, episodes)
        large = await sor_size(template, workdir, 50_000, episodes)
        results["sor_size"] = {
            "rows_10": small,
            "rows_50000": large,
            "cost_ratio_p50": round(large["score_p50_ms"] / small["score_p50_ms"], 3),
            "throughput_ratio": round(
                small["episodes_per_second"] / large["episodes_per_second"], 3
            ),
        }
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def server_cpu_seconds(worker: Worker) -> float:
    """CPU seconds used so far by the worker's server processes (its children when it has
    them), from /proc; 0.0 where there is no /proc."""
    total = 0.0
    for pid in worker.info.get("pids", [worker.process.pid]):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def with_server_cpu(
    worker: Worker, run: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """``run()``'s result with ``server_cpu_ms_per_episode``: the worker's CPU while it ran."""
    before = server_cpu_seconds(worker)
    measured = await run()
    used = server_cpu_seconds(worker) - before
    measured["server_cpu_ms_per_episode"] = round(used * 1000 / measured["episodes"], 3)
    return measured


async def processes_run(
    template: Path, workdir: Path, processes: int, db_url: str | None, scale: float
) -> dict[str, Any]:
    """``serve --processes N`` over a copy of the seeded data dir: unary c64 and batched, each
    caller group on its own connection, with the server CPU per episode."""
    data_dir = workdir / f"processes-{processes}-{time.monotonic_ns()}"
    shutil.copytree(template, data_dir)
    worker = start_worker(data_dir, seed=False, processes=processes, db_url=db_url)
    try:
        load = Load(worker, f"p{processes}", connections=BATCH_CLIENTS)
        await load.unary(8, 4)  # warm-up, not reported
        result: dict[str, Any] = {}
        for mode, run in (
            ("unary_c64", lambda: load.unary(64, max(2, int(24 * scale)))),
            ("batched", lambda: load.batched(BATCH_CLIENTS, max(1, int(8 * scale)))),
        ):
            result[mode] = await with_server_cpu(worker, run)
        return result
    finally:
        worker.stop()


async def processes_bench(quick: bool, counts: Sequence[int]) -> dict[str, Any]:
    """Each process count in ``counts`` on SQLite and on PostgreSQL."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.postgres import PostgresServer

    scale = 0.25 if quick else 1.0
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-bench-"))
    postgres = PostgresServer()
    postgres.start()
    try:
        template = workdir / "template"
        start_worker(template, seed=True).stop()
        results: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "connections": BATCH_CLIENTS,
        }
        for store in ("sqlite", "postgresql"):
            results[store] = {}
            for count in counts:
                url = None if store == "sqlite" else postgres.url(postgres.create_database())
                results[store][f"processes_{count}"] = await processes_run(
                    template, workdir, count, url, scale
                )
            first = results[store][f"processes_{counts[0]}"]
            results[store]["scaling"] = {
                mode: {
                    f"processes_{count}": round(
                        results[store][f"processes_{count}"][mode]["episodes_per_second"]
                        / first[mode]["episodes_per_second"],
                        3,
                    )
                    for count in counts
                }
                for mode in ("unary_c64", "batched")
            }
        return results
    finally:
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_bench(
    bench: Callable[[bool], Awaitable[dict[str, Any]]], description: str | None, default_out: Path
) -> None:
    """The command line of a bench script: run ``bench`` (``--quick``: a quarter of the work),
    stamp the report, write it to ``--out`` and print it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a quarter of the work")
    parser.add_argument("--out", type=Path, default=default_out)
    options = parser.parse_args()
    report = asyncio.run(bench(options.quick))
    report["generated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    # --processes picks the other bench; run_bench parses the rest (--quick, --out).
    found = argparse.ArgumentParser(add_help=False)
    found.add_argument("--processes", help="comma-separated process counts, e.g. 1,2")
    option, rest = found.parse_known_args()
    sys.argv[1:] = rest
    if option.processes:
        counts = [int(n) for n in option.processes.split(",")]
        run_bench(lambda quick: processes_bench(quick, counts), __doc__, PROCESSES_RESULTS)
    else:
        run_bench(main, __doc__, RESULTS)
