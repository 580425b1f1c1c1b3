"""``make up`` / ``make status`` / ``make down`` (tools/stack.py) as real background processes.

The stack starts in a temporary run directory, answers health checks, pays an honest episode
whose write went through MockMed's REST API (the same SQLite database the worker's sql oracle
reads), says it is already up when started twice, and ``down`` leaves no process behind.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rewardseal.core.signing import TrustSet
from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.worker_client import WorkerClient, make_descriptor
from rewardseal.v1.enums_pb2 import RewardOutcome

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tools" / "stack.py"
CHECKPOINT = "policy_checkpoint_mockmed_0"

pytestmark = pytest.mark.slow


def run_stack(command: str, run_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(STACK), command, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
        timeout=400,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state != "Z"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any], str]]:
    run_dir = tmp_path / "run"
    # A variable meant for another deployment must not reach the stack's services.
    started = run_stack("up", run_dir, REWARDSEAL_WORKER_DB_URL="postgresql://nowhere.invalid/x")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        state = json.loads((run_dir / "stack.json").read_text())
        yield run_dir, state, started.stdout
    finally:
        stopped = run_stack("down", run_dir)
        assert stopped.returncode == 0, stopped.stderr


def test_up_status_score_down(stack: tuple[Path, dict[str, Any], str]) -> None:
    run_dir, state, printed = stack
    services = state["services"]
    tokens = state["tokens"]
    assert {"control", "worker"} <= set(services)
    assert stat.S_IMODE((run_dir / "stack.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for name, entry in services.items():
        assert (run_dir / f"{name}.pid").read_text().strip() == str(entry["pid"])
        assert alive(entry["pid"])
        assert entry["port"] > 0
    worker = services["worker"]
    assert worker["target"] == f"127.0.0.1:{worker['port']}"
    assert worker["contract_digest"].startswith("sha256:")
    # What `up` prints: grpcurl-style calls and the Python client, with the real values.
    assert f"grpcurl -plaintext {worker['target']} grpc.health.v1.Health/Check" in printed
    assert "rewardseal.v1.RewardWorkerService/ScoreEpisode" in printed
    assert f'WorkerClient("{worker["target"]}", token="{tokens["worker"]}"' in printed
    assert worker["contract_digest"] in printed
    # The worker's HTTP/JSON face too (docs/http.md), printed with its curl calls.
    assert f"curl -s {worker['http_url']}/health" in printed
    with urllib.request.urlopen(f"{worker['http_url']}/health", timeout=10) as response:
        assert json.loads(response.read())["reward_contract_digest"] == worker["contract_digest"]

    status = run_stack("status", run_dir)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("healthy") == len(services)

    again = run_stack("up", run_dir)
    assert again.returncode == 0
    assert "already up" in again.stdout

    patient = "patient-stack-test-0001"
    episode = "episode.stack.test.0001"
    trust = TrustSet([bytes.fromhex(worker["public_key"])])
    with WorkerClient(worker["target"], token=tokens["worker"], trust=trust) as client:
        client.begin(episode, worker["contract_digest"], {"patient_id": patient})
        record = {
            "patient_id": patient,
            "type": "Triage",
            "note": "Follow-up in 2 weeks.",
            "status": "open",
        }
        if "mockmed" in services:
            request = urllib.request.Request(
                f"{services['mockmed']['url']}/api/encounters",
                data=json.dumps(record).encode(),
                headers={
                    "authorization": f"Bearer {tokens['mockmed']}",
                    "content-type": "application/json",
                },
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 201
                assert json.loads(response.read())["banner"] == "Saved"
        else:
            from rewardseal_mockmed.seeding import write_encounter

            write_encounter(
                Path(worker["data_dir"]) / "mockmed" / "mockmed.sqlite",
                patient_id=patient,
                note=record["note"],
            )
        got = client.score(
            make_descriptor(
                episode_id=episode,
                policy_checkpoint_id=CHECKPOINT,
                policy_update=0,
                reward_contract_digest=worker["contract_digest"],
                oracle_identity={"patient_id": patient},
            )
        )
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert got.scalar == 1.0
    # Linked, the worker certifies under the certificate `up` had control issue (R-C-9).
    assert worker["certificate_id"]
    assert got.receipt.certificate_id == worker["certificate_id"]
    assert got.receipt.certified, list(got.receipt.certification_refusals)

    stopped = run_stack("down", run_dir)
    assert stopped.returncode == 0
    assert not any(alive(entry["pid"]) for entry in services.values())
    assert not (run_dir / "stack.json").exists()
    assert not list(run_dir.glob("*.pid"))
    assert run_stack("status", run_dir).returncode == 1
    # Keys and data stay for the next `up`.
    assert (Path(worker["data_dir"]) / "keys" / "worker.ed25519").exists()


def test_down_without_a_stack_is_harmless(tmp_path: Path) -> None:
    stopped = run_stack("down", tmp_path / "never-started")
    assert stopped.returncode == 0
    assert "not running" in stopped.stdout


def test_a_stale_pid_file_is_never_signalled(tmp_path: Path) -> None:
    """A pid file naming some other live process (here: this test) is not ours to stop."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "worker.pid").write_text(f"{os.getpid()}\n")
    stopped = run_stack("down", run_dir)
    assert stopped.returncode == 0
    assert "worker   not running" in stopped.stdout
    assert alive(os.getpid())


def test_a_revoked_stack_certificate_is_not_replaced_by_the_next_up(
    stack: tuple[Path, dict[str, Any], str],
) -> None:
    run_dir, state, _ = stack
    certificate_id = state["services"]["worker"]["certificate_id"]
    assert certificate_id
    target = state["services"]["control"]["target"]
    with ControlClient(target, token=state["tokens"]["control_admin"]) as admin:
        admin.revoke_certificate(certificate_id, reason="operator revoked it")
    assert run_stack("down", run_dir).returncode == 0
    again = run_stack("up", run_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    restarted = json.loads((run_dir / "stack.json").read_text())
    # Nothing issued behind the operator's back: no certificate, receipts uncertified.
    assert restarted["services"]["worker"]["certificate_id"] is None
    target = restarted["services"]["control"]["target"]
    with ControlClient(target, token=state["tokens"]["control_admin"]) as admin:
        digest = restarted["services"]["worker"]["contract_digest"]
        listed = [c.certificate_id for c in admin.certificates(reward_contract_digest=digest)]
    assert listed == [certificate_id]
