"""grpc.health.v1 follows the worker's store: NOT_SERVING during a store outage, SERVING after.

A private PostgreSQL cluster is paused and resumed under a running worker; the standard health
service is asked over real gRPC, as a load balancer or a Kubernetes probe would ask it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.postgres import PostgresServer, PostgresUnavailable

from rewardseal.core.errors import ValidationError
from rewardseal_worker.app import start_worker
from rewardseal_worker.server import SERVICE_NAME
from rewardseal_worker.settings import resolve_settings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
INTERVAL = 0.2
DEADLINE = 20.0


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A cluster of this test's own: pausing it must not disturb the session's server."""
    try:
        server = PostgresServer()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def _status(stub: health_pb2_grpc.HealthStub, service: str) -> int:
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    status: int = answer.status
    return status


async def _wait_for(stub: health_pb2_grpc.HealthStub, wanted: int) -> None:
    """Poll until both the server and the worker service report ``wanted``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while loop.time() < end:
        if {await _status(stub, ""), await _status(stub, SERVICE_NAME)} == {wanted}:
            return
        await asyncio.sleep(INTERVAL / 2)
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(wanted)
    pytest.fail(f"health did not become {name}")


async def test_store_outage_flips_standard_health(
    data_dir: Path, private_postgres: PostgresServer
) -> None:
    database = private_postgres.create_database()
    settings = resolve_settings(
        data_dir=data_dir,
        contract_dir=data_dir / "contracts" / "mockmed",
        port=0,
        db_url=private_postgres.url(database),
        env={},
    )
    app = await start_worker(dataclasses.replace(settings, health_interval_seconds=INTERVAL))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            assert await _status(stub, "") == SERVING
            private_postgres.pause()
            await _wait_for(stub, NOT_SERVING)
            private_postgres.resume()
            await _wait_for(stub, SERVING)
    finally:
        await app.stop()


def test_health_interval_is_validated(tmp_path: Path) -> None:
    env = {"REWARDSEAL_WORKER_HEALTH_INTERVAL_SECONDS": "0"}
    with pytest.raises(ValidationError, match="positive"):
        resolve_settings(data_dir=tmp_path, env=env)
    env["REWARDSEAL_WORKER_HEALTH_INTERVAL_SECONDS"] = "soon"
    with pytest.raises(ValidationError, match="number"):
        resolve_settings(data_dir=tmp_path, env=env)
    env["REWARDSEAL_WORKER_HEALTH_INTERVAL_SECONDS"] = "2.5"
    assert resolve_settings(data_dir=tmp_path, env=env).health_interval_seconds == 2.5
