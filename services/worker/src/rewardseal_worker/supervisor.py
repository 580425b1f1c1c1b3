"""``rewardseal-worker serve --processes N``: N server processes on one port and one store.

One Python process scores on about one core (the GIL); several processes on one host share its
cores. The ``serve`` process becomes a supervisor that serves nothing itself:

* **Once, before any server** (in the supervisor): the exclusive-port probe, so a port held by
  another program is refused with one line as with one process (R-W-11); the data dir's lock
  (R-W-15), held by the supervisor for its whole life and shared by its children by design (they
  never take it); the worker key (created
  on first start); the MockMed seed (``--seed-mockmed``, under the data dir's seed lock); the
  bundle check (a broken bundle fails once, not N times); the store's schema (created by one
  process, not raced by N); the token (made by settings).
* **Then N children**, each ``python -m rewardseal_worker.cli serve`` with the same options and
  two internal ones (``--supervised-by``, ``--process-index``). Each is a whole worker (scorer,
  store connection pool, reader, health watch, grpc.health.v1) bound with SO_REUSEPORT to the
  one port; the kernel spreads connections (not calls: a channel stays on one process) over
  them. Exactly-once and one-open-episode-per-identity hold across the processes because the
  store enforces them (SQLite: ``BEGIN IMMEDIATE`` serializes writers across processes;
  PostgreSQL: row locks), as across replicas.
* **The control link**: every child follows certificates and revocations (each needs them in
  its own memory to certify its receipts; their only write, the revocation floor, only rises).
  Only child 0 registers with control and forwards the shared outbox, so control is not sent
  each receipt N times; if child 0 is replaced, its replacement resumes forwarding (the outbox
  is durable).
* **The port stays reserved**: the supervisor keeps a bound, non-listening SO_REUSEPORT socket
  on it for its whole life, so while a child is being replaced no program that does not ask to
  share (SO_REUSEPORT, same user) can take the port. (One that does ask, run by the same user,
  could join: that is what SO_REUSEPORT means, and why it is off unless ``--processes`` > 1.)
  With ``--http-port``, the HTTP face's port is reserved the same way and every child serves
  it too (docs/http.md).

Life cycle, as an operator sees it: one banner (child 0's, plus ``processes`` and ``pids``) and
one ready file once every child is ready. SIGTERM or SIGINT to the supervisor is forwarded to
every child (SIGTERM), each stops gracefully, the supervisor exits 0 once all are gone (SIGKILL
after :data:`STOP_TIMEOUT_SECONDS`). Children run in their own session, so a terminal's Ctrl-C
reaches the supervisor only. A child that exits after it became ready (``kill -9``, a crash,
or a SIGTERM sent to it alone) is **replaced** (at most once per :data:`RESTART_SPACING_SECONDS`
per slot) while the others keep serving; its in-flight calls fail UNAVAILABLE and are retried
by clients, and nothing it committed is lost. A child that fails before it is ready (at start
or as a replacement) stops the whole worker with its exit status: a failure that repeats would
only loop. A child whose supervisor is gone (``kill -9`` of the supervisor) notices within
:data:`ORPHAN_CHECK_SECONDS` and stops itself, so no orphan keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal_server.serving import cannot_listen, check_port_free, write_ready_file
from rewardseal_worker.app import prepare_worker, probe_system_of_record
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.data_dir_lock import lock_data_dir
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.settings import WorkerSettings
from rewardseal_worker.store import WorkerStore

_log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 120.0
"""How long a child may take to become ready before the worker gives up."""
RESTART_SPACING_SECONDS = 1.0
"""Least time between two starts of the same child slot."""
STOP_TIMEOUT_SECONDS = 30.0
"""How long a stopping child may take before it gets SIGKILL."""
ORPHAN_CHECK_SECONDS = 0.5
"""How often a child checks that its supervisor still runs."""

ChildCommand = Callable[[int, int, Path, int | None], Sequence[str]]
"""``(process index, port, child ready file, HTTP port or None) -> argv`` of one child."""
Announce = Callable[[dict[str, Any], str | None], None]
"""Told ``(banner, change)``: ``change`` None once all children are ready (print the banner),
else a line about a replaced child."""


class ChildFailed(Exception):
    """A child exited before it became ready; ``status`` is its exit status."""

    def __init__(self, index: int, status: int) -> None:
        super().__init__(f"process {index} exited with status {status} before it was ready")
        self.index = index
        self.status = status


@dataclass
class Child:
    """One running child: its slot, process and ready banner."""

    index: int
    process: asyncio.subprocess.Process
    started: float
    banner: dict[str, Any]


def reserve_port(host: str, port: int, *, flag: str = "--port") -> socket.socket:
    """A bound, non-listening SO_REUSEPORT socket on ``host:port`` (0: a free port, read it
    with ``getsockname``): the children bind beside it, other programs cannot; ``flag``: the
    option that chose the port (a refusal names it).

    Raises:
        ValidationError: this platform has no SO_REUSEPORT.
        CannotListen: the address cannot be bound.
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValidationError("--processes above 1 needs SO_REUSEPORT, which this platform lacks")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise cannot_listen(host, port, flag=flag) from exc
    held = socket.socket(family, kind, proto)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(sockaddr)
    except OSError as exc:
        held.close()
        raise cannot_listen(host, port, exc, flag=flag) from None
    return held


def prepare_once(
    settings: WorkerSettings, *, progress: Callable[[int, int], None] | None = None
) -> None:
    """The one-time work before the children start: key, seed, bundle check, the SoR's probe
    (R-W-16: refused once, in one line, not by N children), store schema.

    Raises:
        ValidationError, SignatureError, Unavailable: as a one-process start would raise them.
    """
    key, _ = prepare_worker(settings, progress=progress)
    bundle = load_bundle(settings.contract_dir, trust=TrustSet([key.public_key]))
    reader = make_reader(bundle.recipe, bundle.path)
    try:
        probe_system_of_record(reader, bundle)
    finally:
        reader.close()
    WorkerStore(settings.db_url, migrate=False).close()  # R-W-17: refused here, once


class Supervisor:
    """Starts, watches, replaces and stops the children of ``serve --processes N``."""

    def __init__(
        self,
        settings: WorkerSettings,
        command: ChildCommand,
        *,
        announce: Announce,
        ready_file: Path | None = None,
    ) -> None:
        self._settings = settings
        self._command = command
        self._announce = announce
        self._ready_file = ready_file
        self._children: dict[int, Child] = {}
        self._live: dict[int, asyncio.subprocess.Process] = {}
        """Every spawned process not yet reaped, by slot (including one still starting)."""
        self._stopping = False
        self._port = 0
        self._http_port: int | None = None
        """The HTTP face's port (``--http-port``), reserved like the gRPC port; None without."""
        self._scratch = Path()

    async def run(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Serve until SIGTERM or SIGINT (exit status 0), or until a child fails to become
        ready (its exit status, at least 1).

        Raises:
            CannotListen: the port is held by another program or cannot be bound.
            DataDirInUse: another worker holds the data dir (R-W-15).
            ValidationError: as :func:`prepare_once` and :func:`reserve_port`.
        """
        settings = self._settings
        check_port_free(settings.host, settings.port)
        if settings.http_port is not None:
            check_port_free(settings.host, settings.http_port, flag="--http-port")
        held = reserve_port(settings.host, settings.port)
        self._port = held.getsockname()[1]
        # The HTTP face (docs/http.md): every child serves it too, on one shared port.
        held_http = None
        if settings.http_port is not None:
            held_http = reserve_port(settings.host, settings.http_port, flag="--http-port")
            self._http_port = held_http.getsockname()[1]
        try:
            # The children share the data dir by design: only the supervisor takes the lock.
            held_dir = lock_data_dir(settings.data_dir, settings.db_url)
        except BaseException:
            held.close()
            if held_http is not None:
                held_http.close()
            raise
        self._scratch = Path(tempfile.mkdtemp(prefix="rewardseal-worker-"))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await asyncio.to_thread(prepare_once, settings, progress=progress)
            if stop.is_set():
                return 0
            started = await asyncio.gather(
                *(self._start(index) for index in range(settings.processes)),
                return_exceptions=True,
            )
            failed = [s for s in started if isinstance(s, BaseException)]
            if failed:
                return _status_of(failed[0])
            self._announce(self._publish(), None)
            return await self._watch(stop)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            await self._stop_all()
            held.close()
            if held_http is not None:
                held_http.close()
            held_dir.release()
            shutil.rmtree(self._scratch, ignore_errors=True)

    async def _watch(self, stop: asyncio.Event) -> int:
        stopped = asyncio.create_task(stop.wait())
        slots = {asyncio.create_task(self._keep(index)) for index in self._children}
        try:
            done, _ = await asyncio.wait({stopped, *slots}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopped}:
                return _status_of(task.exception() or ChildFailed(-1, 1))
            return 0
        finally:
            self._stopping = True
            for task in (stopped, *slots):
                task.cancel()
            await asyncio.gather(stopped, *slots, return_exceptions=True)

    async def _keep(self, index: int) -> None:
        """Replace the child of slot ``index`` whenever it exits; raise ChildFailed when a
        replacement does not become ready."""
        while True:
            child = self._children[index]
            status = await child.process.wait()
            self._live.pop(index, None)
            if self._stopping:
                return
            _log.warning(
                "process %d (pid %d) exited with status %d; starting a replacement",
                index,
                child.process.pid,
                status,
            )
            spacing = child.started + RESTART_SPACING_SECONDS - time.monotonic()
            await asyncio.sleep(max(0.0, spacing))
            replaced = await self._start(index)
            self._announce(
                self._publish(),
                f"process {index} pid {child.process.pid} -> {replaced.process.pid} "
                f"(exited with status {status})",
            )

    async def _start(self, index: int) -> Child:
        """Spawn the child of slot ``index`` and wait for its ready file.

        Raises:
            ChildFailed: it exited (or was killed after :data:`READY_TIMEOUT_SECONDS`) first.
        """
        ready = self._scratch / f"process-{index}.json"
        ready.unlink(missing_ok=True)
        # Its own session: a terminal's Ctrl-C reaches the supervisor, which stops the children
        # in order, instead of every process at once.
        process = await asyncio.create_subprocess_exec(
            *self._command(index, self._port, ready, self._http_port), start_new_session=True
        )
        self._live[index] = process
        started = time.monotonic()
        deadline = started + READY_TIMEOUT_SECONDS
        while not ready.exists():
            if process.returncode is not None or time.monotonic() > deadline:
                if process.returncode is None:
                    process.kill()
                status = await process.wait()
                self._live.pop(index, None)
                raise ChildFailed(index, status)
            await asyncio.sleep(0.05)
        child = Child(index, process, started, json.loads(ready.read_text()))
        self._children[index] = child
        return child

    def _publish(self) -> dict[str, Any]:
        """Child 0's banner with every child's pid and metrics URL; written to the ready file if
        asked."""
        children = [self._children[i] for i in sorted(self._children)]
        banner = {
            **children[0].banner,
            "processes": len(children),
            "pids": [c.process.pid for c in children],
            # Each process counts its own calls: Prometheus scrapes every one of these.
            "metrics_urls": [c.banner.get("metrics_url") for c in children],
        }
        if self._ready_file is not None:
            write_ready_file(self._ready_file, banner)
        return banner

    async def _stop_all(self) -> None:
        """SIGTERM every live child, wait for each, SIGKILL one that takes too long."""
        self._stopping = True
        live = list(self._live.values())
        for process in live:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

        async def reap(process: asyncio.subprocess.Process) -> None:
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()

        await asyncio.gather(*(reap(p) for p in live))
        self._live.clear()


def _status_of(error: BaseException) -> int:
    """The supervisor's exit status for a child that failed to become ready (re-raises any
    other error)."""
    if not isinstance(error, ChildFailed):
        raise error
    _log.error("%s; stopping every process", error)
    return error.status if error.status > 0 else 1


async def exit_with_supervisor(supervisor_pid: int) -> None:
    """In a child: SIGTERM this process (a graceful stop) once its supervisor is gone."""
    # Polled: no portable way to be told (PR_SET_PDEATHSIG is Linux only, and ends at once).
    while True:
        await asyncio.sleep(ORPHAN_CHECK_SECONDS)
        if os.getppid() != supervisor_pid:
            break
    _log.warning("supervisor %d is gone; stopping", supervisor_pid)
    os.kill(os.getpid(), signal.SIGTERM)
