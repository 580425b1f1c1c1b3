"""``serve --processes 2 --metrics-port P --log-format json`` as an operator runs it: process i
serves /metrics on P + i with counters of its own (their sum is what the worker did), the banner
names every URL, and every log line of the supervisor and its children is one JSON object."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import pytest
from support.metrics_scrape import matching, scrape_sync
from support.mockmed_episodes import descriptor, write_triage
from support.worker_process import spawn_worker

from rewardseal_mockmed.contract import IDENTITY_KEY

RECEIPTS = "rewardseal_worker_receipts_total"
pytestmark = pytest.mark.slow  # three processes start (about 5 s on a quiet 2-core machine)


def free_ports() -> tuple[int, int]:
    """A gRPC port G and a metrics port P with P + 1 free too, all three held at once while
    chosen (so the worker, started with all of them fixed, binds no port of its choosing that
    could land on one of them)."""
    for _ in range(50):
        with socket.socket() as grpc_port, socket.socket() as first, socket.socket() as second:
            grpc_port.bind(("127.0.0.1", 0))
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return int(grpc_port.getsockname()[1]), port
    raise AssertionError("no two consecutive free ports")


def test_each_process_serves_its_own_metrics_and_logs_json(data_dir: Path, tmp_path: Path) -> None:
    grpc_port, port = free_ports()
    worker = spawn_worker(
        data_dir,
        tmp_path / "ready.json",
        extra_args=[
            *("--port", str(grpc_port), "--processes", "2"),
            *("--metrics-port", str(port), "--log-format", "json"),
        ],
    )
    try:
        banner = worker.wait_ready()
        urls = banner["metrics_urls"]
        assert urls == [
            f"http://127.0.0.1:{port}/metrics",
            f"http://127.0.0.1:{port + 1}/metrics",
        ]
        with worker.client() as client:
            for n in range(3):
                patient = f"patient-processes-metrics-{n}"
                client.begin(f"episode.pm.{n}", worker.digest, {IDENTITY_KEY: patient})
                write_triage(data_dir / "mockmed" / "mockmed.sqlite", patient)
                client.score(descriptor(worker.digest, f"episode.pm.{n}"))
        # The kernel spreads connections over the processes: the sum is what was scored.
        total = sum(sum(matching(scrape_sync(url), RECEIPTS).values()) for url in urls)
        assert total == 3
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=60) == 0
        text = worker.log_text()
    finally:
        if worker.proc.poll() is None:
            worker.kill()
        worker.close()
    logged = [line for line in text.splitlines() if line.startswith("{")]
    assert logged, text
    documents = [json.loads(line) for line in logged]
    assert {d["process"] for d in documents if "process" in d} <= {"process 0", "process 1"}
    # Nothing else on the log but the banner lines the supervisor prints for people.
    others = [line for line in text.splitlines() if not line.startswith("{")]
    assert all(line.startswith(("rewardseal-worker", "  ")) for line in others), others
