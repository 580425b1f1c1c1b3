"""Scale-out: three worker processes share one PostgreSQL receipt store (R-W-8).

The replicas serve one key, one bundle, one MockMed SQLite system of record and one PostgreSQL
database, each from a data dir of its own (a copy, as each pod of deploy/k8s has its own with
the shared key: one data dir serves one worker, R-W-15; its ``mockmed/`` links to the one SoR).
Each of 200 episodes begins on one replica (its baseline lives in the shared store), writes its
row, and is then scored by two replicas at once. Exactly one receipt per episode may exist: one
call wins, the other is answered ALREADY_EXISTS naming the winner's receipt, no episode is lost,
and every stored receipt verifies."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest
from support.mockmed_episodes import descriptor, write_triage
from support.postgres import PostgresServer
from support.receipt_store import (
    episodes_with_more_than_one_receipt,
    read_receipts,
    verify_rows,
)
from support.worker_process import WorkerProcess, spawn_worker, worker_process

from rewardseal.core.errors import DuplicateEpisode
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.mockmed import IDENTITY_KEY

REPLICAS = 3
EPISODES = 200
IN_FLIGHT = 24
"""Episodes scored at once (each by two replicas)."""
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED


def episode_id(index: int) -> str:
    return f"episode.scale.{index:04d}"


def patient(index: int) -> str:
    return f"patient-scale-{index:04d}"


def replica_dir(data_dir: Path, tmp_path: Path, index: int) -> Path:
    """A data dir of replica ``index``'s own: a copy of ``data_dir`` (key, token, bundles) whose
    ``mockmed/`` is a link to the first's, so every replica reads the one SoR."""
    own = tmp_path / f"replica-{index}"

    def leave_out(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == data_dir
        return [n for n in names if (top and n == "mockmed") or n.endswith(".lock")]

    shutil.copytree(data_dir, own, ignore=leave_out)
    (own / "mockmed").symlink_to(data_dir / "mockmed", target_is_directory=True)
    return own


@pytest.fixture
def replicas(
    data_dir: Path, tmp_path: Path, postgres_server: PostgresServer
) -> Iterator[tuple[list[WorkerProcess], str]]:
    """Three ready worker processes over ``data_dir`` and one fresh PostgreSQL database."""
    name = postgres_server.create_database()
    url = postgres_server.url(name)
    try:
        with ExitStack() as stack:
            # The first one starts alone (it makes the token file and the schema); the others
            # start together once it is ready.
            first = stack.enter_context(
                worker_process(data_dir, tmp_path / "ready-0.json", db_url=url)
            )
            others = [
                spawn_worker(
                    replica_dir(data_dir, tmp_path, n), tmp_path / f"ready-{n}.json", db_url=url
                )
                for n in range(1, REPLICAS)
            ]
            for other in others:
                stack.callback(other.close)
            for other in others:
                other.wait_ready()
            workers = [first, *others]
            assert len({w.banner["port"] for w in workers}) == REPLICAS
            assert len({w.digest for w in workers}) == 1
            assert len({w.banner["key_id"] for w in workers}) == 1
            yield workers, url
    finally:
        postgres_server.discard_database(name)


def count_receipts(url: str) -> int:
    """``SELECT COUNT(*) FROM receipts`` on the shared database, straight through psycopg."""
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
async def test_two_replicas_racing_on_every_episode_store_one_receipt_each(
    replicas: tuple[list[WorkerProcess], str],
) -> None:
    workers, url = replicas
    started = time.monotonic()
    digest = workers[0].digest
    database = Path(workers[0].banner["data_dir"]) / "mockmed" / "mockmed.sqlite"
    clients: list[AsyncWorkerClient] = [w.async_client(timeout=60.0) for w in workers]
    try:
        # Begin each episode on one replica; its baseline is stored where every replica sees it.
        begun = await asyncio.gather(
            *(
                clients[i % REPLICAS].begin(episode_id(i), digest, {IDENTITY_KEY: patient(i)})
                for i in range(EPISODES)
            )
        )
        assert all(answer.baseline_recorded for answer in begun)
        for index in range(EPISODES):
            write_triage(database, patient(index))

        # Score each episode on two replicas at once (never the one it began on for one).
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def race(index: int) -> tuple[int, list[VerifiedReceipt | BaseException]]:
            pair = (clients[index % REPLICAS], clients[(index + 1) % REPLICAS])
            wanted = descriptor(digest, episode_id(index))
            async with gate:
                answers = await asyncio.gather(
                    *(client.score(wanted) for client in pair), return_exceptions=True
                )
            return index, list(answers)

        raced = dict(await asyncio.gather(*(race(i) for i in range(EPISODES))))

        winners: dict[int, VerifiedReceipt] = {}
        won_by: Counter[int] = Counter()
        for index, answers in raced.items():
            won = [a for a in answers if isinstance(a, VerifiedReceipt)]
            refused = [a for a in answers if isinstance(a, DuplicateEpisode)]
            assert len(won) == 1, (episode_id(index), answers)
            assert len(refused) == 1, (episode_id(index), answers)
            winner = won[0]
            assert winner.receipt.episode_id == episode_id(index)
            assert refused[0].metadata["receipt_id"] == winner.receipt.receipt_id
            winners[index] = winner
            won_by[(index + answers.index(winner)) % REPLICAS] += 1

        # The third replica, which scored nothing for the episode, serves the same receipt.
        served = await asyncio.gather(
            *(
                clients[(i + 2) % REPLICAS].get_receipt(episode_id=episode_id(i))
                for i in range(EPISODES)
            )
        )
        for index, got in zip(range(EPISODES), served, strict=True):
            assert got.envelope == winners[index].envelope
    finally:
        await asyncio.gather(*(client.close() for client in clients))

    # The shared store: exactly one receipt per episode, none lost, every one verifies.
    assert count_receipts(url) == EPISODES
    assert episodes_with_more_than_one_receipt(url) == {}
    stored = verify_rows(read_receipts(url), workers[0].trust)
    assert set(stored) == {episode_id(i) for i in range(EPISODES)}
    for index, winner in winners.items():
        receipt = stored[episode_id(index)]
        assert receipt.receipt_id == winner.receipt.receipt_id
        assert receipt.reward_outcome == VERIFIED, RewardOutcome.Name(receipt.reward_outcome)
    assert all(w.proc.poll() is None for w in workers)
    print(
        f"\nscale-out: {EPISODES} episodes x 2 replicas in {time.monotonic() - started:.1f} s; "
        f"wins per replica {dict(sorted(won_by.items()))}"
    )
