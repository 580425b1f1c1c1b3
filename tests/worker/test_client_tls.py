"""The worker clients over TLS and mutual TLS (``tls=ClientTls``), sync and asyncio.

The server is a real ``grpc.aio`` secure port serving the running worker's scorer
(tests/support/secure_front.py); certificates come from a throwaway CA per test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.mockmed_episodes import descriptor
from support.secure_front import secure_front
from support.tls_certs import TlsWorld
from worker.conftest import RunningStack
from worker.test_client import KINDS, Either, play

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt, WorkerClient
from rewardseal.v1.enums_pb2 import RewardOutcome


@pytest.fixture
def world(tmp_path: Path) -> TlsWorld:
    return TlsWorld.create(tmp_path / "tls")


@pytest.fixture
async def mtls_target(stack: RunningStack, world: TlsWorld) -> AsyncIterator[str]:
    """The worker's scorer behind a mutual-TLS port."""
    async with secure_front(stack, world.server_tls()) as target:
        yield target


def tls_client(kind: str, stack: RunningStack, target: str, tls: ClientTls | None) -> Either:
    """A ``kind`` client dialling ``target`` with ``tls`` (no retries: refusals are final)."""
    options: dict[str, Any] = {"token": stack.token, "trust": stack.trust, "timeout": 10.0}
    if kind == "sync":
        return Either(WorkerClient(target, retries=0, tls=tls, **options))
    return Either(AsyncWorkerClient(target, retries=0, tls=tls, **options))


@pytest.mark.parametrize("kind", KINDS)
async def test_client_scores_over_mutual_tls(
    stack: RunningStack, world: TlsWorld, mtls_target: str, kind: str
) -> None:
    either = tls_client(kind, stack, mtls_target, world.client_tls())
    try:
        health = await either.call("health")
        assert health.issuer_key_id == stack.app.key.key_id
        await play(stack, either, f"episode.tls.{kind}", write=True)
        got = await either.call("score", descriptor(stack.digest, f"episode.tls.{kind}"))
    finally:
        await either.close()
    assert isinstance(got, VerifiedReceipt)
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED


@pytest.mark.parametrize("kind", KINDS)
async def test_mutual_tls_refuses_a_client_without_a_certificate(
    stack: RunningStack, world: TlsWorld, mtls_target: str, kind: str
) -> None:
    either = tls_client(kind, stack, mtls_target, world.client_tls(with_certificate=False))
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call("health")
    finally:
        await either.close()
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("kind", KINDS)
async def test_a_plaintext_client_gets_nothing_from_a_tls_port(
    stack: RunningStack, mtls_target: str, kind: str
) -> None:
    either = tls_client(kind, stack, mtls_target, None)
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call("health")
    finally:
        await either.close()
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_from_another_ca_is_refused(
    stack: RunningStack, world: TlsWorld, mtls_target: str, kind: str
) -> None:
    # Pinning the stranger CA: the worker's certificate does not chain to it.
    stranger = ClientTls.from_files(
        ca=world.stranger_ca.cert, cert=world.client.cert, key=world.client.key
    )
    either = tls_client(kind, stack, mtls_target, stranger)
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call("health")
    finally:
        await either.close()
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


async def test_a_ready_channel_and_tls_settings_are_not_combined(
    stack: RunningStack, world: TlsWorld
) -> None:
    sync_channel = grpc.insecure_channel(stack.target)
    aio_channel = grpc.aio.insecure_channel(stack.target)
    try:
        with pytest.raises(ValidationError, match="not both"):
            WorkerClient(
                stack.target,
                token=stack.token,
                trust=stack.trust,
                channel=sync_channel,
                tls=world.client_tls(),
            )
        with pytest.raises(ValidationError, match="not both"):
            AsyncWorkerClient(
                stack.target,
                token=stack.token,
                trust=stack.trust,
                channel=aio_channel,
                tls=world.client_tls(),
            )
    finally:
        sync_channel.close()
        await aio_channel.close()
