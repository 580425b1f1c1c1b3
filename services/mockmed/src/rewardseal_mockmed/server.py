"""Run MockMed under uvicorn: in a background thread (tests, demos) or in the foreground (CLI).

:class:`MockMedServer` opens the store (creating the schema, seeding background rows into an
empty table), loads the screen dump, binds the listening socket itself (so port 0 yields a
known free port before serving starts) and serves the app on it
(:class:`rewardseal_server.http_serving.HttpService`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rewardseal_mockmed import __version__
from rewardseal_mockmed.app import create_app
from rewardseal_mockmed.faults import FaultSwitch
from rewardseal_mockmed.screen import ScreenDump
from rewardseal_mockmed.settings import MockMedSettings
from rewardseal_mockmed.store import EncounterStore
from rewardseal_server.http_serving import GRACEFUL_SHUTDOWN_SECONDS, HttpService
from rewardseal_server.serving import bind_listening_socket as bind_socket

__all__ = ["GRACEFUL_SHUTDOWN_SECONDS", "MockMedServer", "bind_socket"]


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
            self._http = HttpService(
                self.app,
                host=settings.host,
                port=settings.port,
                name="mockmed",
                log_level=log_level,
                access_log=access_log,
                configure_logging=configure_logging,
                on_started=lambda: on_started(self) if on_started is not None else None,
                on_closed=self.store.close,
            )
        except BaseException:
            self.store.close()
            raise
        self.host = settings.host
        self.port: int = self._http.port

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8792``."""
        return self._http.url

    @property
    def started(self) -> bool:
        """True once uvicorn is accepting connections."""
        return self._http.started

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
        await self._http.serve()

    def request_stop(self) -> None:
        """Ask the server to finish its requests and stop (thread-safe)."""
        self._http.request_stop()

    def start(self) -> MockMedServer:
        """Serve in a daemon thread; return once connections are accepted.

        Raises:
            RuntimeError: the server did not start within 30 seconds or died starting.
        """
        self._http.start()
        return self

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_SECONDS + 5) -> None:
        """Stop a server started with :meth:`start` and wait for its thread."""
        self._http.stop(timeout)

    def __enter__(self) -> MockMedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
