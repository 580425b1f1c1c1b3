"""Serving plumbing shared by the rewardseal services (the worker and the control plane).

:func:`start_grpc_server` needs grpcio-health-checking (and grpcio-reflection when reflection is
asked for): the ``serve`` extra of the ``rewardseal`` distribution. Both are imported only when a
server starts, so :func:`write_ready_file` and :func:`serve_until_signalled` serve services
without that extra too (MockMed). Nothing else in the core package imports this module, so
trainers never need those packages.

What lives here, once:

* :func:`start_grpc_server`: a ``grpc.aio`` server with the message-size caps the clients use
  (:func:`rewardseal.rpc.call_rules.message_size_options`), the services' servicers, the standard
  ``grpc.health.v1`` service (SERVING for ``""`` and for every named service once started),
  optional server reflection and optional TLS or mutual TLS (:class:`rewardseal.rpc.tls.ServerTls`);
  it returns a :class:`RunningServer`. Its port is its own: a second server on a port in use
  refuses to start (:class:`rewardseal.core.errors.CannotListen`) instead of sharing it.
* :meth:`RunningServer.stop`: the graceful stop (NOT_SERVING first, then the service's own
  shutdown hook, then the server stops within a grace period).
* :func:`write_ready_file` and :func:`serve_until_signalled`: the ``serve`` commands' ready file
  (the banner as JSON, for scripts) and their wait for SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from rewardseal.core.errors import CannotListen
from rewardseal.rpc.call_rules import message_size_options

if TYPE_CHECKING:
    from grpc_health.v1 import health

    from rewardseal_server.tls import ServerTls

__all__ = [
    "Hook",
    "TRANSPORT_TEXT",
    "RunningServer",
    "address",
    "bind_listening_socket",
    "cannot_listen",
    "check_port_free",
    "is_loopback",
    "serve_until_signalled",
    "start_grpc_server",
    "transport",
    "write_ready_file",
]

_log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]
"""An async callable run at a fixed point of a server's start or stop."""


@dataclass
class RunningServer:
    """A started server, the port it listens on, and its health servicer."""

    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    on_stop: Hook | None = None
    """Run by :meth:`stop` after NOT_SERVING is set and before the server stops (for example
    to end streams that never end on their own, so that the stop need not wait for them)."""
    service_names: tuple[str, ...] = ()
    """The services the health service reports on (besides ``""``, the whole server)."""
    _serving: bool = field(default=False, init=False, repr=False)
    _stopping: bool = field(default=False, init=False, repr=False)

    @property
    def serving(self) -> bool:
        """What the health service reports for ``""`` now: SERVING (True) or NOT_SERVING, so
        another face of the same server (the worker's HTTP ``/health``) can report the same."""
        return self._serving and not self._stopping

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING or NOT_SERVING for the whole server and each of its services
        (for example while a dependency the services cannot work without is down)."""
        from grpc_health.v1 import health_pb2

        self._serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            await self.health.set(name, status)

    async def stop(self, grace: float | None = 1.0) -> None:
        """Mark NOT_SERVING, run ``on_stop``, then stop, letting in-flight calls finish within
        ``grace`` seconds (None: wait for them)."""
        # The health servicer ignores set() from here on; so does :attr:`serving`.
        self._stopping = True
        await self.health.enter_graceful_shutdown()
        if self.on_stop is not None:
            await self.on_stop()
        await self.server.stop(grace)


async def start_grpc_server(
    *,
    add_servicers: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    host: str = "127.0.0.1",
    port: int = 0,
    reflection: bool = False,
    on_start: Hook | None = None,
    on_stop: Hook | None = None,
    tls: ServerTls | None = None,
    reuse_port: bool = False,
) -> RunningServer:
    """Start a ``grpc.aio`` server on ``host:port`` (0 picks a free port).

    Args:
        add_servicers: adds the service's servicers to the new server.
        service_names: the full names of those services: marked SERVING in the health service
            (as is ``""``, the whole server) and listed by reflection.
        interceptors: server interceptors, outermost first (authentication, for one).
        reflection: also serve ``grpc.reflection.v1alpha`` for the services, health and itself.
        on_start: run after the port is bound and before the server starts taking calls.
        on_stop: see :attr:`RunningServer.on_stop`.
        tls: serve TLS (mutual TLS when it names a client CA); None serves plaintext, with a
            warning unless ``host`` is a loopback address.
        reuse_port: share the port with other processes that ask for the same (SO_REUSEPORT;
            the kernel then splits connections between them). Off by default: a second server
            on a port in use refuses to start. The hook for a deliberate multi-process mode.

    Raises:
        CannotListen: ``host:port`` cannot be bound (in use by another process, not an address
            of this machine, ...); nothing has been started.
    """
    from grpc_health.v1 import health, health_pb2_grpc

    if not reuse_port:
        check_port_free(host, port)
    # gRPC sets SO_REUSEPORT unless told not to: a second process would then bind the same
    # port, say it serves, and silently take a share of the callers.
    options = [*message_size_options(), ("grpc.so_reuseport", 1 if reuse_port else 0)]
    server = grpc.aio.server(interceptors=list(interceptors), options=options)
    add_servicers(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection:
        from grpc_reflection.v1alpha import reflection as grpc_reflection

        grpc_reflection.enable_server_reflection(
            (*service_names, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), server
        )
    where = address(host, port)
    try:
        if tls is None:
            if not is_loopback(host):
                _log.warning(
                    "serving on %s without TLS: bearer tokens and receipts cross the network "
                    "in plaintext (configure a TLS certificate and key)",
                    where,
                )
            bound = server.add_insecure_port(where)
        else:
            bound = server.add_secure_port(where, tls.credentials())
    except RuntimeError:
        # gRPC says only "Failed to bind"; the probe above caught the usual causes already.
        raise cannot_listen(host, port) from None
    if on_start is not None:
        await on_start()
    await server.start()
    running = RunningServer(
        server=server,
        port=bound,
        health=health_servicer,
        on_stop=on_stop,
        service_names=tuple(service_names),
    )
    await running.set_serving(True)
    return running


def address(host: str, port: int) -> str:
    """``host:port``, an IPv6 literal in brackets (``[::1]:8790``)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only (localhost, 127/8, ::1)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


TRANSPORT_TEXT: Mapping[str, str] = {
    "plaintext": "plaintext (no TLS)",
    "tls": "TLS",
    "mtls": "mutual TLS (client certificates required)",
}
"""How a banner for people words each :func:`transport`."""


def transport(tls: ServerTls | None) -> str:
    """What a banner says of a server's transport: ``plaintext``, ``tls`` or ``mtls``."""
    if tls is None:
        return "plaintext"
    return "mtls" if tls.mutual else "tls"


def cannot_listen(
    host: str, port: int, cause: OSError | None = None, *, flag: str = "--port"
) -> CannotListen:
    """The one-line start-up error for ``host:port`` that cannot be bound, saying why; ``flag``
    is the option that chose the port (``--http-port``, ``--metrics-port``): the fix names it
    (R-W-11)."""
    fix = ""
    if cause is not None and cause.errno == errno.EADDRINUSE:
        why = "the port is in use by another process"
        fix = f" (stop that process, or choose another {flag})"
    elif cause is not None and cause.strerror:
        why = cause.strerror[:1].lower() + cause.strerror[1:]
        if cause.errno == errno.EADDRNOTAVAIL:
            fix = (
                f" ({host.strip('[]')} is not an address of this host: pass --host 127.0.0.1, "
                "0.0.0.0 or an address `ip addr` lists)"
            )
    else:
        why = "the address could not be bound"
    return CannotListen(f"cannot listen on {address(host, port)}: {why}{fix}")


def check_port_free(host: str, port: int, *, flag: str = "--port") -> None:
    """Raise :class:`CannotListen` when ``host:port`` cannot be bound by this process now;
    ``flag``: the option that chose the port, which the error names (see :func:`cannot_listen`).

    gRPC reports a failed bind as a bare RuntimeError (the cause goes to its C core's log on
    stderr); a plain socket bound first, with SO_REUSEADDR as gRPC sets it and without
    SO_REUSEPORT, finds the usual cause, a port in use, with its real reason. A port in use on
    any address ``host`` resolves to refuses; other failures refuse only when every address
    fails (gRPC serves on the addresses it can bind). Port 0 is always free, but its address is
    probed all the same: an address this host lacks is refused here, in one line.
    """
    try:
        found = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise CannotListen(
            f"cannot listen on {address(host, port)}: the host name does not resolve "
            f"({exc.strerror}; pass --host 127.0.0.1, 0.0.0.0 or an address of this host)"
        ) from None
    failures: list[OSError] = []
    for family, kind, proto, _, sockaddr in found:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise cannot_listen(host, port, exc, flag=flag) from None
                failures.append(exc)
    if found and len(failures) == len(found):
        raise cannot_listen(host, port, failures[0], flag=flag)


def write_ready_file(path: Path, banner: Mapping[str, Any]) -> None:
    """Write ``banner`` as JSON to ``path``: atomically (a reader never sees half a file) and
    readable by the owner only (0600: a banner may carry a token)."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        # A temporary file left over from an earlier run keeps its mode under O_CREAT.
        os.fchmod(handle.fileno(), 0o600)
        handle.write(json.dumps(banner, indent=2) + "\n")
    temporary.replace(path)


async def serve_until_signalled(stop: Hook) -> None:
    """Wait for SIGINT or SIGTERM, then await ``stop()``.

    Further signals while ``stop()`` runs are absorbed; the handlers are removed once it is done.
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stopping.set)
    try:
        await stopping.wait()
        await stop()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def bind_listening_socket(
    host: str, port: int, *, reuse_port: bool = False, flag: str = "--port"
) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port), IPv4 or IPv6; ``flag``: the
    option that chose the port, which a refusal names.

    The port is this process's alone: SO_REUSEADDR (a restart need not wait out TIME_WAIT) but
    never SO_REUSEPORT, so a second server on a port in use is refused instead of taking a
    share of the callers; ``reuse_port`` is the deliberate exception, for the processes of
    ``rewardseal-worker serve --processes N`` (see :func:`start_grpc_server`).

    Raises:
        CannotListen: ``host:port`` cannot be bound (in use by another process, not an address
            of this machine, ...).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive response waits ~40 ms (Nagle against delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise cannot_listen(host, port, exc, flag=flag) from None
        sock.listen(2048)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
