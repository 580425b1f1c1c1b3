"""Crash: ``kill -9`` the worker in the middle of a 2,000-episode run, restart it (R-W-8).

Several asyncio clients drive ``ScoreEpisodes`` batches at one worker process (SQLite store).
Once about a third of the episodes are stored, at a moment when some committed batch has not
been answered yet, the process gets SIGKILL, whatever it is doing. After a restart on the same
data dir:

* every receipt that was answered is still there (GetReceipt) and verifies;
* no episode has two receipts (SQL count by episode id);
* re-sending every unanswered episode completes the run: each gets a receipt, or is answered
  ALREADY_EXISTS when it had committed before the kill but its answer was lost, and then
  GetReceipt by episode id finds it.

A quarter of the episodes begin (baseline read) before the run and write their row: they must
come out VERIFIED even when scored after the restart, so the open registrations survive the
crash too. The others carry their identity in the descriptor, have no baseline, and come out
RECONCILIATION_REQUIRED (unscored; stored all the same).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import TypeVar

import pytest
from support.mockmed_episodes import descriptor, write_triage
from support.receipt_store import (
    episodes_with_more_than_one_receipt,
    read_receipts,
    verify_rows,
)
from support.worker_process import WorkerProcess, worker_process

from rewardseal.core.errors import DuplicateEpisode, RewardSealError
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_kit.mockmed import IDENTITY_KEY

T = TypeVar("T")
EPISODES = 2000
BEGUN_EVERY = 4
"""Every fourth episode begins and writes its row (VERIFIED); the rest have no baseline."""
BATCH = 25
CLIENTS = 4
KILL_AFTER = EPISODES // 3
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
RECONCILIATION_REQUIRED = RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED


def episode_id(index: int) -> str:
    return f"episode.crash.{index:05d}"


def patient(index: int) -> str:
    return f"patient-crash-{index:05d}"


def begun(index: int) -> bool:
    return index % BEGUN_EVERY == 0


def descriptor_for(digest: str, index: int) -> EpisodeDescriptor:
    if begun(index):
        return descriptor(digest, episode_id(index))
    return descriptor(digest, episode_id(index), oracle_identity={IDENTITY_KEY: patient(index)})


def batches(items: Sequence[T], size: int = BATCH) -> list[list[T]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def clients(worker: WorkerProcess) -> list[AsyncWorkerClient]:
    # No retries: a call cut by the kill must surface as unanswered, not wait for a worker.
    return [worker.async_client(timeout=30.0, retries=0) for _ in range(CLIENTS)]


async def close_all(opened: Sequence[AsyncWorkerClient]) -> None:
    await asyncio.gather(*(client.close() for client in opened))


async def begin_and_write(worker: WorkerProcess, database: Path) -> None:
    """BeginEpisode for every begun episode (baseline), then the honest write of each."""
    opened = clients(worker)
    try:
        indexes = [i for i in range(EPISODES) if begun(i)]
        for chunk in batches(indexes, 64):
            answers = await asyncio.gather(
                *(
                    opened[n % CLIENTS].begin(
                        episode_id(i), worker.digest, {IDENTITY_KEY: patient(i)}
                    )
                    for n, i in enumerate(chunk)
                )
            )
            assert all(answer.baseline_recorded for answer in answers)
    finally:
        await close_all(opened)
    for index in indexes:
        write_triage(database, patient(index))


class Killer:
    """SIGKILLs the worker once KILL_AFTER receipts are committed and some are unanswered.

    A thread polls the receipt store (read-only) and fires when it holds more receipts than the
    clients have been answered: a batch has committed and its answer is still on its way, the
    moment a crash loses answers. If polling never catches such a moment, the drivers kill
    at FALLBACK answers, still in the middle of the run.
    """

    FALLBACK = EPISODES // 2

    def __init__(self, worker: WorkerProcess, store: Path, answered: dict[int, VerifiedReceipt]):
        self.worker = worker
        self.store = store
        self.answered = answered
        self.fired = threading.Event()
        self.lost_answers = False
        """True when the kill came while a committed batch was still unanswered."""
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="killer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.done.set()
        self._thread.join(timeout=30)

    def kill(self) -> None:
        with self._lock:
            if not self.fired.is_set():
                self.fired.set()
                assert self.worker.kill() == -signal.SIGKILL

    def _stored(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0])

    def _watch(self) -> None:
        uri = f"file:{self.store}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            while not self.done.is_set() and not self.fired.is_set():
                if self._stored(conn) >= KILL_AFTER and self._stored(conn) > len(self.answered):
                    # Freeze the worker: an answer not yet written stays unwritten. Answers
                    # already on their way get a moment to arrive; if a committed receipt is
                    # still unanswered then, crash now, else thaw and watch on.
                    self.worker.proc.send_signal(signal.SIGSTOP)
                    time.sleep(0.2)
                    if self._stored(conn) > len(self.answered):
                        self.lost_answers = True
                        self.kill()
                    else:
                        self.worker.proc.send_signal(signal.SIGCONT)
                time.sleep(0.001)


async def run_until_killed(
    worker: WorkerProcess, store: Path
) -> tuple[dict[int, VerifiedReceipt], bool]:
    """Score every episode in batches from several clients until the worker is killed.

    Returns the episodes that were answered (a batch whose call the kill cut is unanswered),
    and whether the kill came while a committed batch was still unanswered.
    """
    pending = batches(range(EPISODES))
    answered: dict[int, VerifiedReceipt] = {}
    killer = Killer(worker, store, answered)

    async def drive(client: AsyncWorkerClient) -> None:
        while pending and not killer.fired.is_set():
            batch = pending.pop(0)
            try:
                results = await client.score_many([descriptor_for(worker.digest, i) for i in batch])
            except RewardSealError:
                assert killer.fired.is_set(), "a call failed before the kill"
                return
            for index, result in zip(batch, results, strict=True):
                assert isinstance(result, VerifiedReceipt), (episode_id(index), result)
                answered[index] = result
            if len(answered) >= Killer.FALLBACK:
                killer.kill()

    opened = clients(worker)
    killer.start()
    try:
        await asyncio.gather(*(drive(client) for client in opened))
    finally:
        killer.stop()
        await close_all(opened)
    assert killer.fired.is_set(), "the run finished before the kill"
    return answered, killer.lost_answers


async def resend(
    worker: WorkerProcess, indexes: Sequence[int]
) -> tuple[dict[int, VerifiedReceipt], dict[int, str]]:
    """Score ``indexes`` again; (receipts answered now, receipt id of each ALREADY_EXISTS)."""
    fresh: dict[int, VerifiedReceipt] = {}
    lost: dict[int, str] = {}
    opened = clients(worker)
    try:
        work = batches(indexes)

        async def drive(client: AsyncWorkerClient) -> None:
            while work:
                batch = work.pop(0)
                results = await client.score_many([descriptor_for(worker.digest, i) for i in batch])
                for index, result in zip(batch, results, strict=True):
                    if isinstance(result, DuplicateEpisode):
                        lost[index] = result.metadata["receipt_id"]
                    else:
                        assert isinstance(result, VerifiedReceipt), (episode_id(index), result)
                        fresh[index] = result

        await asyncio.gather(*(drive(client) for client in opened))
    finally:
        await close_all(opened)
    return fresh, lost


async def get_all(
    worker: WorkerProcess, *, receipt_ids: Sequence[str] = (), episode_ids: Sequence[str] = ()
) -> list[VerifiedReceipt]:
    """GetReceipt (verified by the client) for each id, a few clients at a time."""
    opened = clients(worker)
    try:
        calls = [("receipt", r) for r in receipt_ids] + [("episode", e) for e in episode_ids]
        got: list[VerifiedReceipt] = []
        for chunk in batches(calls, 64):
            got += await asyncio.gather(
                *(
                    opened[n % CLIENTS].get_receipt(receipt_id=value)
                    if kind == "receipt"
                    else opened[n % CLIENTS].get_receipt(episode_id=value)
                    for n, (kind, value) in enumerate(chunk)
                )
            )
        return got
    finally:
        await close_all(opened)


@pytest.mark.slow
async def test_kill_9_mid_run_loses_no_answered_receipt(data_dir: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    database = data_dir / "mockmed" / "mockmed.sqlite"
    store_url = f"sqlite:///{data_dir / 'worker.sqlite'}"

    with worker_process(data_dir, tmp_path / "ready-1.json") as first:
        trust = first.trust
        await begin_and_write(first, database)
        answered, lost_answers = await run_until_killed(first, data_dir / "worker.sqlite")
        assert first.proc.returncode == -signal.SIGKILL
    unanswered = [i for i in range(EPISODES) if i not in answered]
    assert 0 < len(answered) < EPISODES
    killed_at = time.monotonic() - started

    # On disk, before any restart: every answered receipt, each episode at most once.
    stored = verify_rows(read_receipts(store_url), trust)
    assert episodes_with_more_than_one_receipt(store_url) == {}
    for index, got in answered.items():
        assert stored[episode_id(index)].receipt_id == got.receipt.receipt_id
    committed_unanswered = sorted(set(stored) - {episode_id(i) for i in answered})
    assert bool(committed_unanswered) == lost_answers

    with worker_process(data_dir, tmp_path / "ready-2.json") as second:
        assert second.trust.key_ids == trust.key_ids  # the same key after the crash
        # Every answered receipt is still served, byte for byte, and verifies.
        again = await get_all(
            second, receipt_ids=[got.receipt.receipt_id for got in answered.values()]
        )
        for got, served in zip(answered.values(), again, strict=True):
            assert served.envelope == got.envelope

        # Re-send everything unanswered: the lost answers come back as ALREADY_EXISTS.
        fresh, lost = await resend(second, unanswered)
        assert set(fresh) | set(lost) == set(unanswered)
        assert not set(fresh) & set(lost)
        assert sorted(episode_id(i) for i in lost) == committed_unanswered
        recovered = await get_all(second, episode_ids=[episode_id(i) for i in lost])
        for (index, receipt_id), got in zip(lost.items(), recovered, strict=True):
            assert got.receipt.receipt_id == receipt_id
            assert got.receipt.episode_id == episode_id(index)

    # The run is complete: exactly one verified receipt per episode, with the right outcome.
    final = verify_rows(read_receipts(store_url), trust)
    assert episodes_with_more_than_one_receipt(store_url) == {}
    assert set(final) == {episode_id(i) for i in range(EPISODES)}
    outcomes = {i: final[episode_id(i)].reward_outcome for i in range(EPISODES)}
    wrong = {
        i: RewardOutcome.Name(o)
        for i, o in outcomes.items()
        if o != (VERIFIED if begun(i) else RECONCILIATION_REQUIRED)
    }
    assert wrong == {}
    for index, got in {**answered, **fresh}.items():
        assert final[episode_id(index)].receipt_id == got.receipt.receipt_id

    elapsed = time.monotonic() - started
    print(
        f"\ncrash run: {len(answered)} answered before the kill at {killed_at:.1f} s, "
        f"{len(lost)} committed but unanswered, {len(fresh)} scored after the restart; "
        f"{elapsed:.1f} s in all"
    )
