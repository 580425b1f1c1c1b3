"""What one gRPC call costs before any rewardseal work: the floor under the unary targets.

A server process serves ``RewardWorkerService`` with a servicer that answers ``BeginEpisode`` and
each ``StreamEpisodes`` message at once (no store, no oracle, no signature), under grpc.aio as the
worker does. This process drives it with plain generated stubs at concurrency 8 and 64, as unary
calls and as messages on one stream per caller (send, wait for the answer, send the next), and
reads the server's CPU from ``/proc``. Variants: the worker's bearer-token interceptor in front,
and each call handed to a thread and back (``asyncio.to_thread``, as the worker's batches are).

Run by hand (``make bench`` does not): ``.venv/bin/python bench/rpc_floor.py``; results in
``bench/results/rpc_floor.json``. ``--serve VARIANT`` is the server side (internal).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc

RESULTS = Path(__file__).resolve().parent / "results" / "rpc_floor.json"
TOKEN = "rpc-floor-token-0123456789"
VARIANTS = ("plain", "auth", "auth_thread")
CALLS = 6000
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Answering(pb_grpc.RewardWorkerServiceServicer):
    """Answers at once; ``thread``: each answer made in a worker thread, as batches are."""

    def __init__(self, thread: bool) -> None:
        self.thread = thread

    async def BeginEpisode(  # noqa: N802
        self, request: pb.BeginEpisodeRequest, context: Any
    ) -> pb.BeginEpisodeResponse:
        if self.thread:
            return await asyncio.to_thread(pb.BeginEpisodeResponse, episode_id=request.episode_id)
        return pb.BeginEpisodeResponse(episode_id=request.episode_id)

    async def StreamEpisodes(  # noqa: N802
        self, request_iterator: Any, context: Any
    ) -> Any:
        async for request in request_iterator:
            result = pb.BeginResult(episode_id=request.begin.episode_id)
            if self.thread:
                result = await asyncio.to_thread(pb.BeginResult, episode_id=result.episode_id)
            yield pb.StreamEpisodesResponse(begin=result)


async def serve(variant: str) -> None:
    """The server side: print the port, serve until killed."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if variant.startswith("auth"):
        from rewardseal_server.auth import BearerAuthInterceptor

        interceptors.append(BearerAuthInterceptor({TOKEN: "trainer"}))
    server = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_RewardWorkerServiceServicer_to_server(
        Answering(thread=variant.endswith("thread")),  # type: ignore[abstract]  # two RPCs only
        server,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def _cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start(variant: str) -> tuple[subprocess.Popen[bytes], int]:
    """The server process for ``variant`` and its port."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", variant], stdout=subprocess.PIPE
    )
    assert server.stdout is not None
    return server, int(server.stdout.readline())


async def measure(variant: str, shape: str, concurrency: int) -> dict[str, float]:
    """One window: ``CALLS`` calls (or stream messages) at ``concurrency``."""
    server, port = start(variant)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RewardWorkerServiceStub(channel)
            metadata = (("authorization", f"Bearer {TOKEN}"),)
            request = pb.BeginEpisodeRequest(episode_id="episode.floor.0001")

            async def unary(count: int) -> None:
                for _ in range(count):
                    await stub.BeginEpisode(request, metadata=metadata)

            async def streamed(count: int) -> None:
                call = stub.StreamEpisodes(metadata=metadata)
                for _ in range(count):
                    await call.write(pb.StreamEpisodesRequest(begin=request))
                    await call.read()
                await call.done_writing()

            caller = unary if shape == "unary" else streamed
            await caller(200)  # warm-up
            per_caller = CALLS // concurrency
            cpu, client, started = _cpu(server.pid), time.process_time(), time.perf_counter()
            await asyncio.gather(*(caller(per_caller) for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
            calls = per_caller * concurrency
            return {
                "per_second": round(calls / elapsed),
                "server_cpu_us": round((_cpu(server.pid) - cpu) / calls * 1e6, 1),
                "client_cpu_us": round((time.process_time() - client) / calls * 1e6, 1),
            }
    finally:
        server.kill()
        server.wait()


async def main(repeats: int) -> dict[str, Any]:
    report: dict[str, Any] = {
        "what": "server and client CPU per call (unary) or per message (stream), trivial servicer",
        "calls_per_window": CALLS,
        "repeats": repeats,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "results": {},
    }
    for variant in VARIANTS:
        for shape in ("unary", "stream"):
            for concurrency in (8, 64):
                windows = [await measure(variant, shape, concurrency) for _ in range(repeats)]
                report["results"][f"{variant}.{shape}.c{concurrency}"] = {
                    key: statistics.median(w[key] for w in windows) for key in windows[0]
                }
    report["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["generated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help="windows per case (median)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    if options.serve:
        asyncio.run(serve(options.serve))
        return
    report = asyncio.run(main(options.repeats))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["results"], indent=2))


if __name__ == "__main__":
    cli()
