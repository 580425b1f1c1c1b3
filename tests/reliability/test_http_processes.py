"""``serve --processes N --http-port P``: every process serves the HTTP face too, on one shared
port (SO_REUSEPORT, reserved by the supervisor like the gRPC port), over the one store, so an
episode scored through any process has exactly one receipt (R-W-8) and a race of duplicate
POSTs on separate connections (the kernel gives each connection to one process) pays once.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.worker_process import WorkerProcess, spawn_worker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT"),
]

EPISODES = 6
RACERS = 4


@pytest.fixture
def worker(data_dir: Path, tmp_path: Path) -> Iterator[WorkerProcess]:
    started = spawn_worker(
        data_dir, tmp_path / "ready.json", extra_args=["--processes", "2", "--http-port", "0"]
    )
    try:
        started.wait_ready()
        yield started
    finally:
        if started.proc.poll() is None:
            started.proc.send_signal(signal.SIGTERM)
            started.proc.wait(timeout=60)
        started.close()


async def test_every_process_serves_http_and_a_race_pays_once(
    worker: WorkerProcess, data_dir: Path
) -> None:
    banner = worker.banner
    assert banner["processes"] == 2
    url = f"http://127.0.0.1:{banner['http_port']}"
    # A fresh connection per request: the kernel spreads connections, not requests.
    headers = {"authorization": f"Bearer {worker.token}", "connection": "close"}
    database = data_dir / "mockmed" / "mockmed.sqlite"

    async def play(client: httpx.AsyncClient, index: int) -> set[str]:
        episode, patient = f"episode.httpproc.{index:04d}", f"patient-httpproc-{index:04d}"
        begun = await client.post(
            "/v1/episodes",
            json={
                "episode_id": episode,
                "reward_contract_digest": worker.digest,
                "oracle_identity": {"patient_id": patient},
            },
        )
        assert begun.status_code == 200, begun.text
        await asyncio.to_thread(write_triage, database, patient)
        body = {
            "episode_id": episode,
            "policy_checkpoint_id": CHECKPOINT,
            "policy_update": 0,
            "reward_contract_digest": worker.digest,
        }
        answers = await asyncio.gather(
            *(client.post("/v1/rewards", json=body) for _ in range(RACERS))
        )
        paid = [a.json()["receipt"] for a in answers if a.status_code == 200]
        refused = [a.json() for a in answers if a.status_code != 200]
        assert len(paid) == 1, [a.text for a in answers]
        assert paid[0]["reward_outcome"] == "verified"
        assert all(r["error"] == "duplicate_episode" for r in refused), refused
        assert {r["receipt_id"] for r in refused} <= {paid[0]["receipt_id"]}
        fetched = await client.get(f"/v1/rewards/{paid[0]['receipt_id']}")
        assert fetched.json()["receipt"] == paid[0]
        return {paid[0]["receipt_id"]}

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        health = await client.get("/health")
        assert health.json()["reward_contract_digest"] == worker.digest
        receipts = await asyncio.gather(*(play(client, i) for i in range(EPISODES)))
    assert len(set().union(*receipts)) == EPISODES
