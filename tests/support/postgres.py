"""A throwaway PostgreSQL server for tests: one per test session, a fresh database per test.

The server runs from the locally installed binaries (``initdb``, ``pg_ctl``, ``postgres``) in a
temporary directory, listens on 127.0.0.1 on a free port, puts its unix socket in that
directory, and trusts local connections. PostgreSQL refuses to run as root, so when the tests run
as root the server runs as the ``postgres`` system user (created with ``useradd`` if missing).
Durability settings are the defaults (``fsync`` stays on); only ``initdb`` skips its final sync.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

SERVER_USER = "postgres"
SUPERUSER = "postgres"
_BINARIES = ("initdb", "pg_ctl", "postgres")


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not installed here."""


def find_bindir() -> Path | None:
    """The directory holding initdb/pg_ctl/postgres: $REWARDSEAL_PG_BINDIR, PATH, or Debian's."""
    candidates: list[Path] = []
    override = os.environ.get("REWARDSEAL_PG_BINDIR")
    if override:
        candidates.append(Path(override))
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(found).resolve().parent)
    candidates.extend(Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in _BINARIES):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, started and stopped explicitly."""

    def __init__(self, bindir: Path | None = None) -> None:
        """Locate the binaries; raise :class:`PostgresUnavailable` if they are missing."""
        found = bindir or find_bindir()
        if found is None:
            raise PostgresUnavailable(
                "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH, in "
                "/usr/lib/postgresql/*/bin or in $REWARDSEAL_PG_BINDIR"
            )
        self.bindir = found
        self.port = 0
        self.root: Path | None = None
        self._run_as: str | None = None
        # CREATE DATABASE costs a few hundred ms (it copies template1 and syncs); a few are
        # made ahead, in parallel, so that a test rarely waits for its fresh database.
        self._spares: deque[Future[str]] = deque()
        self._maker: ThreadPoolExecutor | None = None

    # -------------------------------------------------------------- process control

    @property
    def datadir(self) -> Path:
        """The cluster's data directory."""
        assert self.root is not None, "server not started"
        return self.root / "data"

    def _command(self, *args: str) -> list[str]:
        if self._run_as is None:
            return list(args)
        return ["runuser", "-u", self._run_as, "--", *args]

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._command(*args), check=True, capture_output=True, text=True, timeout=120
        )

    def _ensure_user(self) -> None:
        if os.geteuid() != 0:
            return
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVER_USER,
                ],
                check=True,
                capture_output=True,
            )
        self._run_as = SERVER_USER

    def start(self) -> None:
        """initdb a fresh cluster in a temporary directory and start it (waits until ready)."""
        self._ensure_user()
        self.root = Path(tempfile.mkdtemp(prefix="rewardseal-pg-"))
        if self._run_as is not None:
            account = pwd.getpwnam(self._run_as)
            os.chown(self.root, account.pw_uid, account.pw_gid)
        try:
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            )
            last_error: subprocess.CalledProcessError | None = None
            for _ in range(3):  # the free port can be taken between probing and binding
                self.port = _free_port()
                try:
                    self._pg_ctl_start()
                    return
                except subprocess.CalledProcessError as exc:
                    last_error = exc
            raise RuntimeError(f"PostgreSQL did not start: {self.log_tail()}") from last_error
        except BaseException:
            self._remove_root()
            raise

    def pause(self) -> None:
        """Stop the server process but keep its cluster, so that :meth:`resume` brings it back
        on the same port with the same data (an outage, as a client sees it)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the server again after :meth:`pause` (same port, same data)."""
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        """Start the cluster's server on ``self.port`` and wait until it takes connections."""
        assert self.root is not None, "server not started"
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.root} -c max_connections=300"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its directory."""
        if self._maker is not None:
            self._maker.shutdown(wait=True, cancel_futures=True)
            self._maker = None
            self._spares.clear()
        if self.root is None:
            return
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.pause()
        self._remove_root()

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log (for failure messages)."""
        if self.root is None:
            return ""
        try:
            text = (self.root / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -------------------------------------------------------------- databases

    def url(self, dbname: str) -> str:
        """SQLAlchemy URL (psycopg 3 driver) of a database on this server."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit superuser connection to the maintenance database."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        )

    def drop_connections(self, dbname: str) -> int:
        """Terminate every connection to ``dbname`` (as a restart or an idle timeout would);
        how many there were."""
        with self._admin() as admin:
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchone()
        assert row is not None
        return int(str(row[0]))

    def fresh_database(self, spares: int = 4) -> str:
        """The name of a new, empty database nobody has used, made ahead in the background."""
        if self._maker is None:
            self._maker = ThreadPoolExecutor(max_workers=spares, thread_name_prefix="pg-spare")
        while len(self._spares) < spares + 1:
            self._spares.append(self._maker.submit(self.create_database))
        return self._spares.popleft().result()

    def discard_database(self, name: str) -> None:
        """Drop a database in the background (DROP DATABASE forces a checkpoint: slow)."""
        if self._maker is None:
            self.drop_database(name)
        else:
            self._maker.submit(self.drop_database, name)

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (a fresh unique name when none is given); return its name."""
        from psycopg import sql

        dbname = name or f"t_{uuid.uuid4().hex[:20]}"
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return dbname

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting anything still attached to it."""
        from psycopg import sql

        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
