"""One worker per data dir and store (R-W-15), with real ``rewardseal-worker serve`` processes:
a second worker on a data dir another holds refuses to start in one line naming the dir and the
holder's pid, and the first keeps serving (finding 7: it used to start silently and share the
key and the store); the processes of ``--processes N`` share it by design; the lock goes with
the worker that held it, even after ``kill -9``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.worker_process import clean_env, health_answers, spawn_worker, worker_process

from rewardseal_server.sqlstore import sqlite_url

BIN = Path(sys.executable).parent
WORKER = str(BIN / "rewardseal-worker")
CALLS = 5


def run_second(data_dir: Path, *extra: str) -> tuple[int, list[str]]:
    """A second ``serve`` on ``data_dir`` (its own free port) run to its end: (status, lines)."""
    done = subprocess.run(
        [WORKER, "serve", "--data-dir", str(data_dir), "--port", "0", *extra],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


def assert_held(data_dir: Path, pid: int, code: int, lines: list[str]) -> None:
    assert code == 2, lines
    assert lines == [
        f"rewardseal-worker: the data dir {data_dir.resolve()} is in use by another worker "
        f"(pid {pid}): stop that worker, or give this one its own --data-dir"
    ]


def test_second_worker_on_a_data_dir_refuses_to_start(data_dir: Path, tmp_path: Path) -> None:
    with worker_process(data_dir, tmp_path / "first.json") as first:
        code, lines = run_second(data_dir)
        assert_held(data_dir, first.proc.pid, code, lines)
        # The same store under another spelling of its path (a symlink) is the same store.
        (tmp_path / "link").symlink_to(data_dir)
        spelled = sqlite_url(tmp_path / "link" / "worker.sqlite")
        code, lines = run_second(data_dir, "--db-url", spelled)
        assert code == 2, lines
        assert "is in use by another worker" in lines[0], lines
        assert health_answers(first.target, CALLS) == CALLS
        assert first.proc.poll() is None, "the first worker kept serving"
        # A worker naming a store of its own beside the first (the demo's tier-0 worker shares
        # the seeded key and bundles deliberately) is another worker, let through.
        own = sqlite_url(tmp_path / "own-store.sqlite")
        with worker_process(data_dir, tmp_path / "own.json", db_url=own) as beside:
            assert health_answers(beside.target, CALLS) == CALLS
        assert first.kill() != 0
    # kill -9 released the lock with the process: the next worker starts.
    with worker_process(data_dir, tmp_path / "next.json") as after:
        assert health_answers(after.target, CALLS) == CALLS


def test_processes_share_the_lock_their_supervisor_holds(data_dir: Path, tmp_path: Path) -> None:
    first = spawn_worker(data_dir, tmp_path / "three.json", extra_args=("--processes", "2"))
    try:
        banner = first.wait_ready()
        assert len(banner["pids"]) == 2
        code, lines = run_second(data_dir)
        assert_held(data_dir, first.proc.pid, code, lines)
        assert health_answers(first.target, CALLS) == CALLS
    finally:
        first.close()
