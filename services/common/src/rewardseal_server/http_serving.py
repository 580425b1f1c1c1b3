"""Serve an ASGI app (FastAPI) under uvicorn as a process's own server, on a socket it owns.

:class:`HttpService` is the life cycle the HTTP systems of record share (MockMed, the helpdesk
example): bind the listening socket first with
:func:`~rewardseal_server.serving.bind_listening_socket` (so port 0 yields a known free port
before serving starts, and a port in use is one :class:`~rewardseal.core.errors.CannotListen` line),
then serve in the foreground (the CLI, stopping on SIGINT/SIGTERM) or in a background thread
(tests, demos). The socket peer is the client: proxy headers are off
(:mod:`rewardseal_server.uvicorn_config`). An HTTP face *beside* a gRPC server, in its event
loop, is :mod:`rewardseal_server.embedded_http`. Needs uvicorn (the ``http`` extra of this package).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, Final

import uvicorn

from rewardseal_server.serving import bind_listening_socket
from rewardseal_server.uvicorn_config import uvicorn_config

__all__ = ["GRACEFUL_SHUTDOWN_SECONDS", "HttpService"]

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


class HttpService:
    """One ASGI app served by uvicorn on a socket bound when the service is made.

    Use as a context manager (``with HttpService(app, ...) as http: http.url``) to serve in a
    background thread, or await :meth:`serve` from the main thread's event loop.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        log_level: str = "warning",
        access_log: bool = False,
        configure_logging: bool = False,
        on_started: Callable[[], None] | None = None,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        """Bind ``host``:``port`` now; ``name`` names the thread and the start-up error.

        ``configure_logging`` lets uvicorn install its logging configuration (a CLI); a library
        user keeps its own. ``on_started`` is called (on the server's event loop) once
        connections are accepted; ``on_closed`` once serving is over, or by :meth:`stop` when
        the service never served (release what the app holds: a database engine).

        Raises:
            CannotListen: the address cannot be bound (the port is in use, ...).
        """
        self.name = name
        self._on_closed = on_closed
        self._socket: socket.socket | None = bind_listening_socket(host, port)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        options: dict[str, Any] = {
            "log_level": log_level,
            "access_log": access_log,
            "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS,
        }
        if not configure_logging:
            options["log_config"] = None
        self._ready = threading.Event()
        self._user_on_started = on_started
        self._server = _Server(uvicorn_config(app, **options), self._started)
        self._thread: threading.Thread | None = None

    def _started(self) -> None:
        self._ready.set()
        if self._user_on_started is not None:
            self._user_on_started()

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8792``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def started(self) -> bool:
        """True once uvicorn is accepting connections."""
        return self._ready.is_set()

    async def serve(self) -> None:
        """Serve until stopped (SIGINT/SIGTERM in the main thread, or :meth:`request_stop`)."""
        sock = self._take_socket()
        try:
            await self._server.serve(sockets=[sock])
        finally:
            sock.close()
            self._closed()

    def request_stop(self) -> None:
        """Ask the server to finish its requests and stop (thread-safe)."""
        self._server.should_exit = True

    def start(self) -> None:
        """Serve in a daemon thread; return once connections are accepted.

        Raises:
            RuntimeError: the server did not start within 30 seconds or died starting.
        """
        if self._thread is not None:
            raise RuntimeError(f"this {self.name} server was started already")
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve()), name=f"{self.name}-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while not self._ready.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.request_stop()
                raise RuntimeError(f"{self.name} did not start")

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_SECONDS + 5) -> None:
        """Stop a server started with :meth:`start` and wait for its thread."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._socket is not None:
            # Never served: release what __init__ bound and what the app holds.
            self._socket.close()
            self._socket = None
            self._closed()

    def _closed(self) -> None:
        if self._on_closed is not None:
            self._on_closed()

    def _take_socket(self) -> socket.socket:
        if self._socket is None:
            raise RuntimeError(f"this {self.name} server has served already")
        sock, self._socket = self._socket, None
        return sock

    def __enter__(self) -> HttpService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
