"""HTTP served inside a gRPC service's process: an ASGI app under uvicorn in the same event loop.

:func:`start_http_server` binds its own socket first with
:func:`~rewardseal_server.serving.bind_listening_socket` (so port 0 yields a known port and a
port in use is refused with the same one-line :class:`~rewardseal.core.errors.CannotListen` as
gRPC), then runs uvicorn as a task of the running loop, next to a ``grpc.aio`` server, and returns
once connections are accepted. Signals stay with the embedding service (its
``serve_until_signalled``): uvicorn installs no handlers here. With a
:class:`~rewardseal.rpc.tls.ServerTls` it serves HTTPS with the same certificate as the gRPC
server (and asks for a client certificate from the same CA when that is mutual TLS). The socket
peer is the client: proxy headers are off (:mod:`rewardseal_server.uvicorn_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rewardseal_server.serving import address, bind_listening_socket
from rewardseal_server.uvicorn_config import uvicorn_config

if TYPE_CHECKING:
    import uvicorn

    from rewardseal_server.tls import ServerTls

__all__ = [
    "GRACEFUL_SHUTDOWN_SECONDS",
    "RunningHttpServer",
    "server_ssl_context",
    "start_http_server",
]

GRACEFUL_SHUTDOWN_SECONDS: Final = 5
_START_TIMEOUT_SECONDS: Final = 30.0


def server_ssl_context(tls: ServerTls) -> ssl.SSLContext:
    """An HTTPS server context from the PEM bytes of ``tls`` (TLS 1.2 or newer)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The ssl module loads a certificate chain only from files: a private directory holds them
    # for the call and is removed at once.
    with tempfile.TemporaryDirectory(prefix="rewardseal-tls-") as directory:
        cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
        for path, data in ((cert, tls.cert_chain), (key, tls.private_key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert, key)
    if tls.client_ca is not None:
        context.load_verify_locations(cadata=tls.client_ca.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass
class RunningHttpServer:
    """A started HTTP server: its port, URL and the task that serves."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    host: str
    port: int
    scheme: str

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8793``."""
        return f"{self.scheme}://{address(self.host, self.port)}"

    async def stop(self) -> None:
        """Finish open requests (within the grace period), then stop serving."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_http_server(
    app: Any,
    *,
    host: str,
    port: int,
    tls: ServerTls | None = None,
    name: str = "http",
    reuse_port: bool = False,
    grace_seconds: int = GRACEFUL_SHUTDOWN_SECONDS,
    flag: str = "--http-port",
) -> RunningHttpServer:
    """Serve the ASGI ``app`` on ``host:port`` in this event loop; return once it accepts.

    ``reuse_port``: beside the other processes of ``rewardseal-worker serve --processes N``
    (SO_REUSEPORT, that mode only); ``grace_seconds``: how long :meth:`RunningHttpServer.stop`
    lets open requests finish; ``flag``: the option that chose the port (a refusal names it).

    Raises:
        CannotListen: ``host:port`` cannot be bound.
        RuntimeError: the server did not start.
    """
    import uvicorn

    class _Embedded(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # The embedding service owns SIGINT/SIGTERM and stops this server itself.
            yield

    sock = bind_listening_socket(host, port, reuse_port=reuse_port, flag=flag)
    bound = int(sock.getsockname()[1])
    options: dict[str, Any] = {
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": grace_seconds,
        "lifespan": "off",
    }
    if tls is not None:
        context = server_ssl_context(tls)
        options["ssl_context_factory"] = lambda _config, _default: context
    server = _Embedded(uvicorn_config(app, **options))

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            sock.close()

    task = asyncio.create_task(serve(), name=f"{name}-server")
    try:
        async with asyncio.timeout(_START_TIMEOUT_SECONDS):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the {name} server stopped while starting")
                await asyncio.sleep(0.01)
    except BaseException:
        server.should_exit = True
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return RunningHttpServer(
        server=server, task=task, host=host, port=bound, scheme="https" if tls else "http"
    )
