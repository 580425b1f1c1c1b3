"""``rewardseal-worker serve`` as a real child process, for restart, crash and scale-out tests.

:func:`spawn_worker` starts the command line an operator runs (on port 0, with a ready file);
:meth:`WorkerProcess.wait_ready` waits for its banner; :meth:`WorkerProcess.kill` is ``kill -9``.
:func:`worker_process` wraps the three and always reaps the child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import AsyncWorkerClient, WorkerClient
from rewardseal_server.localstack import NotReady, wait_for_banner

WORKER_CLI = Path(sys.executable).with_name("rewardseal-worker")
READY_TIMEOUT_SECONDS = 60.0


def clean_env() -> dict[str, str]:
    """This environment without any ``REWARDSEAL_WORKER_*`` setting (flags only)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_WORKER_")}


@dataclass
class WorkerProcess:
    """A spawned worker; ``banner`` is its ready-file JSON once :meth:`wait_ready` returned."""

    proc: subprocess.Popen[bytes]
    ready: Path
    log_path: Path
    _log: IO[bytes]
    banner: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.banner['port']}"

    @property
    def token(self) -> str:
        return str(self.banner["token"])

    @property
    def digest(self) -> str:
        return str(self.banner["contract_digest"])

    @property
    def trust(self) -> TrustSet:
        return TrustSet([bytes.fromhex(self.banner["public_key"])])

    def log_text(self) -> str:
        """What the worker printed so far (for failure messages)."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> dict[str, Any]:
        """Block until the ready file appears; fail the test if the worker exits first."""
        try:
            self.banner = wait_for_banner(self.proc, self.ready, timeout)
        except NotReady as failed:
            if failed.exit_code is not None:
                pytest.fail(f"worker exited {failed.exit_code}: {self.log_text()}")
            pytest.fail(f"worker did not become ready in {timeout:.0f} s: {self.log_text()}")
        return self.banner

    def client(self, timeout: float = 20.0) -> WorkerClient:
        """A blocking client pinned to this worker's key."""
        return WorkerClient(self.target, token=self.token, trust=self.trust, timeout=timeout)

    def async_client(self, timeout: float = 20.0, retries: int = 3) -> AsyncWorkerClient:
        """An asyncio client pinned to this worker's key."""
        return AsyncWorkerClient(
            self.target, token=self.token, trust=self.trust, timeout=timeout, retries=retries
        )

    def kill(self) -> int:
        """``kill -9`` and reap; returns the exit status (``-SIGKILL`` unless it had exited)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)

    def close(self) -> None:
        """Kill the process if it still runs, reap it and close its log."""
        try:
            self.kill()
        finally:
            self._log.close()


def health_answers(target: str, calls: int) -> int:
    """How many of ``calls`` grpc.health.v1 checks, each on a fresh connection, say SERVING
    (a fresh connection may land on another process sharing the port)."""
    serving = 0
    for _ in range(calls):
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        serving += reply.status == health_pb2.HealthCheckResponse.SERVING
    return serving


def spawn_worker(
    data_dir: Path,
    ready: Path,
    *,
    db_url: str | None = None,
    extra_args: Sequence[str] = (),
) -> WorkerProcess:
    """Start ``rewardseal-worker serve`` over ``data_dir`` on a free port (does not wait)."""
    ready.unlink(missing_ok=True)
    log_path = ready.with_suffix(".log")
    log = log_path.open("wb")
    command = [
        str(WORKER_CLI),
        "serve",
        "--data-dir",
        str(data_dir),
        "--port",
        "0",
        "--ready-file",
        str(ready),
    ]
    if db_url is not None:
        command += ["--db-url", db_url]
    command += list(extra_args)
    try:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    except BaseException:
        log.close()
        raise
    return WorkerProcess(proc=proc, ready=ready, log_path=log_path, _log=log)


@contextmanager
def worker_process(
    data_dir: Path,
    ready: Path,
    *,
    db_url: str | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[WorkerProcess]:
    """A ready worker process over ``data_dir``; killed and reaped on exit."""
    worker = spawn_worker(data_dir, ready, db_url=db_url, extra_args=extra_args)
    try:
        worker.wait_ready()
        yield worker
    finally:
        worker.close()
