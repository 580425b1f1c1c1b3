"""Local service processes: start a service's console script on a free loopback port, stop it.

Every rewardseal service (``rewardseal-worker``, ``rewardseal-control``, ``rewardseal-mockmed``)
has a ``serve`` subcommand that takes ``--port 0`` and ``--ready-file F``: it binds a free port
and then writes a JSON banner (port, digests, key, ...) to ``F``. :func:`spawn` and
:func:`wait_ready` are the two halves of starting one that way; :class:`LocalServices` starts
several as children of the calling process and stops them all when its ``with`` block ends
(also on errors). The client package never imports a service package: it runs their console
scripts, found next to ``sys.executable``.

Services inherit no ``REWARDSEAL_*`` or ``MOCKMED_*`` variable from the caller's environment
(:func:`base_env`), so a shell set up for another deployment cannot point them at it; they get
exactly the variables their caller passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from rewardseal.core.errors import Unavailable
from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.tls import ClientTls

__all__ = [
    "BIN",
    "ENROLLMENT_ENV",
    "HOST",
    "INHERITED_PREFIXES",
    "POLL_SECONDS",
    "STOP_TIMEOUT_SECONDS",
    "LocalServices",
    "base_env",
    "enroll_worker",
    "log_tail",
    "serve_command",
    "spawn",
    "wait_ready",
]

BIN: Final = Path(sys.executable).parent
"""Where the console scripts are: beside the interpreter running this process."""
HOST: Final = "127.0.0.1"
INHERITED_PREFIXES: Final = ("REWARDSEAL_", "MOCKMED_")
POLL_SECONDS: Final = 0.1
STOP_TIMEOUT_SECONDS: Final = 20.0
ENROLLMENT_ENV: Final = "REWARDSEAL_WORKER_CONTROL_ENROLLMENT_TOKEN"
"""The worker's variable for its one-time enrollment credential (docs/spec.md R-C-11)."""


def enroll_worker(
    target: str,
    admin_token: str,
    contract_digests: Sequence[str],
    *,
    tls: ClientTls | None = None,
    reason: str = "local stack",
) -> dict[str, str]:
    """Make a one-time enrollment credential at control with its admin credential, for one
    worker about to start on ``contract_digests``; the variables that hand it to the worker.

    What a local stack does in place of an operator's ``rewardseal-control keys enroll``: the
    worker's key is admitted the moment it registers (R-C-11), with no manual step, and the
    admin credential stays on this side (the worker gets the single-use credential only).

    Raises:
        RewardSealError: control refused or could not be reached.
    """
    with ControlClient(target, token=admin_token, timeout=20.0, tls=tls) as control:
        answer = control.create_enrollment(contract_digests, ttl_seconds=3600, reason=reason)
    return {ENROLLMENT_ENV: answer.enrollment_credential}


def serve_command(script: str, ready_file: Path, *args: str) -> list[str]:
    """``<BIN>/<script> serve <args> --host 127.0.0.1 --port 0 --ready-file <ready_file>``."""
    return [
        str(BIN / script),
        "serve",
        *args,
        "--host",
        HOST,
        "--port",
        "0",
        "--ready-file",
        str(ready_file),
    ]


def base_env() -> dict[str, str]:
    """The caller's environment without any ``REWARDSEAL_*`` or ``MOCKMED_*`` variable."""
    return {
        name: value for name, value in os.environ.items() if not name.startswith(INHERITED_PREFIXES)
    }


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of the log at ``path`` ("(no log)" when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def spawn(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path,
    log_file: Path,
    own_session: bool,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with :func:`base_env` plus ``env``; stdout and stderr go to ``log_file``.

    ``own_session`` True puts it in a new session, so it outlives the caller's terminal.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            list(command),
            env={**base_env(), **env},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )


class NotReady(Exception):
    """A process wrote no banner: it exited (``exit_code``), or is still starting when the
    wait ran out (``exit_code`` None)."""

    def __init__(self, exit_code: int | None) -> None:
        """Record how the wait ended."""
        super().__init__("exited" if exit_code is not None else "timed out")
        self.exit_code = exit_code


def wait_for_banner(
    process: subprocess.Popen[Any], ready_file: Path, timeout: float
) -> dict[str, Any]:
    """The JSON object ``process`` writes to ``ready_file`` once it serves.

    The one wait for a started service: tools, tests and benchmarks turn :class:`NotReady`
    into their own failure. A file that does not parse yet is read again, not trusted.

    Raises:
        NotReady: the process exited first, or wrote no banner within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if ready_file.exists():
            try:
                banner = json.loads(ready_file.read_text())
            except ValueError:
                banner = None
            if isinstance(banner, dict):
                return banner
        code = process.poll()
        if code is not None:
            raise NotReady(code)
        if time.monotonic() > deadline:
            raise NotReady(None)
        time.sleep(POLL_SECONDS)


def wait_ready(
    process: subprocess.Popen[bytes],
    name: str,
    ready_file: Path,
    log_file: Path,
    timeout: float,
) -> dict[str, Any]:
    """The banner ``process`` writes to ``ready_file`` once it serves.

    Raises:
        Unavailable: the process exited first, or wrote no banner within ``timeout`` seconds
            (the message ends with the end of its log).
    """
    try:
        return wait_for_banner(process, ready_file, timeout)
    except NotReady as failed:
        if failed.exit_code is not None:
            raise Unavailable(
                f"{name} exited with status {failed.exit_code} while starting; the end of "
                f"{log_file}:\n{log_tail(log_file)}"
            ) from None
        raise Unavailable(
            f"{name} did not become ready within {timeout:.0f} s; the end of {log_file}:\n"
            f"{log_tail(log_file)}"
        ) from None


class LocalServices:
    """Services started as children of this process in ``run_dir``; all stopped on exit.

    ``run_dir/<name>.ready.json`` and ``run_dir/logs/<name>.log`` per service. Leaving the
    ``with`` block (normally, on an error, or on an exception a SIGTERM handler raises) sends
    SIGTERM to every started service, newest first, and SIGKILL to any still running
    :data:`STOP_TIMEOUT_SECONDS` later.
    """

    def __init__(self, run_dir: Path) -> None:
        """Keep ready files and logs in ``run_dir`` (created 0700 if missing)."""
        self.run_dir = run_dir
        self._started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> LocalServices:
        """Create the run directory."""
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop every service this object started."""
        self.stop_all()

    def ready_file(self, name: str) -> Path:
        """Where service ``name`` writes its banner."""
        return self.run_dir / f"{name}.ready.json"

    def log_file(self, name: str) -> Path:
        """Where service ``name`` logs."""
        return self.run_dir / "logs" / f"{name}.log"

    def start(
        self, name: str, command: Sequence[str], env: Mapping[str, str], timeout: float
    ) -> dict[str, Any]:
        """Start ``command`` as service ``name`` and return its banner (``pid`` added).

        Raises:
            Unavailable: it did not start (see :func:`wait_ready`); it is stopped on exit.
        """
        ready = self.ready_file(name)
        ready.unlink(missing_ok=True)
        log = self.log_file(name)
        process = spawn(command, env, cwd=self.run_dir, log_file=log, own_session=False)
        self._started.append((name, process))
        banner = wait_ready(process, name, ready, log, timeout)
        banner["pid"] = process.pid
        return banner

    def stop_all(self) -> None:
        """SIGTERM every running service (newest first), SIGKILL after the grace period."""
        started, self._started = self._started, []
        for _, process in reversed(started):
            if process.poll() is None:
                process.terminate()
        for _, process in reversed(started):
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
