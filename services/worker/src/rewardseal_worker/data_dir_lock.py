"""One worker per data directory and store: an exclusive ``flock`` held for the life of
``serve`` (R-W-15).

A data directory holds a worker's identity (its Ed25519 key, its token) and, by default, its
receipt store. Two workers started on one directory with one store would sign as one worker and
race on one store, silently. ``rewardseal-worker serve`` therefore takes an exclusive,
non-blocking lock in the data directory right after its ports are probed, before it makes the
key, seeds or opens a store, and holds it until it exits (the kernel releases it even after
``kill -9``). A second worker on the same directory and store refuses to start with one line
naming the directory and the pid that holds it.

The lock file is ``worker.lock`` for the default store (SQLite in the data dir), and
``worker-<digest>.lock`` for a store named by URL (the digest of its host, port and database or
its resolved file, never its password): a worker that names a store of its own beside the
first (the demo's tier-0 worker, which shares the seeded key and bundles deliberately) is a
different worker and is let through.

The processes of ``serve --processes N`` share the directory by design: the supervisor holds the
lock and its children, which it starts and stops, never take it. Library callers of
:func:`rewardseal_worker.app.start_worker` ask for the lock explicitly (tests run deliberate
second workers over one directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Final

from rewardseal.core.errors import DataDirInUse
from rewardseal_server.sqlstore import backend_of, normalize_url, sqlite_url
from rewardseal_worker.settings import DB_FILE
from rewardseal_worker.store.core import STORE_NAME

__all__ = ["LOCK_FILE", "DataDirLock", "lock_data_dir", "lock_file_name"]

LOCK_FILE: Final = "worker.lock"
"""The lock file in the data directory for the default store; it holds the holder's pid."""


def lock_file_name(data_dir: Path, db_url: str) -> str:
    """:data:`LOCK_FILE` for the default store, else one named for the store ``db_url`` names
    (its identity, not its spelling: driver and password do not count)."""
    if db_url == sqlite_url(data_dir / DB_FILE):
        return LOCK_FILE
    url = normalize_url(db_url, what=STORE_NAME)
    if backend_of(url) == "sqlite":
        file = Path(url.database or "").expanduser().resolve()
        if file == (data_dir / DB_FILE).resolve():
            return LOCK_FILE
        where = str(file)
    else:
        where = f"{url.host}:{url.port or 5432}/{url.database}"
    return f"worker-{hashlib.sha256(where.encode()).hexdigest()[:16]}.lock"


class DataDirLock:
    """A held data-directory lock; :meth:`release` lets it go (idempotent)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Let the lock go (closing the file releases the ``flock``)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_data_dir(data_dir: Path, db_url: str) -> DataDirLock:
    """Take the exclusive lock on ``data_dir`` (which exists: settings made it) and its store
    ``db_url``, and write this process's pid into the lock file.

    Raises:
        DataDirInUse: another process holds the lock.
    """
    path = data_dir / lock_file_name(data_dir, db_url)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise DataDirInUse(
            f"the data dir {data_dir} is in use by another worker{holder}: stop that worker, "
            "or give this one its own --data-dir"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return DataDirLock(path, fd)


def _holder(fd: int) -> str:
    """`` (pid N)`` as the holder wrote it, or nothing when it has not yet (or it is garbled)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode("ascii").strip())
        if pid > 0:
            return f" (pid {pid})"
    return ""
