"""The system of record is probed at start and watched while serving (R-W-16).

A worker whose SoR does not answer refuses to start in one line (finding 7: it used to start,
say SERVING, and score every episode FAILED_PLATFORM, a wasted training run). A SoR that fails
later turns ``grpc.health.v1`` and ``GET /health`` NOT_SERVING, with the reason, while an episode
already begun is still answered, unscored and never 0; both turn SERVING again once it answers.
Real workers, real SQLite, a real MockMed read API refusing connections.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.http_worker import HttpWorker, http_worker
from support.mockmed_episodes import descriptor, write_triage

from rewardseal.core.errors import SystemOfRecordUnavailable
from rewardseal.core.receipts import is_unscored
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_server.cli_failures import EXIT_RUNTIME
from rewardseal_worker.app import start_worker
from rewardseal_worker.cli import main as worker_main
from rewardseal_worker.seed import (
    DATABASE_PATH,
    REST_BUNDLE,
    REST_TOKEN_ENV,
    REST_URL_ENV,
    SCREEN_PATH,
    TIER0_BUNDLE,
)
from rewardseal_worker.settings import resolve_settings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PATIENT = "patient-sor-later-0001"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(autouse=True)
def no_worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("REWARDSEAL_WORKER_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("oracle", ["sql", "screen_dump", "rest"])
def test_worker_with_an_unreachable_sor_refuses_to_start(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    data_dir: Path,
    oracle: str,
) -> None:
    contract = data_dir / "contracts" / "mockmed"
    if oracle == "sql":
        (data_dir / DATABASE_PATH).unlink()
    elif oracle == "screen_dump":
        (data_dir / SCREEN_PATH).unlink()
        contract = data_dir / TIER0_BUNDLE
    else:
        monkeypatch.setenv(REST_URL_ENV, f"http://127.0.0.1:{closed_port()}")
        monkeypatch.setenv(REST_TOKEN_ENV, "read-token-" + "r" * 24)
        contract = data_dir / REST_BUNDLE
    argv = ["serve", "--data-dir", str(data_dir), "--contract", str(contract), "--port", "0"]
    code = worker_main(argv)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == EXIT_RUNTIME, err
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"rewardseal-worker: the system of record does not answer ({oracle} oracle of "
    ), lines[0]
    assert "every episode would be failed_platform" in lines[0]
    assert "--db-url" not in lines[0], "the SoR is not the receipt store"
    if oracle == "sql":  # read-only: the probe never creates the SQLite file it cannot open
        assert not (data_dir / DATABASE_PATH).exists()


async def test_the_probe_refuses_in_the_library_too(data_dir: Path) -> None:
    (data_dir / DATABASE_PATH).unlink()
    settings = resolve_settings(data_dir=data_dir, port=0, env={})
    with pytest.raises(SystemOfRecordUnavailable) as caught:
        await start_worker(settings)
    assert caught.value.reason == "sor_unavailable"


def _grpc_health(worker: HttpWorker) -> int:
    with grpc.insecure_channel(worker.target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    status: int = answer.status
    return status


def test_sor_failing_later_turns_health_not_serving(seeded_template: Path, tmp_path: Path) -> None:
    with http_worker(seeded_template, tmp_path / "data") as worker:
        watch = worker.app.health_watch
        assert watch is not None
        database = worker.database
        with worker.grpc() as client:
            client.begin("episode.sor.later.0001", worker.digest, {"patient_id": PATIENT})
            write_triage(database, PATIENT)
            aside = database.with_name("moved-away.sqlite")
            shutil.move(database, aside)
            try:
                # One round of the watch (it runs every health interval on its own too).
                assert worker.run(watch.check()) is False
                assert watch.reason is not None
                assert watch.reason.startswith("the system of record does not answer: ")
                assert _grpc_health(worker) == NOT_SERVING
                answer = httpx.get(f"{worker.url}/health", timeout=10)
                assert answer.status_code == 503
                assert answer.json()["error"] == "unavailable"
                assert "the system of record does not answer" in answer.json()["detail"]
                # The episode already begun is answered, unscored, never 0 (R-W-9).
                scored = client.score(descriptor(worker.digest, "episode.sor.later.0001"))
                outcome = scored.receipt.reward_outcome
                assert outcome == RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
                assert is_unscored(scored.receipt)
                assert not scored.receipt.HasField("scalar_reward")
            finally:
                shutil.move(aside, database)
            assert worker.run(watch.check()) is True
            assert watch.reason is None
            assert _grpc_health(worker) == SERVING
            assert httpx.get(f"{worker.url}/health", timeout=10).status_code == 200
