"""The worker's link to control over mutual TLS: in-process apps, then the demo flow as real
``rewardseal-control serve`` and ``rewardseal-worker serve`` processes.

The attack this closes: the worker dialled control in plaintext, so a man in the middle read
the token it sent and answered for control. Now the link pins control's CA and presents a
client certificate; a worker without one, or pinning another CA, never gets through.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.linked_stack import (
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    SEEDED_DIGEST,
    WORKER_TOKEN,
    control_receipts,
    eventually,
    issue_certificate,
    link_of,
    revoke,
    score_honest,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.mockmed_episodes import descriptor, write_triage
from support.tls_certs import TlsWorld
from support.worker_stack import stop_stack

from rewardseal.core.signing import TrustSet
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal_control.app import ControlApp
from rewardseal_server.localstack import HOST, LocalServices, enroll_worker, serve_command


@pytest.fixture
def world(tmp_path: Path) -> TlsWorld:
    return TlsWorld.create(tmp_path / "tls")


@pytest.fixture
async def control(tmp_path: Path, world: TlsWorld) -> AsyncIterator[ControlApp]:
    app = await start_control_plane(
        tmp_path,
        tls_cert=world.server.cert,
        tls_key=world.server.key,
        tls_client_ca=world.ca.cert,
    )
    yield app
    await app.stop()


def worker_tls_flags(world: TlsWorld, *, certificate: bool = True) -> dict[str, Path]:
    flags = {"control_tls_ca": world.ca.cert}
    if certificate:
        flags |= {"control_tls_cert": world.client.cert, "control_tls_key": world.client.key}
    return flags


async def test_control_link_over_mutual_tls(
    control: ControlApp, world: TlsWorld, data_dir: Path
) -> None:
    admin_tls = world.client_tls()
    stack = await start_linked_worker(
        data_dir, control.target, control.key, tls=admin_tls, **worker_tls_flags(world)
    )
    try:
        link = link_of(stack)
        await asyncio.wait_for(link.registered.wait(), 20)
        certificate_id = await issue_certificate(control, data_dir, stack.digest, tls=admin_tls)
        await scoring_under(stack, certificate_id)
        got = await score_honest(stack, 1)
        assert got.receipt.certified, got.receipt.certification_refusals

        async def forwarded() -> bool:
            receipts = await control_receipts(control, stack.digest, admin_tls)
            return got.receipt.receipt_id in receipts

        await eventually(forwarded)
        await revoke(control, certificate_id, admin_tls)
        # Not for the bundle's self-signed certificate: control does not list it (R-C-9).
        await scoring_under(stack, None)
    finally:
        await stop_stack(stack)


@pytest.mark.parametrize("attempt", ["plaintext", "no-client-certificate", "stranger-ca"])
async def test_a_worker_that_cannot_do_mutual_tls_never_reaches_control(
    control: ControlApp, world: TlsWorld, data_dir: Path, attempt: str
) -> None:
    flags: dict[str, Path] = {
        "plaintext": {},
        "no-client-certificate": worker_tls_flags(world, certificate=False),
        "stranger-ca": {
            "control_tls_ca": world.stranger_ca.cert,
            "control_tls_cert": world.stranger_client.cert,
            "control_tls_key": world.stranger_client.key,
        },
    }[attempt]
    # No enrollment: nothing of this worker may reach control anyway.
    stack = await start_linked_worker(data_dir, control.target, control.key, enroll=False, **flags)
    try:
        link = link_of(stack)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(link.registered.wait(), 3)
        assert link._follower is None or link._follower.held is None
        assert control.store.contracts.list_contracts(0, "").items == []
    finally:
        await stop_stack(stack)


async def test_demo_flow_over_mutual_tls_as_processes(
    tmp_path: Path, world: TlsWorld, data_dir: Path
) -> None:
    """Control and the worker as the console scripts `make up` runs, each serving mutual TLS,
    the worker dialling control over mutual TLS and pinning the key from control's ready file;
    a trainer begins, scores, and finds the receipts in control's index."""
    tls_files = [
        "--tls-cert",
        str(world.server.cert),
        "--tls-key",
        str(world.server.key),
        "--tls-client-ca",
        str(world.ca.cert),
    ]
    client_tls = world.client_tls()
    with LocalServices(tmp_path / "run") as local:
        control = local.start(
            "control",
            serve_command(
                "rewardseal-control",
                local.ready_file("control"),
                "--data-dir",
                str(tmp_path / "control"),
                *tls_files,
            ),
            {
                "REWARDSEAL_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
                "REWARDSEAL_CONTROL_TOKEN": CLIENT_TOKEN,
                "REWARDSEAL_CONTROL_WORKER_TOKEN": WORKER_TOKEN,
            },
            timeout=60,
        )
        assert control["transport"] == "mtls"
        control_target = f"{HOST}:{control['port']}"
        worker = local.start(
            "worker",
            serve_command(
                "rewardseal-worker",
                local.ready_file("worker"),
                "--data-dir",
                str(data_dir),
                "--contract",
                str(data_dir / "contracts" / "mockmed"),
                "--control",
                control_target,
                "--trust-org-key",
                str(local.ready_file("control")),
                "--control-tls-ca",
                str(world.ca.cert),
                "--control-tls-cert",
                str(world.client.cert),
                "--control-tls-key",
                str(world.client.key),
                *tls_files,
            ),
            {
                "REWARDSEAL_WORKER_TOKEN": "worker-serving-token-" + "s" * 24,
                "REWARDSEAL_WORKER_CONTROL_TOKEN": WORKER_TOKEN,
                "REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS": "0.2",
                # As `make up` does: the admin's one-time credential admits the worker's key.
                **enroll_worker(control_target, ADMIN_TOKEN, [SEEDED_DIGEST], tls=client_tls),
            },
            timeout=120,
        )
        assert worker["transport"] == "mtls"
        assert worker["trusted_organization_keys"] == [control["organization_public_key"]]
        digest = str(worker["contract_digest"])
        organization = _ControlHandle(control_target, control, client_tls)
        certificate_id = await issue_certificate(
            organization,  # type: ignore[arg-type]
            data_dir,
            digest,
            tls=client_tls,
        )
        async with _worker_client(worker, client_tls) as client:

            async def adopted() -> bool:
                return (await client.health()).certificate_id == certificate_id

            await eventually(adopted, within=30)
            # The ready file follows the certificate in use.
            ready = json.loads(local.ready_file("worker").read_text())
            assert ready["certificate_id"] == certificate_id
            scored = []
            for index in range(3):
                patient = f"patient-tls-{index:04d}"
                episode = f"episode.tls.{index:04d}"
                await client.begin(episode, digest, {"patient_id": patient})
                write_triage(data_dir / "mockmed" / "mockmed.sqlite", patient)
                got = await client.score(descriptor(digest, episode))
                assert got.receipt.certified, got.receipt.certification_refusals
                assert got.receipt.certificate_id == certificate_id
                scored.append(got.receipt.receipt_id)

        async def indexed() -> bool:
            receipts = await control_receipts(organization, digest, client_tls)  # type: ignore[arg-type]
            return set(scored) <= set(receipts)

        await eventually(indexed, within=30)


class _ControlHandle:
    """What the issuing helpers need of a control plane that runs as a process."""

    def __init__(self, target: str, banner: dict[str, object], tls: ClientTls) -> None:
        from rewardseal.core.signing import key_id_for

        self.target = target
        self.key = _PublicKey(key_id_for(bytes.fromhex(str(banner["organization_public_key"]))))
        self.tls = tls


class _PublicKey:
    def __init__(self, key_id: str) -> None:
        self.key_id = key_id


def _worker_client(banner: dict[str, object], tls: ClientTls) -> AsyncWorkerClient:
    return AsyncWorkerClient(
        f"{HOST}:{banner['port']}",
        token=str(banner["token"]),
        trust=TrustSet([bytes.fromhex(str(banner["public_key"]))]),
        timeout=20.0,
        tls=tls,
    )
