"""Run MockMed under uvicorn: in a background thread (tests, demos) or in the foreground (CLI).

:class:`MockMedServer` opens the store (creating the schema, seeding background rows into an
empty table), loads the screen dump, binds the listening socket itself (so port 0 yields a
known free port before serving starts) and serves the app on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, Final

import uvicorn

from rewardseal_mockmed import __version__
from rewardseal_mockmed.app import create_app
from rewardseal_mockmed.faults import FaultSwitch
from rewardseal_mockmed.screen import ScreenDump
from rewardseal_mockmed.settings import MockMedSettings
from rewardseal_mockmed.store import EncounterStore
from rewardseal_server.serving import bind_listening_socket as bind_socket

__all__ = ["GRACEFUL_SHUTDOWN_SECONDS", "MockMedServer", "bind_socket"]

GRACEFUL_SHUTDOWN_SECONDS: Final = 5
_START_TIMEOUT_SECONDS: Final = 30.0


class _Server(uvicorn.Server):
    """uvicorn's server, calling ``on_started`` once it accepts connections and stopping on
    SIGINT/SIGTERM without re-raising the signal afterwards (so the CLI can clean up and exit 0).
    """

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_started()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {signum: signal.signal(signum, self._on_signal) for signum in handled}
        try:
            yield
        finally:
            for signum, handler in original.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.should_exit and signum == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


class MockMedServer:
    """One MockMed process's server: store, screen, fault switch, app and uvicorn.

    Use as a context manager (``with MockMedServer(settings) as server: server.url``) to run
    it in a background thread, or call :meth:`serve` from the main thread's event loop.
    """

    def __init__(
        self,
        settings: MockMedSettings,
        *,
        log_level: str = "warning",
        access_log: bool = False,
        configure_logging: bool = False,
        on_started: Callable[[MockMedServer], None] | None = None,
    ) -> None:
        """Open the store, create its schema, seed an empty table, bind the socket.

        ``configure_logging`` lets uvicorn install its logging configuration (the CLI); a
        library user keeps its own. ``on_started`` is called (on the server's event loop) once
        connections are accepted.

        Raises:
            ValidationError: the database URL or the screen file is unusable.
            Unavailable: the database cannot be reached.
            CannotListen: the address cannot be bound (the port is in use, ...).
        """
        self.settings = settings
        self.store = EncounterStore(settings.db_url)
        self._socket: socket.socket | None = None
        try:
            self.store.create_schema()
            self.seeded_rows = self.store.seed_if_empty(settings.seed_rows, settings.seed)
            self.screen = ScreenDump(settings.screen_file)
            self.faults = FaultSwitch()
            self.app = create_app(
                self.store,
                self.screen,
                token=settings.token,
                admin_token=settings.admin_token,
                faults=self.faults,
                read_token=settings.read_token,
            )
            self._socket = bind_socket(settings.host, settings.port)
        except BaseException:
            self.store.close()
            raise
        self.host = settings.host
        self.port: int = self._socket.getsockname()[1]
        config_options: dict[str, Any] = {
            "log_level": log_level,
            "access_log": access_log,
            "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS,
            "server_header": False,
        }
        if not configure_logging:
            config_options["log_config"] = None
        self._ready = threading.Event()
        self._user_on_started = on_started
        self._server = _Server(uvicorn.Config(self.app, **config_options), self._started)
        self._thread: threading.Thread | None = None

    def _started(self) -> None:
        self._ready.set()
        if self._user_on_started is not None:
            self._user_on_started(self)

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8792``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def started(self) -> bool:
        """True once uvicorn is accepting connections."""
        return self._ready.is_set()

    def banner(self) -> dict[str, Any]:
        """What a starter needs to know (never a token): URL, port, database, token sources."""
        return {
            "service": "rewardseal-mockmed",
            "version": __version__,
            "url": self.url,
            "host": self.host,
            "port": self.port,
            "pid": os.getpid(),
            "db_url": self.store.display_url,
            "backend": self.store.backend,
            "seeded_rows": self.seeded_rows,
            "screen_file": str(self.settings.screen_file) if self.settings.screen_file else None,
            "token_source": self.settings.token_source,
            "admin_token_source": self.settings.admin_token_source,
            "read_token_source": self.settings.read_token_source,
            "fault_switch": self.settings.admin_token is not None,
        }

    async def serve(self) -> None:
        """Serve until stopped (SIGINT/SIGTERM in the main thread, or :meth:`request_stop`)."""
        sock = self._take_socket()
        try:
            await self._server.serve(sockets=[sock])
        finally:
            sock.close()
            self.store.close()

    def request_stop(self) -> None:
        """Ask the server to finish its requests and stop (thread-safe)."""
        self._server.should_exit = True

    def start(self) -> MockMedServer:
        """Serve in a daemon thread; return once connections are accepted.

        Raises:
            RuntimeError: the server did not start within 30 seconds or died starting.
        """
        if self._thread is not None:
            raise RuntimeError("this MockMedServer was started already")
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve()), name="mockmed-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while not self._ready.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.request_stop()
                raise RuntimeError("MockMed did not start")
        return self

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_SECONDS + 5) -> None:
        """Stop a server started with :meth:`start` and wait for its thread."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._socket is not None:
            # Never served: release what __init__ opened.
            self._socket.close()
            self.store.close()

    def _take_socket(self) -> socket.socket:
        if self._socket is None:
            raise RuntimeError("this MockMedServer has served already")
        sock, self._socket = self._socket, None
        return sock

    def __enter__(self) -> MockMedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
