"""The serving plumbing the worker and the control plane share (rewardseal_server.serving)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rewardseal.rpc.worker_client import MAX_MESSAGE_BYTES, message_size_options
from rewardseal_server.serving import serve_until_signalled, start_grpc_server, write_ready_file

SERVICE = "rewardseal.test.v1.NoSuchService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _health(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(answer.status)


def test_servers_and_clients_share_the_message_caps() -> None:
    assert dict(message_size_options()) == {
        "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
        "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    }


async def test_a_started_server_is_serving_and_hooks_run_in_order() -> None:
    events: list[str] = []
    added: list[grpc.aio.Server] = []

    async def on_start() -> None:
        events.append("start")

    ports: list[int] = []

    async def on_stop() -> None:
        # NOT_SERVING is set before the hook runs; the server still answers.
        events.append(f"stop:{await _health(ports[0], '')}:{running.serving}")

    running = await start_grpc_server(
        add_servicers=added.append,
        service_names=(SERVICE,),
        on_start=on_start,
        on_stop=on_stop,
    )
    ports.append(running.port)
    try:
        assert added == [running.server]
        assert running.port > 0
        assert events == ["start"]
        assert await _health(running.port, "") == SERVING
        assert await _health(running.port, SERVICE) == SERVING
        assert running.serving is True
        # `serving` says what the health service says (the worker's HTTP /health reads it).
        await running.set_serving(False)
        assert (await _health(running.port, ""), running.serving) == (NOT_SERVING, False)
        await running.set_serving(True)
        assert (await _health(running.port, ""), running.serving) == (SERVING, True)
    finally:
        await running.stop(grace=None)
    assert events == ["start", f"stop:{NOT_SERVING}:False"]
    # Stopped: a late set_serving(True) (a store watch) changes neither.
    await running.set_serving(True)
    assert running.serving is False


@pytest.mark.parametrize("reflection", [True, False])
async def test_reflection_lists_the_services_only_when_asked(reflection: bool) -> None:
    running = await start_grpc_server(
        add_servicers=lambda server: None, service_names=(SERVICE,), reflection=reflection
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            call = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
            )
            if not reflection:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call.read()
                assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
                return
            answer = await call.read()
        names = {s.name for s in answer.list_services_response.service}
        assert names == {
            SERVICE,
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
    finally:
        await running.stop(grace=None)


def test_the_ready_file_is_json_and_private(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    # A temporary file left behind by an earlier run, readable by others.
    leftover = tmp_path / ".ready.json.tmp"
    leftover.write_text("stale")
    leftover.chmod(0o644)
    write_ready_file(path, {"port": 8790, "token": "secret"})
    assert json.loads(path.read_text()) == {"port": 8790, "token": "secret"}
    assert path.read_text().endswith("}\n")
    assert (path.stat().st_mode & 0o777) == 0o600
    assert not leftover.exists()
    write_ready_file(path, {"port": 1})
    assert json.loads(path.read_text()) == {"port": 1}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_serving_ends_on_a_signal_then_stops(signum: int) -> None:
    stopped = asyncio.Event()

    async def stop() -> None:
        stopped.set()

    serving = asyncio.create_task(serve_until_signalled(stop))
    await asyncio.sleep(0)  # the handlers are installed before the task first waits
    assert not stopped.is_set()
    os.kill(os.getpid(), signum)
    await asyncio.wait_for(serving, timeout=10)
    assert stopped.is_set()
    # The handlers are gone again: the loop no longer claims the signal.
    assert not asyncio.get_running_loop().remove_signal_handler(signum)
