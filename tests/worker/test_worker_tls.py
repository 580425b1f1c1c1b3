"""The worker over TLS and mutual TLS (R-W-10): a real ``grpc.aio`` server on port 0 with its
seeded MockMed bundle, dialled by clients with the right, no, or the wrong credentials; and the
``--tls-*`` settings (flags over environment, a certificate without its key refused)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.mockmed_episodes import descriptor, write_triage
from support.tls_certs import TlsWorld

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.tls import ClientTls, aio_channel
from rewardseal.rpc.worker_client import AsyncWorkerClient, message_size_options
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_worker.app import WorkerApp, start_worker
from rewardseal_worker.cli import main
from rewardseal_worker.settings import resolve_settings

REFUSED_WITHIN_SECONDS = 10.0


@dataclass
class TlsWorker:
    """A worker serving TLS (mutual unless told otherwise) and the certificates around it."""

    app: WorkerApp
    world: TlsWorld

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.app.port}"

    def client(self, tls: ClientTls | None) -> AsyncWorkerClient:
        """A client pinned to the worker's key, on a channel built from ``tls``."""
        return AsyncWorkerClient(
            self.target,
            token=self.app.settings.token,
            trust=TrustSet([self.app.key.public_key]),
            timeout=20.0,
            retries=0,
            channel=aio_channel(self.target, tls, message_size_options()),
        )


async def start_tls_worker(data_dir: Path, world: TlsWorld, *, mutual: bool) -> TlsWorker:
    settings = resolve_settings(
        data_dir=data_dir,
        contract_dir=data_dir / "contracts" / "mockmed",
        port=0,
        tls_cert=world.server.cert,
        tls_key=world.server.key,
        tls_client_ca=world.ca.cert if mutual else None,
        env={},
    )
    return TlsWorker(await start_worker(settings), world)


@pytest.fixture
async def mtls_worker(data_dir: Path, tmp_path: Path) -> AsyncIterator[TlsWorker]:
    worker = await start_tls_worker(data_dir, TlsWorld.create(tmp_path / "tls"), mutual=True)
    yield worker
    await worker.app.stop()


async def refused(target: str, tls: ClientTls | None) -> grpc.StatusCode:
    """The status of an (open, tokenless) Health call dialled with ``tls``; the call must fail."""
    async with aio_channel(target, tls) as channel:
        stub = pb_grpc.RewardWorkerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Health(pb.HealthRequest(), timeout=REFUSED_WITHIN_SECONDS)
    return caught.value.code()


async def test_worker_scores_an_episode_over_mtls(mtls_worker: TlsWorker) -> None:
    assert mtls_worker.app.banner()["transport"] == "mtls"
    data_dir = mtls_worker.app.settings.data_dir
    async with mtls_worker.client(mtls_worker.world.client_tls()) as client:
        health = await client.health()
        assert health.reward_contract_digest == mtls_worker.app.bundle.contract_digest
        digest = mtls_worker.app.bundle.contract_digest
        await client.begin("episode.tls.0001", digest, {"patient_id": "patient-tls-0001"})
        write_triage(data_dir / "mockmed" / "mockmed.sqlite", "patient-tls-0001")
        scored = await client.score(descriptor(digest, "episode.tls.0001"))
    assert scored.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert scored.scalar == 1.0


async def test_plaintext_client_is_refused_by_a_tls_server(mtls_worker: TlsWorker) -> None:
    assert await refused(mtls_worker.target, None) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_without_client_certificate_is_refused(mtls_worker: TlsWorker) -> None:
    anonymous = mtls_worker.world.client_tls(with_certificate=False)
    assert await refused(mtls_worker.target, anonymous) == grpc.StatusCode.UNAVAILABLE


async def test_client_certificate_from_a_stranger_ca_is_refused(mtls_worker: TlsWorker) -> None:
    world = mtls_worker.world
    stranger = ClientTls.from_files(
        ca=world.ca.cert, cert=world.stranger_client.cert, key=world.stranger_client.key
    )
    assert await refused(mtls_worker.target, stranger) == grpc.StatusCode.UNAVAILABLE


async def test_client_pinning_the_wrong_ca_refuses_the_server(mtls_worker: TlsWorker) -> None:
    world = mtls_worker.world
    wrong_pin = ClientTls.from_files(
        ca=world.stranger_ca.cert, cert=world.client.cert, key=world.client.key
    )
    assert await refused(mtls_worker.target, wrong_pin) == grpc.StatusCode.UNAVAILABLE


async def test_server_only_tls_serves_clients_without_a_certificate(
    data_dir: Path, tmp_path: Path
) -> None:
    worker = await start_tls_worker(data_dir, TlsWorld.create(tmp_path / "tls"), mutual=False)
    try:
        assert worker.app.banner()["transport"] == "tls"
        tls = worker.world.client_tls(with_certificate=False)
        async with worker.client(tls) as client:
            health = await client.health()
        assert health.reward_contract_digest == worker.app.bundle.contract_digest
        assert await refused(worker.target, None) == grpc.StatusCode.UNAVAILABLE
    finally:
        await worker.app.stop()


def test_tls_settings_come_from_flags_over_the_environment(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    env = {
        "REWARDSEAL_WORKER_TLS_CERT": str(world.server.cert),
        "REWARDSEAL_WORKER_TLS_KEY": str(world.server.key),
    }
    from_env = resolve_settings(data_dir=tmp_path / "data", env=env)
    assert from_env.tls is not None
    assert not from_env.tls.mutual
    # A flag replaces its own variable only; the certificate and key still come from env.
    flagged = resolve_settings(data_dir=tmp_path / "data", tls_client_ca=world.ca.cert, env=env)
    assert flagged.tls is not None
    assert flagged.tls.mutual
    assert resolve_settings(data_dir=tmp_path / "data", env={}).tls is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tls_cert": "cert"}, "--tls-cert needs --tls-key (REWARDSEAL_WORKER_TLS_KEY)"),
        ({"tls_key": "key"}, "--tls-key needs --tls-cert (REWARDSEAL_WORKER_TLS_CERT)"),
        ({"tls_client_ca": "ca"}, "--tls-client-ca (REWARDSEAL_WORKER_TLS_CLIENT_CA) needs"),
    ],
)
def test_incomplete_tls_settings_are_refused(
    tmp_path: Path, given: dict[str, str], message: str
) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    paths = {"cert": world.server.cert, "key": world.server.key, "ca": world.ca.cert}
    flags = {name: paths[which] for name, which in given.items()}
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_settings(data_dir=tmp_path / "data", env={}, **flags)  # type: ignore[arg-type]


@pytest.mark.parametrize("problem", ["cert without key", "unreadable key"])
def test_serve_with_bad_tls_flags_exits_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    problem: str,
) -> None:
    for name in ("TLS_CERT", "TLS_KEY", "TLS_CLIENT_CA", "TOKEN", "CONTROL"):
        monkeypatch.delenv(f"REWARDSEAL_WORKER_{name}", raising=False)
    world = TlsWorld.create(tmp_path / "tls")
    flags = ["--tls-cert", str(world.server.cert)]
    if problem == "unreadable key":
        flags += ["--tls-key", str(tmp_path / "missing.key")]
    code = main(["serve", "--data-dir", str(tmp_path / "data"), "--port", "0", *flags])
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    if problem == "cert without key":
        assert lines[0].startswith("rewardseal-worker: --tls-cert needs --tls-key")
    else:
        assert lines[0].startswith("rewardseal-worker: cannot read the TLS private key ")
        assert "missing.key" in lines[0]
