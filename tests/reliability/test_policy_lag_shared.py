"""Bounded policy lag across processes and replicas (R-W-7, issue 27 item 1).

An async trainer scores episodes of step k while those of step k+1 are scored, on whichever
process or replica a call lands. The window (``u >= highest - max_policy_lag``) is decided
against the stored ledger, under its lock, when a batch commits, so it holds across the
children of ``serve --processes 2`` (SQLite and PostgreSQL) and across two replicas sharing one
PostgreSQL, each started with ``--max-policy-lag 1`` (the children get the flag from their
supervisor: a refusal names ``max_policy_lag`` 1, not the default 2).

Each round scores, all at once and spread over the processes, episodes of step k+1 and late
episodes of step k: every one is accepted, whatever order the commits take (k >= (k+1) - 1).
Once the round is in, an episode of step k-1 is refused ``policy_update_regressed`` with the
window in ErrorInfo (on replicas: by the replica that did not raise the highest). The stored
ledger ends at the last step and never moved back; every receipt verifies.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest
from reliability.test_processes import own_connection, wait_gone
from reliability.test_scale_out import replica_dir
from support.mockmed_episodes import descriptor
from support.postgres import PostgresServer
from support.worker_process import WorkerProcess, spawn_worker
from support.worker_store import count_receipts

from rewardseal.core.errors import PolicyUpdateRegressed
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt
from rewardseal_worker.store import WorkerStore

pytestmark = pytest.mark.slow

LAG = ("--max-policy-lag", "1")
ROUNDS = 4
PER_STEP = 6
"""Episodes of each of the two steps a round scores at once."""


def episode(step: int, n: int, tag: str) -> tuple[str, str]:
    """(episode id, patient) of the ``n``-th episode of ``step``; ``tag`` keeps ids apart."""
    return f"episode.lag-{tag}.{step:03d}.{n:03d}", f"patient-lag-{tag}-{step:03d}-{n:03d}"


async def score(client: AsyncWorkerClient, digest: str, step: int, n: int, tag: str) -> object:
    """Score one episode of ``step`` (its own identity, no begin); the receipt or the error."""
    episode_id, patient = episode(step, n, tag)
    request = descriptor(digest, episode_id, update=step, oracle_identity={"patient_id": patient})
    try:
        return await client.score(request)
    except PolicyUpdateRegressed as refused:
        return refused


async def interleave(
    ahead: Sequence[AsyncWorkerClient],
    behind: Sequence[AsyncWorkerClient],
    digest: str,
    tag: str,
) -> int:
    """Play the rounds: step k+1 through ``ahead``, step k through ``behind`` (round-robin),
    all at once; then step k-1 through ``behind``, which must be refused. Returns how many
    receipts were stored."""
    first = await score(ahead[0], digest, 1, 0, tag)
    assert isinstance(first, VerifiedReceipt), first
    stored = 1
    for k in range(1, ROUNDS + 1):
        calls = [score(ahead[n % len(ahead)], digest, k + 1, n, tag) for n in range(PER_STEP)]
        calls += [
            score(behind[n % len(behind)], digest, k, PER_STEP + n, tag) for n in range(PER_STEP)
        ]
        answers = await asyncio.gather(*calls)
        refused = [a for a in answers if not isinstance(a, VerifiedReceipt)]
        assert refused == [], f"round {k}: step {k} within the lag of {k + 1} was refused"
        updates = sorted(a.receipt.policy_update for a in answers if isinstance(a, VerifiedReceipt))
        assert updates == [k] * PER_STEP + [k + 1] * PER_STEP
        stored += len(answers)
        late = await score(behind[k % len(behind)], digest, k - 1, 99, tag)
        assert isinstance(late, PolicyUpdateRegressed), f"round {k}: step {k - 1} was scored"
        assert late.metadata == {
            "highest": str(k + 1),
            "max_policy_lag": "1",
            "lowest_accepted": str(k),
        }
    return stored


def ledger_and_count(url: str, digest: str) -> tuple[int | None, int]:
    """The shared store's highest update for ``digest`` and how many receipts it holds."""
    store = WorkerStore(url)
    try:
        return store.highest_policy_update(digest), count_receipts(store)
    finally:
        store.close()


@pytest.fixture
def two_processes(data_dir: Path, tmp_path: Path, store_url: str) -> Iterator[WorkerProcess]:
    """``serve --processes 2 --max-policy-lag 1`` over ``store_url``, ready; reaped after."""
    started = spawn_worker(
        data_dir, tmp_path / "ready.json", db_url=store_url, extra_args=["--processes", "2", *LAG]
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


async def test_interleaved_steps_across_processes(
    two_processes: WorkerProcess, store_url: str
) -> None:
    assert len(two_processes.banner["pids"]) == 2
    # Connections of their own: the kernel gives each to one of the two processes.
    clients = [own_connection(two_processes) for _ in range(8)]
    try:
        stored = await interleave(clients[:4], clients[4:], two_processes.digest, "proc")
    finally:
        for client in clients:
            await client.close()
    assert ledger_and_count(store_url, two_processes.digest) == (ROUNDS + 1, stored)


@pytest.fixture
def two_replicas(
    data_dir: Path, tmp_path: Path, postgres_server: PostgresServer
) -> Iterator[tuple[list[WorkerProcess], str]]:
    """Two ready workers with data dirs of their own over one fresh PostgreSQL database."""
    name = postgres_server.create_database()
    url = postgres_server.url(name)
    try:
        with ExitStack() as stack:
            first = spawn_worker(data_dir, tmp_path / "ready-0.json", db_url=url, extra_args=LAG)
            stack.callback(first.close)
            first.wait_ready()  # makes the token file and the schema
            other = spawn_worker(
                replica_dir(data_dir, tmp_path, 1),
                tmp_path / "ready-1.json",
                db_url=url,
                extra_args=LAG,
            )
            stack.callback(other.close)
            other.wait_ready()
            yield [first, other], url
    finally:
        postgres_server.discard_database(name)


async def test_interleaved_steps_across_replicas(
    two_replicas: tuple[list[WorkerProcess], str],
) -> None:
    (one, two), url = two_replicas
    assert one.digest == two.digest
    ahead, behind = one.async_client(timeout=60.0), two.async_client(timeout=60.0)
    try:
        # Replica one raises the highest; replica two scores the late steps and refuses the
        # step below the window, from the ledger it shares (it never scored the highest).
        stored = await interleave([ahead], [behind], one.digest, "replica")
    finally:
        await ahead.close()
        await behind.close()
    assert ledger_and_count(url, one.digest) == (ROUNDS + 1, stored)
