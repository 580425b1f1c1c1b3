"""Run the helpdesk: open the store (schema, seed), bind the socket, serve the API.

:class:`HelpdeskServer` runs in the foreground (``python -m helpdesk serve``) or in a background
thread (tests: ``with HelpdeskServer(...) as server: server.url``); the life cycle is the shared
:class:`rewardseal_server.http_serving.HttpService`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any

from helpdesk import __version__
from helpdesk.app import create_app
from helpdesk.store import DEFAULT_SEED, TicketStore
from rewardseal_server.http_serving import HttpService

__all__ = ["HelpdeskServer"]


class HelpdeskServer:
    """One helpdesk process: store, API and uvicorn on a socket bound at construction."""

    def __init__(
        self,
        db_url: str,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        seed_customers: int = 0,
        seed: int = DEFAULT_SEED,
        log_level: str = "warning",
        configure_logging: bool = False,
        on_started: Callable[[HelpdeskServer], None] | None = None,
    ) -> None:
        """Open the store, create the schema, seed an empty database, bind the socket.

        Raises:
            ValidationError: the database URL is unusable or the seed size out of range.
            Unavailable: the database cannot be reached.
            CannotListen: the address cannot be bound.
        """
        self.store = TicketStore(db_url)
        try:
            self.store.create_schema()
            self.seeded_customers = self.store.seed_if_empty(seed_customers, seed)
            self.http = HttpService(
                create_app(self.store, token=token),
                host=host,
                port=port,
                name="helpdesk",
                log_level=log_level,
                configure_logging=configure_logging,
                on_started=lambda: on_started(self) if on_started is not None else None,
                on_closed=self.store.close,
            )
        except BaseException:
            self.store.close()
            raise

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8793``."""
        return self.http.url

    def banner(self, token_source: str) -> dict[str, Any]:
        """What a starter needs (never the token): URL, port, database, where the token is."""
        return {
            "service": "helpdesk",
            "version": __version__,
            "url": self.url,
            "host": self.http.host,
            "port": self.http.port,
            "pid": os.getpid(),
            "db_url": self.store.display_url,
            "backend": self.store.backend,
            "seeded_customers": self.seeded_customers,
            "token_source": token_source,
        }

    async def serve(self) -> None:
        """Serve until SIGINT/SIGTERM (main thread) or :meth:`stop`."""
        await self.http.serve()

    def start(self) -> HelpdeskServer:
        """Serve in a daemon thread; return once connections are accepted."""
        self.http.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the store."""
        self.http.stop()

    def __enter__(self) -> HelpdeskServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
