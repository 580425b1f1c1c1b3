"""The full stack: the worker reading MockMed over sql and over rest, and three replicas on one
PostgreSQL receipt store (``make bench``; not a test).

Every process is real: ``rewardseal-mockmed serve`` over the seeded MockMed SQLite database,
``rewardseal-worker serve`` over a copy of the seeded data dir, and (for the replicas) a
throwaway PostgreSQL cluster from tests/support/postgres.py. The policy's writes go through
MockMed's REST API (``POST /api/encounters``) in every mode; the worker is driven with grpc.aio
raw stubs, as in worker_bench.py, whose helpers this script reuses.

- ``oracle.sql`` / ``oracle.rest``: the seeded bundle (sql recipe, SQLite file) vs a tier-2
  API-channel bundle whose recipe is ``rest`` (MockMed's URL and token in the variables the
  recipe names); unary at concurrency 8 and batched (ScoreEpisodes of 64, 4 clients);
- ``replicas``: one and three workers over one data dir and one PostgreSQL database, episodes
  round-robin over the replicas (begin and score on the same one); unary at concurrency 8 and
  batched; ``scaling`` = 3-replica episodes/s over 1-replica episodes/s.

Results go to bench/results/stack.json (medians and p99 in milliseconds, episodes per second).
"""

from __future__ import annotations

import asyncio
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx

from rewardseal_server.localstack import NotReady, wait_for_banner

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from support.postgres import PostgresServer  # noqa: E402
from worker_bench import (  # noqa: E402
    BATCH,
    WORKER,
    Load,
    Worker,
    percentile,
    run_bench,
    start_worker,
    summary,
)

from rewardseal.core.digest import digest_json  # noqa: E402
from rewardseal.v1 import worker_service_pb2 as pb  # noqa: E402
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc  # noqa: E402
from rewardseal.v1.enums_pb2 import OracleChannel  # noqa: E402
from rewardseal_kit.mockmed import (  # noqa: E402
    FORBIDDEN_EFFECTS,
    IDENTITY_KEY,
    REQUIRED_EFFECTS,
    mockmed_contract,
)
from rewardseal_server.sqlstore import sqlite_url  # noqa: E402
from rewardseal_worker.bundle import write_bundle  # noqa: E402

RESULTS = BENCH / "results" / "stack.json"
MOCKMED = Path(sys.executable).parent / "rewardseal-mockmed"
URL_ENV = "RS_BENCH_MOCKMED_URL"
TOKEN_ENV = "RS_BENCH_MOCKMED_TOKEN"
REST_RECIPE: dict[str, Any] = {
    "kind": "rest",
    "base_url_env": URL_ENV,
    "token_env": TOKEN_ENV,
    "path": "/api/encounters",
    "collection": "encounters",
    "identity_params": {IDENTITY_KEY: "patient_id"},
    # Generous: a timeout under load would score FAILED_PLATFORM and hide the read's cost.
    "timeout_seconds": 30.0,
}
BATCH_CLIENTS = 4
CONCURRENCY = 8
REPLICAS = 3


def write_rest_bundle(data_dir: Path) -> Path:
    """A tier-2 API-channel MockMed bundle whose recipe is ``rest``; return its directory.

    Not the seeded ``contracts/mockmed-rest``: this recipe's read timeout is generous on purpose.
    """
    contract = mockmed_contract()
    contract.contract_id = "mockmed.triage-create.tier2-rest"
    contract.oracle.channel = OracleChannel.ORACLE_CHANNEL_API
    contract.oracle.oracle_recipe_digest = digest_json(REST_RECIPE)
    bundle = data_dir / "contracts" / "mockmed-rest-bench"
    write_bundle(
        bundle,
        contract=contract,
        required_doc=REQUIRED_EFFECTS,
        forbidden_doc=FORBIDDEN_EFFECTS,
        recipe_doc=REST_RECIPE,
    )
    return bundle


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, what: str) -> dict[str, Any]:
    try:
        return wait_for_banner(process, ready, 120)
    except NotReady:
        process.kill()
        raise SystemExit(f"{what} did not start") from None


def _ready_file(data_dir: Path, what: str) -> Path:
    return data_dir.parent / f"ready-{what}-{os.getpid()}-{time.monotonic_ns()}.json"


def spawn_worker(data_dir: Path, extra: Sequence[str], env: dict[str, str]) -> Any:
    """Start ``rewardseal-worker serve`` with more arguments; return (process, ready file)."""
    ready = _ready_file(data_dir, "worker")
    args = [str(WORKER), "serve", "--data-dir", str(data_dir), "--port", "0"]
    args += ["--ready-file", str(ready), *extra]
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env}
    )
    return process, ready


def start_workers(
    data_dir: Path, count: int, extra: Sequence[str] = (), env: dict[str, str] | None = None
) -> list[Worker]:
    """``count`` workers over one data dir: the first alone (schema), the others together."""
    env = env or {}
    process, ready = spawn_worker(data_dir, extra, env)
    workers = [Worker(process, _wait_ready(process, ready, "the worker"), data_dir)]
    spawned = [spawn_worker(data_dir, extra, env) for _ in range(count - 1)]
    for process, ready in spawned:
        workers.append(Worker(process, _wait_ready(process, ready, "a worker"), data_dir))
    return workers


@contextmanager
def mockmed(data_dir: Path) -> Iterator[tuple[str, str]]:
    """``rewardseal-mockmed serve`` over the data dir's MockMed database: (url, token)."""
    token = secrets.token_urlsafe(24)
    ready = _ready_file(data_dir, "mockmed")
    database = data_dir / "mockmed" / "mockmed.sqlite"
    args = [str(MOCKMED), "serve", "--db-url", sqlite_url(database), "--port", "0"]
    args += ["--ready-file", str(ready)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCKMED_")}
    log = open(data_dir.parent / f"{data_dir.name}-mockmed.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, env={**env, "MOCKMED_TOKEN": token}
    )
    try:
        info = _wait_ready(process, ready, "MockMed")
        yield str(info["url"]), token
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


class StackLoad(Load):
    """worker_bench's Load over several replicas, the writes through MockMed's REST API."""

    def __init__(self, workers: Sequence[Worker], run: str, url: str, token: str) -> None:
        super().__init__(workers[0], run)
        self.workers = list(workers)
        self.url = url
        self.token = token
        self.turn = 0

    def stubs(self) -> tuple[list[grpc.aio.Channel], list[pb_grpc.RewardWorkerServiceStub]]:
        channels = [grpc.aio.insecure_channel(w.target) for w in self.workers]
        return channels, [pb_grpc.RewardWorkerServiceStub(c) for c in channels]

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60.0,
            # Under uvicorn's 5 s keep-alive: a connection the server is closing is never reused.
            limits=httpx.Limits(max_connections=64, keepalive_expiry=2.0),
        )

    def pick(self, stubs: Sequence[pb_grpc.RewardWorkerServiceStub]) -> Any:
        """The next replica, round-robin."""
        stub = stubs[self.turn % len(stubs)]
        self.turn += 1
        return stub

    @staticmethod
    async def write(http: httpx.AsyncClient, name: str) -> None:
        """The policy's write for one episode: one Triage encounter through the REST API."""
        response = await http.post(
            "/api/encounters",
            json={
                "patient_id": f"patient-{name}",
                "type": "Triage",
                "note": "Follow-up in 2 weeks.",
                "status": "open",
            },
        )
        if response.status_code != 201:
            raise SystemExit(f"MockMed refused the write: HTTP {response.status_code}")

    async def unary(self, concurrency: int, per_task: int) -> dict[str, Any]:
        channels, stubs = self.stubs()
        score_latency: list[float] = []
        write_latency: list[float] = []
        episode_latency: list[float] = []
        outcomes: dict[str, int] = {}

        async def task(http: httpx.AsyncClient) -> None:
            for _ in range(per_task):
                (name,) = self.next_ids(1)
                stub = self.pick(stubs)
                started = time.perf_counter()
                await self.begin(stub, name)
                written = time.perf_counter()
                await self.write(http, name)
                scored = time.perf_counter()
                write_latency.append(scored - written)
                answer = await stub.ScoreEpisode(
                    pb.ScoreEpisodeRequest(descriptor=self.descriptor(name)),
                    metadata=self.metadata,
                    timeout=60,
                )
                done = time.perf_counter()
                score_latency.append(done - scored)
                episode_latency.append(done - started)
                key = "unscored" if answer.envelope.unscored else "scored"
                outcomes[key] = outcomes.get(key, 0) + 1

        async with self.http() as http:
            started = time.perf_counter()
            await asyncio.gather(*(task(http) for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
        for channel in channels:
            await channel.close()
        result = summary(episode_latency, concurrency * per_task, elapsed)
        result["score_p50_ms"] = round(statistics.median(score_latency) * 1000, 2)
        result["score_p99_ms"] = round(percentile(score_latency, 99) * 1000, 2)
        result["write_p50_ms"] = round(statistics.median(write_latency) * 1000, 2)
        result["concurrency"] = concurrency
        result["outcomes"] = outcomes
        return result

    async def batched(self, clients: int, batches: int) -> dict[str, Any]:
        channels, stubs = self.stubs()
        latencies: list[float] = []
        score_latencies: list[float] = []
        write_latencies: list[float] = []
        outcomes: dict[str, int] = {}

        async def client(http: httpx.AsyncClient) -> None:
            for _ in range(batches):
                names = self.next_ids(BATCH)
                stub = self.pick(stubs)
                started = time.perf_counter()
                await asyncio.gather(*(self.begin(stub, n) for n in names))
                written = time.perf_counter()
                await asyncio.gather(*(self.write(http, n) for n in names))
                scored = time.perf_counter()
                write_latencies.append(scored - written)
                answer = await stub.ScoreEpisodes(
                    pb.ScoreEpisodesRequest(descriptors=[self.descriptor(n) for n in names]),
                    metadata=self.metadata,
                    timeout=120,
                )
                done = time.perf_counter()
                latencies.append(done - started)
                score_latencies.append(done - scored)
                for r in answer.results:
                    if not r.HasField("envelope"):
                        key = "error"
                    else:
                        key = "unscored" if r.envelope.unscored else "scored"
                    outcomes[key] = outcomes.get(key, 0) + 1

        async with self.http() as http:
            started = time.perf_counter()
            await asyncio.gather(*(client(http) for _ in range(clients)))
            elapsed = time.perf_counter() - started
        for channel in channels:
            await channel.close()
        result = summary(latencies, clients * batches * BATCH, elapsed)
        result["batch_score_p50_ms"] = round(statistics.median(score_latencies) * 1000, 2)
        result["batch_write_p50_ms"] = round(statistics.median(write_latencies) * 1000, 2)
        result["clients"] = clients
        result["batch_size"] = BATCH
        result["outcomes"] = outcomes
        return result


async def measure(load: StackLoad, scale: float) -> dict[str, Any]:
    """Warm-up, then batched (64 x 4 clients) and unary at concurrency 8."""
    await load.unary(CONCURRENCY, 4)  # warm-up, not reported
    return {
        "batched": await load.batched(BATCH_CLIENTS, max(1, int(8 * scale))),
        "unary_c8": await load.unary(CONCURRENCY, max(4, int(100 * scale))),
    }


def stop_all(workers: Sequence[Worker]) -> None:
    for worker in workers:
        worker.stop()


async def oracle_modes(template: Path, workdir: Path, scale: float) -> dict[str, Any]:
    """The seeded sql bundle vs the rest bundle, each over a fresh copy of the seeded data."""
    results: dict[str, Any] = {}
    for kind in ("sql", "rest"):
        data_dir = workdir / f"oracle-{kind}"
        shutil.copytree(template, data_dir)
        extra: list[str] = []
        with mockmed(data_dir) as (url, token):
            env = {URL_ENV: url, TOKEN_ENV: token}
            if kind == "rest":
                extra = ["--contract", str(write_rest_bundle(data_dir))]
            workers = start_workers(data_dir, 1, extra, env)
            try:
                results[kind] = await measure(StackLoad(workers, kind, url, token), scale)
            finally:
                stop_all(workers)
        results[kind]["oracle_tier"] = workers[0].info.get("oracle_tier")
    results["rest_over_sql"] = {
        mode: {
            "throughput_ratio": round(
                results["rest"][mode]["episodes_per_second"]
                / results["sql"][mode]["episodes_per_second"],
                3,
            ),
            "p50_ratio": round(results["rest"][mode]["p50_ms"] / results["sql"][mode]["p50_ms"], 3),
        }
        for mode in ("batched", "unary_c8")
    }
    return results


async def replica_modes(template: Path, workdir: Path, scale: float) -> dict[str, Any]:
    """One and three workers over one data dir and one fresh PostgreSQL database each."""
    server = PostgresServer()
    server.start()
    results: dict[str, Any] = {}
    try:
        for count in (1, REPLICAS):
            data_dir = workdir / f"replicas-{count}"
            shutil.copytree(template, data_dir)
            db_url = server.url(server.create_database())
            with ExitStack() as stack:
                url, token = stack.enter_context(mockmed(data_dir))
                workers = start_workers(data_dir, count, ["--db-url", db_url])
                stack.callback(stop_all, workers)
                load = StackLoad(workers, f"r{count}", url, token)
                results[f"replicas_{count}"] = await measure(load, scale)
    finally:
        server.stop()
    one, three = results["replicas_1"], results[f"replicas_{REPLICAS}"]
    results["scaling"] = {
        mode: round(three[mode]["episodes_per_second"] / one[mode]["episodes_per_second"], 3)
        for mode in ("batched", "unary_c8")
    }
    return results


async def main(quick: bool) -> dict[str, Any]:
    scale = 0.25 if quick else 1.0
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-stack-bench-"))
    try:
        template = workdir / "template"
        start_worker(template, seed=True).stop()
        return {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "quick": quick,
            "writes": "POST /api/encounters through rewardseal-mockmed (SQLite) in every mode",
            "oracle": {
                "store": "SQLite, WAL, synchronous=FULL",
                **await oracle_modes(template, workdir, scale),
            },
            "replicas": {
                "store": "one PostgreSQL database (fsync on), shared by the replicas",
                "oracle": "sql (the seeded bundle)",
                "routing": "episodes round-robin over the replicas; begin and score on one",
                **await replica_modes(template, workdir, scale),
            },
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_bench(main, __doc__, RESULTS)
