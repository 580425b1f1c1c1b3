"""``rewardseal-worker serve --processes N``: N real processes on one port and one store.

The console script an operator runs, started with ``--processes``: a supervisor and N children
sharing the port (SO_REUSEPORT, this mode only) and one store, SQLite (WAL, one writer at a
time) or PostgreSQL. 64 callers, each on its own connection (the kernel gives each connection to
one process), race the same 200 episode ids over the same 50 identities: every episode is begun
by three callers, its row is written once, and the three race to score it. Exactly one receipt
per episode may exist (R-W-8), one credit per record, and one open episode per identity at a
time (R-W-3), across the processes as across replicas.

That the calls really spread is read from outside, without a debug field: each child's CPU time
(``/proc/<pid>/stat``) grows during the race. The supervisor's life cycle: SIGTERM stops every
child and exits 0; a child killed with ``kill -9`` is replaced and the worker keeps serving; a
supervisor killed with ``kill -9`` leaves no child running; a bad count and a port held by
another program are refused with one line.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from sqlalchemy import text
from support.mockmed_episodes import descriptor, write_triage
from support.receipt_store import episodes_with_more_than_one_receipt, read_receipts, verify_rows
from support.worker_process import WorkerProcess, clean_env, health_answers, spawn_worker
from support.worker_store import count_receipts

from rewardseal.core.errors import DuplicateEpisode, IdentityBusy
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt, message_size_options
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.mockmed import IDENTITY_KEY
from rewardseal_worker.store import WorkerStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; SO_REUSEPORT"),
]

PROCESSES = 3
CALLERS = 64
EPISODES = 200
IDENTITIES = 50
"""Four episodes per identity: they must run one after another."""
RACERS = 3
"""Callers that begin and score each episode."""
WORKER_CLI = Path(sys.executable).with_name("rewardseal-worker")
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
THREE = ("--processes", "3")


def episode_id(index: int) -> str:
    return f"episode.processes.{index:04d}"


def patient(index: int) -> str:
    return f"patient-processes-{index % IDENTITIES:03d}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """Wait until every pid is gone; return those still running at the deadline."""
    deadline = time.monotonic() + timeout
    while (running := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return running


def terminate(worker: WorkerProcess) -> int:
    """SIGTERM the supervisor; its exit status."""
    worker.proc.send_signal(signal.SIGTERM)
    return worker.proc.wait(timeout=60)


@pytest.fixture
def worker(data_dir: Path, tmp_path: Path, store_url: str) -> Iterator[WorkerProcess]:
    """``serve --processes 3`` over the seeded data dir and ``store_url``, ready; stopped (and
    reaped) after."""
    started = spawn_worker(
        data_dir,
        tmp_path / "ready.json",
        db_url=store_url,
        extra_args=["--processes", str(PROCESSES)],
    )
    try:
        started.wait_ready()
        yield started
    finally:
        children = list(started.banner.get("pids", []))
        try:
            if started.proc.poll() is None:
                started.proc.send_signal(signal.SIGTERM)
                started.proc.wait(timeout=60)
        finally:
            started.close()
        assert wait_gone(children) == []


def own_connection(worker: WorkerProcess) -> AsyncWorkerClient:
    """A client on a connection of its own. gRPC shares one connection among the channels of
    a process that have the same target and options (its global subchannel pool): 64 such
    clients would all land on one server process."""
    channel = grpc.aio.insecure_channel(
        worker.target, options=[*message_size_options(), ("grpc.use_local_subchannel_pool", 1)]
    )
    return AsyncWorkerClient(
        worker.target, token=worker.token, trust=worker.trust, timeout=60.0, channel=channel
    )


@dataclass
class Race:
    """What the callers saw, per episode."""

    digest: str
    database: Path
    receipts: dict[str, list[VerifiedReceipt]] = field(default_factory=lambda: defaultdict(list))
    refusals: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Episode id -> the receipt id each ALREADY_EXISTS named."""
    busy: int = 0
    """IdentityBusy answers: another episode of the identity was open (contention happened)."""
    written: dict[str, asyncio.Event] = field(default_factory=dict)
    writer: set[str] = field(default_factory=set)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def play(self, client: AsyncWorkerClient, index: int) -> None:
        """Begin ``index`` (retrying while its identity is busy); the first caller whose begin
        went through writes its row; then score it, racing the others."""
        name = episode_id(index)
        written = self.written.setdefault(name, asyncio.Event())
        while True:
            try:
                await client.begin(name, self.digest, {IDENTITY_KEY: patient(index)})
            except IdentityBusy:
                self.busy += 1
                await asyncio.sleep(random.uniform(0.02, 0.08))
                continue
            except DuplicateEpisode:
                # Scored already (so written already): only the score race is left.
                assert written.is_set(), name
            break
        if name not in self.writer:
            self.writer.add(name)
            async with self.write_lock:
                await asyncio.to_thread(write_triage, self.database, patient(index))
            written.set()
        await written.wait()
        try:
            self.receipts[name].append(await client.score(descriptor(self.digest, name)))
        except DuplicateEpisode as refused:
            self.refusals[name].append(refused.metadata["receipt_id"])


def assignments() -> list[list[int]]:
    """Each caller's episodes, in its own order; every episode goes to three callers."""
    plan: list[list[int]] = [[] for _ in range(CALLERS)]
    for index in range(EPISODES):
        for racer in range(RACERS):
            plan[(index + racer * 21) % CALLERS].append(index)
    shuffler = random.Random(12)
    for episodes in plan:
        shuffler.shuffle(episodes)
    return plan


async def test_processes_race_on_every_episode_and_store_one_receipt_each(
    worker: WorkerProcess, data_dir: Path, store_url: str
) -> None:
    banner = worker.banner
    children: list[int] = banner["pids"]
    assert banner["processes"] == PROCESSES
    assert len(set(children)) == PROCESSES
    assert worker.proc.pid not in children
    assert all(alive(pid) for pid in children)
    race = Race(worker.digest, data_dir / "mockmed" / "mockmed.sqlite")
    clients = [own_connection(worker) for _ in range(CALLERS)]
    before = {pid: cpu_seconds(pid) for pid in children}
    started = time.monotonic()
    try:

        async def caller(client: AsyncWorkerClient, episodes: list[int]) -> None:
            for index in episodes:
                await race.play(client, index)

        await asyncio.gather(
            *(caller(c, plan) for c, plan in zip(clients, assignments(), strict=True))
        )
    finally:
        await asyncio.gather(*(client.close() for client in clients))
    seconds = time.monotonic() - started
    used = {pid: cpu_seconds(pid) - before[pid] for pid in children}

    # Every episode: one receipt won, every other score named it; all paid for their own row.
    assert set(race.receipts) == {episode_id(i) for i in range(EPISODES)}
    for name, won in race.receipts.items():
        assert len(won) == 1, (name, won)
        assert won[0].receipt.episode_id == name
        assert won[0].receipt.reward_outcome == VERIFIED, name
        assert len(race.refusals[name]) == RACERS - 1, (name, race.refusals[name])
        assert set(race.refusals[name]) == {won[0].receipt.receipt_id}, name
    assert race.busy > 0, "no begin ever met a busy identity: the race did not race"

    # The calls spread: every child did a real share of the work.
    total = sum(used.values())
    assert all(share > 0.05 * total for share in used.values()), used

    # The shared store, read behind the workers' backs.
    url = store_url
    backend = url.split(":", 1)[0]
    store = WorkerStore(url)
    try:
        assert count_receipts(store) == EPISODES
        with store.engine.connect() as conn:
            credits = conn.execute(
                text("SELECT receipt_id, identity_key FROM credited_records")
            ).all()
            open_now = conn.execute(text("SELECT COUNT(*) FROM open_episodes")).scalar_one()
    finally:
        store.close()
    assert episodes_with_more_than_one_receipt(url) == {}
    stored = verify_rows(read_receipts(url), worker.trust)
    assert {r.receipt_id for r in stored.values()} == {
        won[0].receipt.receipt_id for won in race.receipts.values()
    }
    # One record credited per episode (200 rows written, 200 credits, no receipt twice), four
    # per identity; and nothing left open.
    assert len(credits) == EPISODES
    assert len({row.receipt_id for row in credits}) == EPISODES
    per_identity: dict[str, int] = defaultdict(int)
    for row in credits:
        per_identity[row.identity_key] += 1
    assert sorted(per_identity.values()) == [EPISODES // IDENTITIES] * IDENTITIES
    assert open_now == 0

    # SIGTERM to the supervisor stops every child, and it exits 0.
    assert terminate(worker) == 0
    assert wait_gone(children) == []
    shares = ", ".join(f"{used[pid]:.1f}" for pid in children)
    print(
        f"\n{PROCESSES} processes ({backend}): {EPISODES} "
        f"episodes x {RACERS} racers in {seconds:.1f} s; child CPU s {shares}; "
        f"{race.busy} identity-busy answers"
    )


def wait_for_pids(ready: WorkerProcess, old: list[int], timeout: float = 60.0) -> list[int]:
    """The ready file's pids once they differ from ``old`` (a child was replaced)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready.wait_ready()
        if ready.banner["pids"] != old:
            return list(ready.banner["pids"])
        time.sleep(0.1)
    pytest.fail(f"no replacement in {timeout:.0f} s: {ready.log_text()}")


def test_a_killed_child_is_replaced_and_a_killed_supervisor_leaves_no_child(
    data_dir: Path, tmp_path: Path
) -> None:
    worker = spawn_worker(data_dir, tmp_path / "ready.json", extra_args=["--processes", "2"])
    children: list[int] = []
    try:
        children = list(worker.wait_ready()["pids"])
        with worker.client() as client:
            client.begin(episode_id(0), worker.digest, {IDENTITY_KEY: patient(0)})
            write_triage(data_dir / "mockmed" / "mockmed.sqlite", patient(0))
            first = client.score(descriptor(worker.digest, episode_id(0)))

        os.kill(children[1], signal.SIGKILL)
        replaced = wait_for_pids(worker, children)
        assert replaced[0] == children[0]
        assert replaced[1] not in children
        assert worker.proc.poll() is None
        assert "process 1 pid" in worker.log_text()
        # Every fresh connection reaches a live process, which knows the receipt.
        assert health_answers(worker.target, 12) == 12
        for _ in range(6):
            with worker.client() as client:
                assert client.get_receipt(episode_id=episode_id(0)).envelope == first.envelope
        children = replaced

        # kill -9 of the supervisor: each child sees it gone and stops itself.
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        assert wait_gone(children) == [], "a child outlived its supervisor"
    finally:
        worker.close()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("flag", "env", "said"),
    [
        (["--processes", "0"], {}, "--processes must be from 1 to 64, got 0"),
        (["--processes", "-3"], {}, "--processes must be from 1 to 64, got -3"),
        ([], {"REWARDSEAL_WORKER_PROCESSES": "0"}, "REWARDSEAL_WORKER_PROCESSES must be from"),
        ([], {"REWARDSEAL_WORKER_PROCESSES": "two"}, "REWARDSEAL_WORKER_PROCESSES must be a whole"),
    ],
)
def test_a_process_count_below_one_is_refused(
    tmp_path: Path, flag: list[str], env: dict[str, str], said: str
) -> None:
    data_dir = tmp_path / "never-made"
    done = subprocess.run(
        [str(WORKER_CLI), "serve", "--data-dir", str(data_dir), "--port", "0", *flag],
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rewardseal-worker: {said}"), line
    assert not data_dir.exists(), "refused, yet it made the data dir"


@pytest.mark.parametrize("shares", [False, True], ids=["exclusive", "reuseport"])
def test_several_processes_refuse_a_port_another_program_holds(
    data_dir: Path, shares: bool
) -> None:
    with socket.socket() as other:
        # The other program may itself ask to share (gRPC's default): still not ours to join.
        if shares:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [str(WORKER_CLI), "serve", "--data-dir", str(data_dir), "--port", str(port), *THREE],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert (done.stdout + done.stderr).splitlines() == [
            f"rewardseal-worker: cannot listen on 127.0.0.1:{port}: "
            "the port is in use by another process (stop that process, or choose another --port)"
        ]
        # The other program still has every connection.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            accepted, _ = other.accept()
            accepted.close()
