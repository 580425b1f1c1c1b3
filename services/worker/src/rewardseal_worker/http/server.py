"""uvicorn on the worker's own event loop, beside the gRPC server (R-H-1: one process).

The worker's ``serve`` owns SIGINT and SIGTERM (:func:`rewardseal_server.serving.
serve_until_signalled`) and stops both faces; uvicorn is therefore run without its own signal
handling, on a socket bound here (so a port in use is refused with the same one-line error as
the gRPC port, and port 0 yields a known port before serving starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from rewardseal.errors import CannotListen
from rewardseal.tls import ServerTls
from rewardseal_server.serving import address, bind_listening_socket, is_loopback

_log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 1


class _InLoopServer(uvicorn.Server):
    """uvicorn's server without its signal handlers (the worker's own stop them both)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class RunningHttp:
    """The HTTP face, serving; :meth:`stop` ends it."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int
    scheme: str

    async def stop(self) -> None:
        """Stop taking connections, let in-flight requests finish (about a second), stop."""
        self.server.should_exit = True
        await asyncio.wait_for(asyncio.shield(self.task), STOP_GRACE_SECONDS + 10)


def _ssl_context(tls: ServerTls) -> ssl.SSLContext:
    """The worker's TLS identity (and client CA, for mutual TLS) as an ``SSLContext``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # ssl loads a certificate chain from files only: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="rewardseal-http-tls-") as scratch:
        cert, key = Path(scratch) / "cert.pem", Path(scratch) / "key.pem"
        cert.write_bytes(tls.cert_chain)
        key.touch(0o600)
        key.write_bytes(tls.private_key)
        context.load_cert_chain(cert, key)
    if tls.client_ca is not None:
        context.load_verify_locations(cadata=tls.client_ca.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def start_http_server(
    app: FastAPI,
    *,
    host: str,
    port: int,
    tls: ServerTls | None = None,
    reuse_port: bool = False,
) -> RunningHttp:
    """Serve ``app`` on ``host:port`` (0 picks a free port) on the running event loop, over TLS
    (mutual TLS when ``tls`` names a client CA) when ``tls`` is given; ``reuse_port``: beside
    the other processes of ``serve --processes N`` (SO_REUSEPORT).

    Raises:
        CannotListen: the port is in use or cannot be bound, or uvicorn did not start.
    """
    sock = bind_listening_socket(host, port, reuse_port=reuse_port)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
    )
    config.load()
    if tls is not None:
        config.ssl = _ssl_context(tls)
    elif not is_loopback(host):
        _log.warning(
            "HTTP face on %s without TLS: bearer tokens and receipts cross the network in "
            "plaintext (configure a TLS certificate and key)",
            address(host, sock.getsockname()[1]),
        )
    server = _InLoopServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT_SECONDS
    while not server.started:
        if task.done() or asyncio.get_running_loop().time() > deadline:
            task.cancel()
            sock.close()
            raise CannotListen(f"the HTTP face did not start on {address(host, port)}")
        await asyncio.sleep(0.01)
    return RunningHttp(server, task, sock.getsockname()[1], "https" if tls else "http")
