"""The worker's /metrics on a real worker: counters move by exactly the episodes sent, by
outcome and certification; RPCs by method and code; batch sizes; the certificate in use."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.metrics_scrape import matching, scrape, value
from support.mockmed_episodes import descriptor, write_triage
from support.worker_stack import RunningStack, stop_stack

from rewardseal.core.errors import CannotListen, RewardSealError, Unauthenticated, ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal_mockmed.seeding import show_on_screen
from rewardseal_worker.app import start_worker
from rewardseal_worker.settings import resolve_settings

RECEIPTS = "rewardseal_worker_receipts_total"
RPCS = "rewardseal_worker_rpc_requests_total"
LATENCY_COUNT = "rewardseal_worker_rpc_duration_seconds_count"
BATCH_SUM = "rewardseal_worker_batch_size_sum"
SERVICE = "RewardWorkerService"


@pytest.fixture
async def metered(data_dir: Path) -> AsyncIterator[RunningStack]:
    settings = resolve_settings(data_dir=data_dir, port=0, metrics_port=0, env={})
    app = await start_worker(settings)
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([app.key.public_key]),
        timeout=20.0,
    )
    running = RunningStack(app=app, client=client, data_dir=data_dir)
    yield running
    await stop_stack(running)


def url_of(stack: RunningStack) -> str:
    assert stack.app.metrics is not None
    return stack.app.metrics.url


def rpc(method: str, code: str) -> dict[str, str]:
    return {"service": SERVICE, "method": method, "code": code}


async def test_counters_move_by_exactly_the_episodes_sent(metered: RunningStack) -> None:
    before = await scrape(url_of(metered))
    honest, lies = 3, 2
    for n in range(honest):
        patient = f"patient-metrics-h{n}"
        await metered.client.begin(f"episode.metrics.h{n}", metered.digest, {"patient_id": patient})
        write_triage(metered.database, patient)
        await metered.client.score(descriptor(metered.digest, f"episode.metrics.h{n}"))
    for n in range(lies):
        patient = f"patient-metrics-l{n}"
        await metered.client.begin(f"episode.metrics.l{n}", metered.digest, {"patient_id": patient})
        show_on_screen(metered.screen, patient_id=patient, banner="Saved")
        await metered.client.score(descriptor(metered.digest, f"episode.metrics.l{n}"))
    after = await scrape(url_of(metered))

    def moved(name: str, labels: dict[str, str]) -> float:
        return value(after, name, labels) - value(before, name, labels)

    assert moved(RECEIPTS, {"outcome": "VERIFIED", "certified": "true"}) == honest
    assert moved(RECEIPTS, {"outcome": "WRONG_EFFECT", "certified": "true"}) == lies
    assert sum(matching(after, RECEIPTS).values()) - sum(matching(before, RECEIPTS).values()) == 5
    assert moved(RPCS, rpc("ScoreEpisode", "OK")) == honest + lies
    assert moved(RPCS, rpc("BeginEpisode", "OK")) == honest + lies
    assert moved(LATENCY_COUNT, rpc("ScoreEpisode", "OK")) == honest + lies
    # Every unary score went through the micro-batcher: the batch sizes add up to the calls.
    assert moved(BATCH_SUM, {"batcher": "scoring"}) == honest + lies
    assert moved(BATCH_SUM, {"batcher": "begin"}) == honest + lies
    certificate = metered.app.bundle.certificate
    assert certificate is not None
    in_use = {"certificate_id": certificate.certificate_id, "state": "CURRENT"}
    assert value(after, "rewardseal_worker_certificate_in_use", in_use) == 1.0


async def test_refused_and_failed_calls_are_counted_by_code(metered: RunningStack) -> None:
    before = await scrape(url_of(metered))
    stranger = AsyncWorkerClient(
        metered.target, token="x" * 32, trust=metered.trust, timeout=5.0, retries=0
    )
    try:
        with pytest.raises(Unauthenticated):
            await stranger.score(descriptor(metered.digest, "episode.metrics.stranger"))
    finally:
        await stranger.close()
    # A descriptor for another contract: refused by the worker itself, with its own code.
    with pytest.raises(RewardSealError):
        await metered.client.score(descriptor("sha256:" + "0" * 64, "episode.metrics.other"))
    after = await scrape(url_of(metered))
    assert (
        value(after, RPCS, rpc("ScoreEpisode", "UNAUTHENTICATED"))
        - value(before, RPCS, rpc("ScoreEpisode", "UNAUTHENTICATED"))
        == 1
    )
    failed = {
        labels: count - before.get((RPCS, labels), 0.0)
        for labels, count in matching(after, RPCS).items()
        if ("method", "ScoreEpisode") in labels and ("code", "OK") not in labels
    }
    assert sum(failed.values()) == 2  # the stranger and the other contract, nothing else
    # A refused call issues no receipt.
    assert sum(matching(after, RECEIPTS).values()) == sum(matching(before, RECEIPTS).values())


async def test_metrics_port_in_use_refuses_to_start(data_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = resolve_settings(data_dir=data_dir, port=0, metrics_port=port, env={})
        with pytest.raises(CannotListen, match=f"127.0.0.1:{port}: the port is in use"):
            await start_worker(settings)


def test_metrics_port_from_the_environment(tmp_path: Path) -> None:
    env = {"REWARDSEAL_WORKER_METRICS_PORT": "9464"}
    assert resolve_settings(data_dir=tmp_path, env=env).metrics_port == 9464
    assert resolve_settings(data_dir=tmp_path, env={}).metrics_port is None
    with pytest.raises(
        ValidationError, match="REWARDSEAL_WORKER_METRICS_PORT must be a whole number"
    ):
        resolve_settings(data_dir=tmp_path, env={"REWARDSEAL_WORKER_METRICS_PORT": "abc"})
    with pytest.raises(ValidationError, match="out of range"):
        resolve_settings(data_dir=tmp_path, metrics_port=70000, env={})
