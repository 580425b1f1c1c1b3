"""The HTTP face against gRPC unary on the same worker (``make bench``; not a test).

Starts ``rewardseal-worker serve --seed-mockmed --http-port 0`` as its own process (durable
SQLite store) and, at concurrency 8 and 64, runs the same episodes through each face in turn:
begin (``POST /v1/episodes`` | ``BeginEpisode``), write the Triage row, score
(``POST /v1/rewards`` | ``ScoreEpisode``). HTTP callers use one keep-alive connection each
(a minimal HTTP/1.1 client, :class:`Connection`); gRPC callers share one channel (as
worker_bench.py's unary runs). Each face is run twice,
alternating, and the better run of each is kept (the machine is shared; the better run is the
one less disturbed).

Per-episode cost is the worker process's CPU per episode (``/proc``, the load generator
excluded) and its wall-clock inverse, episodes/s; ``http_over_grpc`` gives both ratios (target:
the HTTP face costs at most 1.5x the gRPC path per episode). Results in
bench/results/http.json.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH)]

from worker_bench import (  # noqa: E402
    Load,
    Worker,
    percentile,
    run_bench,
    start_worker,
    summary,
    with_server_cpu,
    write_rows,
)

RESULTS = BENCH / "results" / "http.json"
CONCURRENCY = ((8, 24), (64, 4))
"""(callers, episodes per caller) of each run."""
ROUNDS = 2


class Connection:
    """One keep-alive HTTP/1.1 connection, written by hand: the load generator shares the
    machine's cores with the worker, and a full client library's CPU per request (several times
    the server's) would measure the client, not the face."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def post(self, path: str, document: dict[str, Any], token: str) -> dict[str, Any]:
        """POST ``document`` as JSON; the JSON answer (SystemExit unless it is 200)."""
        body = json.dumps(document).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {token}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        answer = await self.reader.readexactly(length)
        if status_line.split()[1] != b"200":
            raise SystemExit(f"{path}: {status_line!r} {answer[:200]!r}")
        document: dict[str, Any] = json.loads(answer)
        return document

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class HttpLoad:
    """The unary load of :class:`worker_bench.Load`, through the HTTP face: one keep-alive
    connection per caller."""

    def __init__(self, worker: Worker, run: str) -> None:
        self.worker = worker
        self.grpc = Load(worker, run)  # names, digest
        self.port = int(worker.info["http_port"])
        self.token = str(worker.info["token"])

    async def unary(self, concurrency: int, per_task: int) -> dict[str, Any]:
        digest = self.grpc.digest
        score_latency: list[float] = []
        episode_latency: list[float] = []
        outcomes: dict[str, int] = {}
        connections = [await Connection.open(self.port) for _ in range(concurrency)]

        async def task(connection: Connection) -> None:
            for _ in range(per_task):
                (name,) = self.grpc.next_ids(1)
                started = time.perf_counter()
                begin = {
                    "episode_id": f"episode.{name}",
                    "reward_contract_digest": digest,
                    "oracle_identity": {"patient_id": f"patient-{name}"},
                }
                await connection.post("/v1/episodes", begin, self.token)
                await asyncio.to_thread(write_rows, self.worker.database, [f"patient-{name}"])
                scored = time.perf_counter()
                episode = {
                    "episode_id": f"episode.{name}",
                    "policy_checkpoint_id": "policy.checkpoint.bench",
                    "policy_update": 1,
                    "reward_contract_digest": digest,
                }
                answer = await connection.post("/v1/rewards", episode, self.token)
                done = time.perf_counter()
                score_latency.append(done - scored)
                episode_latency.append(done - started)
                outcome = answer["receipt"]["reward_outcome"]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(task(c) for c in connections))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(c.close() for c in connections))
        result = summary(episode_latency, concurrency * per_task, elapsed)
        result["score_p50_ms"] = round(statistics.median(score_latency) * 1000, 2)
        result["score_p99_ms"] = round(percentile(score_latency, 99) * 1000, 2)
        result["concurrency"] = concurrency
        result["outcomes"] = outcomes
        return result


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda run: run["server_cpu_ms_per_episode"])


async def main(quick: bool) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-http-bench-"))
    try:
        worker = start_worker(workdir / "data", seed=True, extra_args=["--http-port", "0"])
        try:
            grpc_load, http_load = Load(worker, "grpc"), HttpLoad(worker, "http")
            await grpc_load.unary(8, 4)  # warm-up, not reported
            await http_load.unary(8, 4)
            results: dict[str, Any] = {"store": "SQLite, WAL, synchronous=FULL"}
            for concurrency, episodes_each in CONCURRENCY:
                each = max(2, episodes_each // 4) if quick else episodes_each
                runs: dict[str, list[dict[str, Any]]] = {"grpc": [], "http": []}
                for _ in range(1 if quick else ROUNDS):
                    for face, load in (("grpc", grpc_load), ("http", http_load)):
                        runs[face].append(
                            await with_server_cpu(
                                worker, lambda load=load, c=concurrency, n=each: load.unary(c, n)
                            )
                        )
                grpc, http = _best(runs["grpc"]), _best(runs["http"])
                results[f"c{concurrency}"] = {
                    "grpc_unary": grpc,
                    "http": http,
                    "http_over_grpc": {
                        "server_cpu_per_episode": round(
                            http["server_cpu_ms_per_episode"] / grpc["server_cpu_ms_per_episode"],
                            3,
                        ),
                        "wall_per_episode": round(
                            grpc["episodes_per_second"] / http["episodes_per_second"], 3
                        ),
                        "score_p50": round(http["score_p50_ms"] / grpc["score_p50_ms"], 3),
                    },
                }
            return results
        finally:
            worker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_bench(main, __doc__, RESULTS)
