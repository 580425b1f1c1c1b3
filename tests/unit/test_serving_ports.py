"""rewardseal_server.serving owns its port (no SO_REUSEPORT unless asked) and says why it cannot
listen; it serves TLS when given a ServerTls and warns when it serves plaintext beyond loopback."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.tls_certs import TlsWorld

from rewardseal.core.errors import CannotListen
from rewardseal.rpc.tls import ClientTls, aio_channel
from rewardseal_server.serving import (
    address,
    cannot_listen,
    check_port_free,
    is_loopback,
    start_grpc_server,
    transport,
)

SERVICE = "rewardseal.test.v1.NoSuchService"


def _nothing(server: grpc.aio.Server) -> None:
    """No servicers: the health service is enough to answer."""


@pytest.fixture
def listening() -> Iterator[int]:
    """A port some other program listens on (a plain socket, no SO_REUSEPORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


async def _health(port: int, tls: ClientTls | None = None) -> int:
    async with aio_channel(f"127.0.0.1:{port}", tls) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        return int(answer.status)


def test_addresses_bracket_ipv6_literals() -> None:
    assert address("127.0.0.1", 8790) == "127.0.0.1:8790"
    assert address("::1", 8790) == "[::1]:8790"
    assert address("[::1]", 8790) == "[::1]:8790"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("worker.internal", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_error_names_the_address_and_the_reason() -> None:
    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    assert cannot_listen("127.0.0.1", 8790, in_use).message == (
        "cannot listen on 127.0.0.1:8790: the port is in use by another process "
        "(stop that process, or choose another --port)"
    )
    not_here = OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    assert cannot_listen("::1", 1, not_here).message == (
        "cannot listen on [::1]:1: cannot assign requested address (::1 is not an address of "
        "this host: pass --host 127.0.0.1, 0.0.0.0 or an address `ip addr` lists)"
    )
    assert cannot_listen("127.0.0.1", 8790).message.startswith("cannot listen on 127.0.0.1:8790:")


def test_a_port_in_use_is_found_before_grpc_tries(listening: int) -> None:
    with pytest.raises(CannotListen, match=f"127.0.0.1:{listening}: the port is in use"):
        check_port_free("127.0.0.1", listening)
    check_port_free("127.0.0.1", 0)


async def test_a_second_server_on_a_bound_port_refuses_to_start() -> None:
    first = await start_grpc_server(add_servicers=_nothing, service_names=(SERVICE,))
    try:
        with pytest.raises(CannotListen) as caught:
            await start_grpc_server(
                add_servicers=_nothing, service_names=(SERVICE,), port=first.port
            )
        assert caught.value.message == (
            f"cannot listen on 127.0.0.1:{first.port}: the port is in use by another process "
            "(stop that process, or choose another --port)"
        )
        assert await _health(first.port) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await first.stop()


async def test_grpc_refusing_the_bind_is_mapped_too(
    listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe can miss a port taken between it and gRPC's bind: gRPC's RuntimeError is mapped.
    monkeypatch.setattr("rewardseal_server.serving.check_port_free", lambda host, port: None)
    with pytest.raises(CannotListen, match=f"^cannot listen on 127.0.0.1:{listening}: "):
        await start_grpc_server(add_servicers=_nothing, service_names=(SERVICE,), port=listening)


async def test_reuse_port_is_a_deliberate_opt_in() -> None:
    first = await start_grpc_server(
        add_servicers=_nothing, service_names=(SERVICE,), reuse_port=True
    )
    try:
        second = await start_grpc_server(
            add_servicers=_nothing, service_names=(SERVICE,), port=first.port, reuse_port=True
        )
        await second.stop()
    finally:
        await first.stop()


async def test_plaintext_beyond_loopback_is_served_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rewardseal_server.serving"):
        running = await start_grpc_server(
            add_servicers=_nothing, service_names=(SERVICE,), host="0.0.0.0"
        )
        await running.stop()
    assert any("without TLS" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rewardseal_server.serving"):
        running = await start_grpc_server(add_servicers=_nothing, service_names=(SERVICE,))
        await running.stop()
    assert not caplog.records


async def test_a_tls_server_serves_tls_only(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path)
    tls = world.server_tls(mutual=True)
    assert (transport(None), transport(world.server_tls(mutual=False)), transport(tls)) == (
        "plaintext",
        "tls",
        "mtls",
    )
    running = await start_grpc_server(add_servicers=_nothing, service_names=(SERVICE,), tls=tls)
    try:
        serving = health_pb2.HealthCheckResponse.SERVING
        assert await _health(running.port, world.client_tls()) == serving
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _health(running.port)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop()
