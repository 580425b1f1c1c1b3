"""rewardseal's worker against the public reference worker, same work, one run (``make bench``).

The reference is ``openadapt-flow serve-reward`` (HTTP, FastAPI + uvicorn), pinned below and
installed from PyPI into a scratch virtual environment outside the repository
(``~/.cache/rewardseal-bench/peer-venv`` unless ``--peer-venv`` or ``REWARDSEAL_PEER_VENV`` says
otherwise; reused when the pins are already there). Both servers are started here, seeded with
their own synthetic MockMed bundle, each on a free loopback port with a scratch data dir (and the
reference with a scratch HOME), and driven from this one process:

- per episode, on both sides: one registration (``BeginEpisode`` / ``POST /v1/episodes``) with its
  baseline read, then one score (``ScoreEpisode`` / ``POST /v1/rewards``): read, judge, sign,
  durable store. Nothing is written to either system of record, so both judge every episode
  ``wrong_effect`` (a certified 0);
- the reference reuses one patient identity for every episode (it has no one-open-episode rule);
  rewardseal uses one identity per in-flight slot (an identity is free again once scored);
- modes: unary at concurrency 1 (a lone caller: its latency), 8 and 64 on both sides; rewardseal
  streamed at 8 and 64 (unary-style, one stream per caller); rewardseal batched (8 concurrent
  clients, each one ``begin_many`` of 64, one ``BeginEpisodes`` call, then one ``score_many`` of
  64). The reference has no batch route, so its best unary figure (at 8 or 64) stands against
  rewardseal's batched one;
- the two sides alternate in short rounds (which side goes first flips every round) and each
  figure is the median over rounds: these machines are noisy.

rewardseal is called through ``rewardseal.rpc.worker_client.AsyncWorkerClient``, which verifies
every receipt (signature and binding to its request) in this process; the reference is called with
httpx and its JSON answers are parsed but not verified. Client and servers share this machine's
cores.

Server CPU is the server process tree's utime + stime from ``/proc`` before and after each
window, divided by the episodes the window completed. Unless ``--no-profile`` (or ``--quick``), a
py-spy sample of rewardseal's worker under unary load at concurrency 64 closes the run (py-spy is
installed into the scratch environment). Results: ``bench/results/peer.json``.

One file over 600 lines on purpose: it is run by path as a script (bench/ is no package), and
its parts (the scratch environment, two servers, two load generators, the report) are read
together when judging whether the comparison is fair.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import collections
import contextlib
import functools
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import httpx

from rewardseal.core.errors import RewardSealError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import (
    AsyncWorkerClient,
    StreamItem,
    VerifiedReceipt,
    make_begin,
    make_descriptor,
    message_size_options,
)
from rewardseal.v1.enums_pb2 import RewardOutcome

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "peer.json"
WORKER_CLI = Path(sys.executable).with_name("rewardseal-worker")

PEER_PINS = ("openadapt-types==0.24.0", "openadapt-flow[reward]==2.4.0")
PEER_VERSIONS = {"openadapt-types": "0.24.0", "openadapt-flow": "2.4.0"}
PEER_CLI = "openadapt-flow"
PEER_VENV_DEFAULT = Path.home() / ".cache" / "rewardseal-bench" / "peer-venv"
# The reference's seeded tier-2 bundle grades this patient; every reference episode names it.
PEER_PATIENT = "patient-honest-0001"
CHECKPOINT = "policy_checkpoint_mockmed_0"
POLICY_UPDATE = 1
BATCH = 64
BATCH_CLIENTS = 8
UNARY = (1, 8, 64)
BEST_OF = (8, 64)
"""The unary concurrencies the reference's best figure is taken from (it always runs them)."""
MODES = ("unary_c1", "unary_c8", "unary_c64", "streamed_c8", "streamed_c64", "batched")
POSTGRES_SIDE = "rewardseal_postgresql"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CALL_TIMEOUT_S = 60.0


# -- the reference's scratch environment ----------------------------------------------------


def peer_versions(venv: Path) -> dict[str, str]:
    """Installed versions of the reference stack in ``venv`` ({} when it is not there)."""
    python = venv / "bin" / "python"
    if not python.exists():
        return {}
    names = ["openadapt-flow", "openadapt-types", "fastapi", "uvicorn", "pydantic", "py-spy"]
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script, *names], capture_output=True, text=True, check=False
    )
    return dict(json.loads(done.stdout)) if done.returncode == 0 else {}


def ensure_peer_venv(venv: Path, *, profiler: bool) -> dict[str, str]:
    """Create ``venv`` and install the pinned reference stack unless it is already there."""
    versions = peer_versions(venv)
    if any(versions.get(name) != want for name, want in PEER_VERSIONS.items()):
        print(f"installing the reference stack into {venv}", file=sys.stderr)
        if not (venv / "bin" / "python").exists():
            venv.parent.mkdir(parents=True, exist_ok=True)
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--disable-pip-version-check", *PEER_PINS], check=True)
        versions = peer_versions(venv)
    if profiler and "py-spy" not in versions:
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--disable-pip-version-check", "py-spy"], check=True)
        versions = peer_versions(venv)
    return versions


# -- the two servers ------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port that was free a moment ago (the reference takes no port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One started server process and what a client needs to reach it."""

    name: str
    process: subprocess.Popen[bytes]
    target: str
    token: str
    digest: str
    log: Path
    public_key: str = ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)

    def cpu_seconds(self) -> float:
        """utime + stime of the server process and its descendants, in seconds."""
        return sum(_cpu_ticks(pid) for pid in _tree(self.process.pid)) / CLK_TCK


def _cpu_ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def _tree(root: int) -> list[int]:
    """``root`` and every live descendant (a server may fork helpers)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children[ppid].append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _wait(process: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + 180
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"server did not start; its log:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)


def start_rewardseal(
    workdir: Path,
    *,
    name: str = "rewardseal",
    processes: int = 1,
    db_url: str | None = None,
    inline_batch: int | None = None,
) -> Server:
    """``rewardseal-worker serve --seed-mockmed`` on port 0 (``--processes N``; the receipt
    store in ``db_url`` when given, else the data dir's SQLite; ``inline_batch``:
    ``REWARDSEAL_WORKER_INLINE_BATCH``); its ready file gives the rest."""
    data_dir, ready, log = workdir / name, workdir / f"{name}.ready", workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_WORKER_")}
    if inline_batch is not None:
        env["REWARDSEAL_WORKER_INLINE_BATCH"] = str(inline_batch)
    command = [str(WORKER_CLI), "serve", "--seed-mockmed", "--data-dir", str(data_dir)]
    command += ["--port", "0", "--ready-file", str(ready), "--processes", str(processes)]
    command += ["--db-url", db_url] if db_url else []
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    _wait(process, ready.exists, log)
    time.sleep(0.2)  # the ready file is written whole, but give a slow disk a moment
    info = json.loads(ready.read_text())
    return Server(
        name=name,
        process=process,
        target=f"127.0.0.1:{info['port']}",
        token=str(info["token"]),
        digest=str(info["contract_digest"]),
        log=log,
        public_key=str(info["public_key"]),
    )


def start_reference(workdir: Path, venv: Path) -> Server:
    """``serve-reward --seed-mockmed`` on a free port with a scratch HOME and data dir."""
    home, data_dir, log = workdir / "peer-home", workdir / "peer-data", workdir / "peer.log"
    home.mkdir()
    port, token = free_port(), secrets.token_hex(24)
    command = [str(venv / "bin" / PEER_CLI), "serve-reward", "--seed-mockmed"]
    command += ["--port", str(port), "--data-dir", str(data_dir), "--token", token]
    env = {**os.environ, "HOME": str(home)}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    _wait(process, healthy, log)
    digest = str(httpx.get(f"{base}/health", timeout=5).json()["reward_contract_digest"])
    return Server("reference", process, base, token, digest, log)


# -- load -----------------------------------------------------------------------------------


@dataclass
class Window:
    """What one timed window of one side and mode observed."""

    episodes: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    first_error: str | None = None

    def error(self, what: object) -> None:
        self.errors += 1
        self.first_error = self.first_error or str(what)[:300]


class Side(abc.ABC):
    """One server under load: unary windows, and batched ones where it has a batch path."""

    name: str
    server: Server

    @abc.abstractmethod
    async def unary(self, concurrency: int, seconds: float) -> Window:
        """One window of ``concurrency`` callers, each beginning and scoring one at a time."""

    async def batched(self, seconds: float) -> Window | None:
        """One batched window, or None for a server without a batch path."""
        return None

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the side's connections."""


class RewardsealSide(Side):
    """rewardseal's worker through the verifying asyncio client.

    ``connections`` clients, each on its own TCP connection (a local subchannel pool: channels
    to one target otherwise share one connection); callers take them in turn. Several are
    needed to reach every process of ``serve --processes N``: the kernel hands each
    *connection* to one process.
    """

    def __init__(self, server: Server, *, connections: int = 1) -> None:
        self.name, self.server = server.name, server
        trust = TrustSet([bytes.fromhex(server.public_key)])
        options = [("grpc.use_local_subchannel_pool", 1), *message_size_options()]
        self.clients = [
            AsyncWorkerClient(
                server.target,
                token=server.token,
                trust=trust,
                timeout=CALL_TIMEOUT_S,
                channel=grpc.aio.insecure_channel(server.target, options=options),
            )
            for _ in range(connections)
        ]
        self.counter = 0

    def next_id(self) -> str:
        self.counter += 1
        return f"episode.peer-rs-{self.counter:09d}"

    def descriptor(self, episode_id: str) -> Any:
        return make_descriptor(
            episode_id=episode_id,
            policy_checkpoint_id=CHECKPOINT,
            policy_update=POLICY_UPDATE,
            reward_contract_digest=self.server.digest,
        )

    async def episode(self, window: Window, patient: str, client: AsyncWorkerClient) -> None:
        episode_id = self.next_id()
        started = time.perf_counter()
        try:
            await client.begin(episode_id, self.server.digest, {"patient_id": patient})
            receipt = await client.score(self.descriptor(episode_id))
        except RewardSealError as exc:
            window.error(exc)
            return
        window.latencies.append(time.perf_counter() - started)
        window.episodes += 1
        window.outcomes[RewardOutcome.Name(receipt.receipt.reward_outcome)] += 1

    async def unary(self, concurrency: int, seconds: float) -> Window:
        window = Window()
        deadline = time.perf_counter() + seconds

        async def slot(index: int) -> None:
            patient = f"patient-peer-c{concurrency}-{index:03d}"  # one identity per slot
            client = self.clients[index % len(self.clients)]
            while time.perf_counter() < deadline:
                await self.episode(window, patient, client)

        await asyncio.gather(*(slot(i) for i in range(concurrency)))
        return window

    async def streamed(self, concurrency: int, seconds: float) -> Window:
        """``concurrency`` callers, each on its own ``StreamEpisodes`` stream: send a begin,
        wait for its answer, send the descriptor, wait for the receipt, repeat (the unary
        work, one message per step instead of one call)."""
        window = Window()
        deadline = time.perf_counter() + seconds

        async def slot(index: int) -> None:
            patient = f"patient-peer-s{concurrency}-{index:03d}"  # one identity per slot
            client = self.clients[index % len(self.clients)]
            outbox: asyncio.Queue[StreamItem | None] = asyncio.Queue()

            async def items() -> AsyncIterator[StreamItem]:
                while (item := await outbox.get()) is not None:
                    yield item

            answers = client.stream(items())
            try:
                while time.perf_counter() < deadline:
                    episode_id = self.next_id()
                    started = time.perf_counter()
                    outbox.put_nowait(
                        make_begin(episode_id, self.server.digest, {"patient_id": patient})
                    )
                    begun = await anext(answers)
                    outbox.put_nowait(self.descriptor(episode_id))
                    scored = await anext(answers)
                    failed = next((e for e in (begun, scored) if isinstance(e, Exception)), None)
                    if failed is not None or not isinstance(scored, VerifiedReceipt):
                        window.error(failed or scored)
                        continue
                    window.latencies.append(time.perf_counter() - started)
                    window.episodes += 1
                    window.outcomes[RewardOutcome.Name(scored.receipt.reward_outcome)] += 1
            finally:
                outbox.put_nowait(None)
                close = getattr(answers, "aclose", None)  # an async generator: end its call
                if close is not None:
                    await close()

        await asyncio.gather(*(slot(i) for i in range(concurrency)))
        return window

    async def batched(self, seconds: float) -> Window:
        window = Window()
        deadline = time.perf_counter() + seconds

        async def client(index: int) -> None:
            patients = [f"patient-peer-b{index}-{i:02d}" for i in range(BATCH)]
            worker = self.clients[index % len(self.clients)]
            while time.perf_counter() < deadline:
                ids = [self.next_id() for _ in range(BATCH)]
                started = time.perf_counter()
                begun = await worker.begin_many(
                    make_begin(e, self.server.digest, {"patient_id": p})
                    for e, p in zip(ids, patients, strict=True)
                )
                ok = [e for e, b in zip(ids, begun, strict=True) if not isinstance(b, Exception)]
                for failed in (b for b in begun if isinstance(b, RewardSealError)):
                    window.error(failed)
                results = await worker.score_many(self.descriptor(e) for e in ok)
                elapsed = time.perf_counter() - started
                for result in results:
                    if isinstance(result, RewardSealError):
                        window.error(result)
                        continue
                    window.episodes += 1
                    window.latencies.append(elapsed)  # an episode's latency is its batch's
                    window.outcomes[RewardOutcome.Name(result.receipt.reward_outcome)] += 1

        await asyncio.gather(*(client(i) for i in range(BATCH_CLIENTS)))
        return window

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads a Content-Length answer.

    Deliberately minimal: a general-purpose client (httpx) costs this process more CPU per call
    than the reference server does at 64 connections, and the load generator shares the
    server's cores, so it would measure the client. This is about as cheap per call as the
    gRPC client on the other side, which also verifies every receipt.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps(payload).encode()
        request = (
            f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(request + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *headers = head.decode("latin-1").split("\r\n")
        length = 0
        for header in headers:
            name, _, value = header.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


class ReferenceSide(Side):
    """The reference over HTTP/1.1 keep-alive, one connection per in-flight slot."""

    def __init__(self, server: Server) -> None:
        self.name, self.server = "reference", server
        host, _, port = server.target.removeprefix("http://").partition(":")
        self.address = (host, int(port))
        self.counter = 0

    async def episode(self, window: Window, http: HttpConnection) -> None:
        self.counter += 1
        episode_id = f"episode.peer-ref-{self.counter:09d}"
        identity = {"patient_id": PEER_PATIENT}  # one identity for every episode
        descriptor = {
            "episode_id": episode_id,
            "policy_checkpoint_id": CHECKPOINT,
            "policy_update": POLICY_UPDATE,
            "reward_contract_digest": self.server.digest,
        }
        started = time.perf_counter()
        try:
            status, body = await http.post(
                "/v1/episodes", {"episode_id": episode_id, "oracle_identity": identity}
            )
            if status != 200:
                window.error(f"begin {status}: {body[:200]!r}")
                return
            status, body = await http.post("/v1/rewards", descriptor)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            window.error(repr(exc))
            return
        if status != 200:
            window.error(f"score {status}: {body[:200]!r}")
            return
        outcome = str(json.loads(body)["receipt"]["reward_outcome"])
        window.latencies.append(time.perf_counter() - started)
        window.episodes += 1
        window.outcomes[outcome] += 1

    async def unary(self, concurrency: int, seconds: float) -> Window:
        window = Window()
        deadline = time.perf_counter() + seconds

        async def slot() -> None:
            http = HttpConnection(*self.address, self.server.token)
            try:
                while time.perf_counter() < deadline:
                    await self.episode(window, http)
            finally:
                await http.close()

        await asyncio.gather(*(slot() for _ in range(concurrency)))
        return window

    async def close(self) -> None:
        return None


# -- measuring ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def measure(side: Side, run: Callable[[], Awaitable[Window | None]]) -> dict[str, Any]:
    """One timed window: throughput, latency quantiles and server CPU per episode."""
    cpu, client, started = side.server.cpu_seconds(), time.process_time(), time.perf_counter()
    window = await run()
    elapsed, cpu = time.perf_counter() - started, side.server.cpu_seconds() - cpu
    client = time.process_time() - client
    if window is None or not window.episodes:
        raise SystemExit(f"{side.name}: no episode completed ({window and window.first_error})")
    result: dict[str, Any] = {
        "episodes": window.episodes,
        "seconds": round(elapsed, 3),
        "episodes_per_second": round(window.episodes / elapsed, 1),
        "p50_ms": round(statistics.median(window.latencies) * 1000, 2),
        "p99_ms": round(percentile(window.latencies, 99) * 1000, 2),
        "server_cpu_ms_per_episode": round(cpu * 1000 / window.episodes, 3),
        # Cores busy on average: the server's, and this load generator's (near 1.0 the client
        # is the bottleneck: it is one Python process).
        "server_cpu_share": round(cpu / elapsed, 2),
        "client_cpu_share": round(client / elapsed, 2),
        "outcomes": dict(window.outcomes),
    }
    if window.errors:
        result["errors"] = window.errors
        result["first_error"] = window.first_error
    return result


MEDIAN_KEYS = ("episodes_per_second", "p50_ms", "p99_ms", "server_cpu_ms_per_episode")


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds, and each round's throughput beside it."""
    out: dict[str, Any] = {
        key: round(statistics.median(r[key] for r in rounds), 3) for key in MEDIAN_KEYS
    }
    for key in ("server_cpu_share", "client_cpu_share"):
        out[key] = round(statistics.median(r[key] for r in rounds), 2)
    out["rounds_episodes_per_second"] = [r["episodes_per_second"] for r in rounds]
    out["episodes"] = sum(r["episodes"] for r in rounds)
    out["errors"] = sum(r.get("errors", 0) for r in rounds)
    outcomes: collections.Counter[str] = collections.Counter()
    for r in rounds:
        outcomes.update(r["outcomes"])
    out["outcomes"] = dict(outcomes)
    return out


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """rewardseal ÷ reference for each median figure (throughput >1 is better, the rest <1)."""
    return {key: round(ours[key] / theirs[key], 3) for key in MEDIAN_KEYS if theirs[key]}


# -- the profile ----------------------------------------------------------------------------


def summarize_profile(raw: Path) -> dict[str, Any]:
    """Self time by function and inclusive time by package, as shares of all samples."""
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf[_frame_name(frames[-1])] += count
        for package in {_package(frame) for frame in frames[1:]}:
            inclusive[package] += count
    if not total:
        return {"samples": 0}
    return {
        "samples": total,
        "self_top": {k: round(v / total, 3) for k, v in leaf.most_common(15)},
        "inclusive_by_package": {k: round(v / total, 3) for k, v in inclusive.most_common(15)},
    }


def _frame_name(frame: str) -> str:
    # py-spy raw frames read "function (path/to/module.py:line)".
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{function} ({_short(path)})"


def _package(frame: str) -> str:
    _, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    short = _short(path)
    parts = short.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else short


def _short(path: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3.11/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return path


# -- the run --------------------------------------------------------------------------------


def machine_facts(peer: dict[str, str]) -> dict[str, Any]:
    ours = {}
    for name in ("rewardseal", "rewardseal-worker", "grpcio", "protobuf", "httpx", "PyNaCl"):
        try:
            ours[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    worker_module = subprocess.run(
        [sys.executable, "-c", "import rewardseal_worker; print(rewardseal_worker.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "rewardseal_git_head": head.stdout.strip(),
        # Where the worker's code came from (PYTHONPATH can point it at another checkout).
        "rewardseal_worker_module": worker_module.stdout.strip(),
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "rewardseal_packages": ours,
        "reference_packages": peer,
    }


@contextmanager
def servers(workdir: Path, venv: Path, options: argparse.Namespace) -> Iterator[list[Server]]:
    """rewardseal's worker, the reference, and (``--postgres``) a second rewardseal worker
    whose receipt store is a throwaway PostgreSQL cluster (``tests/support/postgres.py``)."""
    started: list[Server] = []
    postgres = None
    try:
        started.append(
            start_rewardseal(
                workdir, processes=options.processes, inline_batch=options.inline_batch
            )
        )
        started.append(start_reference(workdir, venv))
        if options.postgres:
            sys.path.insert(0, str(ROOT / "tests"))
            from support.postgres import PostgresServer

            postgres = PostgresServer()
            postgres.start()
            url = postgres.url(postgres.create_database())
            started.append(
                start_rewardseal(
                    workdir,
                    name=POSTGRES_SIDE,
                    processes=options.processes,
                    db_url=url,
                    inline_batch=options.inline_batch,
                )
            )
        yield started
    finally:
        for server in started:
            server.stop()
        if postgres is not None:
            postgres.stop()


async def drive(
    ours: RewardsealSide,
    theirs: ReferenceSide,
    rounds: int,
    seconds: float,
    *,
    modes: Sequence[str],
    postgres: RewardsealSide | None = None,
) -> dict[str, Any]:
    """Warm both sides, then alternate them over ``rounds`` rounds of every mode.

    The warm-up runs every mode once for a full window (not reported): the reference's first
    windows ran at about half its later throughput with a one-second warm-up. ``postgres``
    (rewardseal over PostgreSQL) runs the batched mode after rewardseal's in every round.
    """
    unary = [c for c in UNARY if f"unary_c{c}" in modes]
    warm: Side
    for warm in (ours, theirs):
        for concurrency in UNARY:  # the reference's best unary figure needs BEST_OF, always
            if concurrency in unary or (warm is theirs and concurrency in BEST_OF):
                await warm.unary(concurrency, seconds)
    for concurrency in UNARY:
        if f"streamed_c{concurrency}" in modes:
            await ours.streamed(concurrency, seconds)
    batched = [s for s in (ours, postgres) if s is not None and "batched" in modes]
    for each in batched:
        await each.batched(seconds)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for index in range(rounds):
        order: list[Side] = [ours, theirs] if index % 2 == 0 else [theirs, ours]
        for concurrency in UNARY:
            for side in order:
                if concurrency not in unary and (side is ours or concurrency not in BEST_OF):
                    continue
                result = await measure(side, functools.partial(side.unary, concurrency, seconds))
                runs[f"unary_c{concurrency}"][side.name].append(result)
        for concurrency in UNARY:
            if f"streamed_c{concurrency}" in modes:
                call = functools.partial(ours.streamed, concurrency, seconds)
                runs[f"streamed_c{concurrency}"][ours.name].append(await measure(ours, call))
        for each in batched:
            result = await measure(each, functools.partial(each.batched, seconds))
            mode = "batched" if each is ours else "batched_postgresql"
            runs[mode][each.name].append(result)
        print(f"round {index + 1}/{rounds} done", file=sys.stderr)
    report: dict[str, Any] = {}
    for mode, sides in runs.items():
        report[mode] = {name: medians(results) for name, results in sides.items()}
        if "reference" in sides and ours.name in sides:
            report[mode]["ratio_rewardseal_over_reference"] = ratios(
                report[mode][ours.name], report[mode]["reference"]
            )
            # Each round's two windows ran back to back, so their ratio sees the same background
            # load; the median of those ratios is steadier than the ratio of the medians.
            report[mode]["paired_throughput_ratio_median"] = round(
                statistics.median(
                    a["episodes_per_second"] / b["episodes_per_second"]
                    for a, b in zip(sides[ours.name], sides["reference"], strict=True)
                ),
                3,
            )
    for concurrency in UNARY:
        mode = f"streamed_c{concurrency}"
        if mode in runs:
            # The reference has no stream: its unary window of the same round, same concurrency.
            theirs_unary = runs[f"unary_c{concurrency}"]["reference"]
            report[mode]["reference_note"] = f"the reference's unary_c{concurrency} windows"
            report[mode]["paired_throughput_ratio_median"] = round(
                statistics.median(
                    a["episodes_per_second"] / b["episodes_per_second"]
                    for a, b in zip(runs[mode][ours.name], theirs_unary, strict=True)
                ),
                3,
            )
    best = max(report[f"unary_c{c}"]["reference"]["episodes_per_second"] for c in BEST_OF)
    for mode in ("batched", "batched_postgresql"):
        if mode not in runs:
            continue
        (name, results), *_ = runs[mode].items()
        figures = report[mode]
        figures["reference"] = None
        figures["reference_note"] = "no batch route: compared with its best unary mode"
        figures["paired_ratio_over_reference_best_unary_median"] = round(
            statistics.median(
                result["episodes_per_second"]
                / max(runs[f"unary_c{c}"]["reference"][i]["episodes_per_second"] for c in BEST_OF)
                for i, result in enumerate(results)
            ),
            3,
        )
        figures["reference_best_unary_episodes_per_second"] = best
        figures["ratio_over_reference_best_unary"] = round(
            figures[name]["episodes_per_second"] / best, 3
        )
        figures["ratio_cpu_over_reference_unary_c8"] = round(
            figures[name]["server_cpu_ms_per_episode"]
            / report["unary_c8"]["reference"]["server_cpu_ms_per_episode"],
            3,
        )
    return {"modes": report, "raw": {m: dict(s) for m, s in runs.items()}}


async def sample_profile(
    ours: RewardsealSide, venv: Path, seconds: float, workdir: Path
) -> dict[str, Any]:
    """py-spy samples of rewardseal's worker while this process drives it unary at 64."""
    raw = workdir / "profile.txt"
    command = [str(venv / "bin" / "py-spy"), "record", "--pid", str(ours.server.process.pid)]
    command += ["--duration", str(int(seconds)), "--rate", "200", "--format", "raw"]
    command += ["--output", str(raw), "--nonblocking"]
    spy = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    await ours.unary(64, seconds + 1)
    _, err = await spy.communicate()
    if spy.returncode != 0 or not raw.exists():
        return {"error": err.decode(errors="replace")[-500:]}
    summary = summarize_profile(raw)
    summary["load"] = "rewardseal unary at concurrency 64"
    summary["seconds"] = seconds
    return summary


async def main(options: argparse.Namespace) -> dict[str, Any]:
    quick = bool(options.quick)
    rounds = options.rounds or (2 if quick else 5)
    seconds = options.seconds or (2.0 if quick else 5.0)
    want_profile = not (quick or options.no_profile)
    venv = options.peer_venv
    peer = ensure_peer_venv(venv, profiler=want_profile)
    connections = options.connections or (1 if options.processes == 1 else 4 * options.processes)
    modes = options.modes.split(",") if options.modes else list(MODES)
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    report: dict[str, Any] = {
        "what": (
            "rewardseal-worker vs the reference serve-reward: per episode one begin with a "
            "baseline read and one score (read, judge, sign, durable store); nothing written "
            "to the SoR; medians over alternating rounds"
        ),
        "reference": f"{PEER_CLI} serve-reward --seed-mockmed (HTTP, uvicorn, one process)",
        "rewardseal": (
            f"rewardseal-worker serve --seed-mockmed --processes {options.processes} (gRPC, "
            f"SQLite WAL synchronous=FULL), {connections} client connection(s)"
        ),
        "inline_batch": (
            "worker's choice" if options.inline_batch is None else options.inline_batch
        ),
        "machine": machine_facts(peer),
        "rounds": rounds,
        "seconds_per_window": seconds,
        "quick": quick,
    }
    workdir = Path(tempfile.mkdtemp(prefix="rewardseal-peer-"))
    try:
        with servers(workdir, venv, options) as started:
            ours = RewardsealSide(started[0], connections=connections)
            theirs = ReferenceSide(started[1])
            postgres = (
                RewardsealSide(started[2], connections=connections) if len(started) > 2 else None
            )
            try:
                report.update(
                    await drive(ours, theirs, rounds, seconds, modes=modes, postgres=postgres)
                )
                if want_profile:
                    report["profile"] = await sample_profile(ours, venv, 8.0, workdir)
            finally:
                for side in (ours, theirs, postgres):
                    if side is not None:
                        await side.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return report


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 2 s, no profile")
    parser.add_argument("--rounds", type=int, default=0, help="alternating rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=0.0, help="per window (default 5)")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy sample")
    parser.add_argument(
        "--peer-venv",
        type=Path,
        default=Path(os.environ.get("REWARDSEAL_PEER_VENV", PEER_VENV_DEFAULT)),
        help="scratch virtual environment for the reference (outside the repository)",
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="rewardseal-worker serve --processes N"
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=0,
        help="rewardseal client connections (default 1, or 4 per process with --processes)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also run rewardseal's batched mode with its store on a throwaway PostgreSQL",
    )
    parser.add_argument(
        "--inline-batch",
        type=int,
        default=None,
        help="REWARDSEAL_WORKER_INLINE_BATCH for rewardseal's workers (default: unset, the "
        "worker's choice; 0: every batch in a worker thread)",
    )
    parser.add_argument("--modes", default="", help=f"a subset of {','.join(MODES)}")
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    if options.peer_venv.resolve().is_relative_to(ROOT):
        parser.error("--peer-venv must lie outside the repository")
    report = asyncio.run(main(options))
    report["generated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["modes"], indent=2))


if __name__ == "__main__":
    cli()
