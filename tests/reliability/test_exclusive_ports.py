"""A service's port is its own: a second ``serve`` on a port in use refuses to start.

gRPC sets SO_REUSEPORT unless told not to, so a second worker (or control plane) used to bind the
same port, print that it served, and silently take a share of the callers. Each test here starts
the real console script, starts it again on the port the first one bound, and checks that the
second exits with status 2 and one line naming ``127.0.0.1:<port>``, and that the first still
answers every call afterwards (a share of them would go nowhere if the second had bound).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.mockmed_episodes import descriptor, write_triage
from support.worker_process import clean_env, health_answers, worker_process

from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import RewardOutcome

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
CALLS = 20
"""Calls made to the first server after the second tried to start, each on a new connection."""


def refusal(script: str, port: int) -> str:
    return (
        f"{script}: cannot listen on 127.0.0.1:{port}: the port is in use by another process "
        "(stop that process, or choose another --port)"
    )


def run_second(command: Sequence[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run a second ``serve`` to its end; (exit status, its non-empty output lines)."""
    done = subprocess.run(
        list(command), env=env, capture_output=True, text=True, timeout=120, check=False
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode, lines


def assert_refused(script: str, port: int, code: int, lines: list[str]) -> None:
    assert code == 2, lines
    assert lines == [refusal(script, port)]


@contextmanager
def serving(command: Sequence[str], ready: Path, env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """Start ``command`` (a ``serve`` with ``--ready-file ready``); yield its banner; stop it."""
    log = ready.with_suffix(".log")
    with log.open("wb") as out:
        process = subprocess.Popen(list(command), env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        yield json.loads(ready.read_text())
        assert process.poll() is None, "the first server died"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_second_worker_on_a_bound_port_refuses_to_start(data_dir: Path, tmp_path: Path) -> None:
    with worker_process(data_dir, tmp_path / "first.json") as first:
        port = int(first.banner["port"])
        second = [str(BIN / "rewardseal-worker"), "serve", "--data-dir", str(data_dir)]
        second += ["--port", str(port)]
        code, lines = run_second(second, clean_env())
        assert_refused("rewardseal-worker", port, code, lines)
        # Every caller still reaches the first worker, and it still scores.
        assert health_answers(first.target, CALLS) == CALLS
        for index in range(CALLS):
            with grpc.insecure_channel(first.target) as channel:
                reply = pb_grpc.RewardWorkerServiceStub(channel).Health(
                    pb.HealthRequest(), timeout=10
                )
            assert reply.issuer_key_id == first.banner["key_id"], index
        with first.client() as client:
            client.begin("episode.ports.0001", first.digest, {"patient_id": "patient-ports-0001"})
            write_triage(data_dir / "mockmed" / "mockmed.sqlite", "patient-ports-0001")
            scored = client.score(descriptor(first.digest, "episode.ports.0001"))
        assert scored.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED


def test_second_control_plane_on_a_bound_port_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_CONTROL_")}
    data_dir = tmp_path / "control"
    script = str(BIN / "rewardseal-control")
    serve = [script, "serve", "--data-dir", str(data_dir)]
    ready = tmp_path / "first.json"
    with serving([*serve, "--port", "0", "--ready-file", str(ready)], ready, env) as banner:
        port = int(banner["port"])
        code, lines = run_second([*serve, "--port", str(port)], env)
        assert_refused("rewardseal-control", port, code, lines)
        assert health_answers(banner["target"], CALLS) == CALLS
        where = ["--data-dir", str(data_dir)]
        for index in range(3):
            listed = subprocess.run(
                [script, "keys", "list", "--json", "--target", banner["target"], *where],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert listed.returncode == 0, (index, listed.stderr)
            keys = json.loads(listed.stdout)["keys"]
            assert [k["key_id"] for k in keys] == [banner["organization_key_id"]]


def test_second_mockmed_on_a_bound_port_refuses_to_start(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOCKMED_", "REWARDSEAL_"))}
    env["MOCKMED_TOKEN"] = token
    script = str(BIN / "rewardseal-mockmed")
    first = [script, "serve", "--db-url", f"sqlite:///{tmp_path / 'mockmed.sqlite'}"]
    ready = tmp_path / "first.json"
    with serving([*first, "--port", "0", "--ready-file", str(ready)], ready, env) as banner:
        port = int(banner["port"])
        code, lines = run_second([*first, "--port", str(port)], env)
        assert_refused("rewardseal-mockmed", port, code, lines)
        for index in range(CALLS):
            request = urllib.request.Request(
                f"{banner['url']}/api/encounters?patient_id=patient-ports-{index:04d}",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200, index
                assert json.loads(response.read()) == {"encounters": []}
