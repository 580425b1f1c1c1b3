"""The control plane over TLS and mutual TLS (R-W-10): a real ``grpc.aio`` server on port 0 and
``rewardseal-control`` dialling it with ``--tls-*`` flags or ``REWARDSEAL_CONTROL_CLIENT_TLS_*``;
clients with no, a stranger's or a wrongly pinned certificate are refused; bad TLS flags are a
one-line usage error (exit 2); and ``serve`` over mTLS with the CLI, as real processes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.control import ADMIN_TOKEN, CLIENT_TOKEN, TRAINER
from support.tls_certs import TlsWorld

from rewardseal.core.contract import contract_digest
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.tls import aio_channel
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1 import control_service_pb2_grpc as pb_grpc
from rewardseal_control.app import ensure_organization_key
from rewardseal_control.cli import CLIENT_TLS_ENV, main
from rewardseal_control.server import start_control_server
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_control.store import ControlStore
from rewardseal_kit.mockmed import mockmed_contract
from rewardseal_server.serving import RunningServer

CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
CLI = Path(sys.executable).with_name("rewardseal-control")


@pytest.fixture(autouse=True)
def no_control_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TLS settings and tokens come from what each test passes."""
    for name in list(os.environ):
        if name.startswith("REWARDSEAL_CONTROL_"):
            monkeypatch.delenv(name)


@dataclass
class TlsControl:
    """A control plane serving mutual TLS, with one contract registered over it."""

    running: RunningServer
    store: ControlStore
    world: TlsWorld

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.running.port}"

    def tls_flags(self, *, ca: Path | None = None, cert: bool = True) -> list[str]:
        """``--tls-ca`` (this CA unless ``ca``) and, with ``cert``, the client certificate."""
        flags = ["--tls-ca", str(ca or self.world.ca.cert)]
        if cert:
            flags += ["--tls-cert", str(self.world.client.cert)]
            flags += ["--tls-key", str(self.world.client.key)]
        return flags


@pytest.fixture
async def tls_control(tmp_path: Path) -> AsyncIterator[TlsControl]:
    world = TlsWorld.create(tmp_path / "tls")
    store = ControlStore(f"sqlite:///{tmp_path / 'control.sqlite'}")
    key = SigningKey.generate()
    ensure_organization_key(store, key)
    running = await start_control_server(
        ControlPlaneServicer(store, key),
        admin_token=ADMIN_TOKEN,
        token=CLIENT_TOKEN,
        port=0,
        tls=world.server_tls(mutual=True),
    )
    control = TlsControl(running, store, world)
    async with aio_channel(control.target, world.client_tls()) as channel:
        await pb_grpc.ControlPlaneServiceStub(channel).RegisterContract(
            pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
            metadata=TRAINER,
            timeout=20,
        )
    yield control
    await running.stop(grace=None)
    store.close()


async def cli(control: TlsControl, *argv: str) -> tuple[int, str, str]:
    """``rewardseal-control argv --target ... --token ... --timeout 10`` in a thread (the server
    runs on this event loop); (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    arguments = [*argv, "--target", control.target, "--token", ADMIN_TOKEN, "--timeout", "10"]
    code = await asyncio.to_thread(main, arguments, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def listed_digests(out: str) -> list[str]:
    return [c["reward_contract_digest"] for c in json.loads(out)["contracts"]]


async def test_control_cli_lists_contracts_over_mtls(tls_control: TlsControl) -> None:
    code, out, err = await cli(tls_control, "contracts", "list", "--json", *tls_control.tls_flags())
    assert code == 0, err
    assert listed_digests(out) == [DIGEST]


async def test_control_cli_tls_from_the_environment(
    tls_control: TlsControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = tls_control.world
    monkeypatch.setenv(f"{CLIENT_TLS_ENV}CA", str(world.ca.cert))
    monkeypatch.setenv(f"{CLIENT_TLS_ENV}CERT", str(world.client.cert))
    monkeypatch.setenv(f"{CLIENT_TLS_ENV}KEY", str(world.client.key))
    # The server's certificate names localhost: dialling 127.0.0.1 and expecting that name works.
    monkeypatch.setenv(f"{CLIENT_TLS_ENV}SERVER_NAME", "localhost")
    code, out, err = await cli(tls_control, "contracts", "list", "--json")
    assert code == 0, err
    assert listed_digests(out) == [DIGEST]
    # A wrong expected name is refused: the server's certificate does not carry it.
    code, _, err = await cli(
        tls_control, "contracts", "list", "--tls-server-name", "control.elsewhere.test"
    )
    assert code == 1, err


async def test_plaintext_client_is_refused_by_a_tls_server(tls_control: TlsControl) -> None:
    async with grpc.aio.insecure_channel(tls_control.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await pb_grpc.ControlPlaneServiceStub(channel).ListContracts(
                pb.ListContractsRequest(), metadata=TRAINER, timeout=10
            )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    code, out, err = await cli(tls_control, "contracts", "list")
    assert (code, out) == (1, "")
    assert err.startswith(
        f"rewardseal-control: cannot reach the control plane at {tls_control.target}: "
    )
    assert "--tls-ca when it serves TLS" in err


async def test_mtls_without_client_certificate_is_refused(tls_control: TlsControl) -> None:
    code, out, _ = await cli(tls_control, "contracts", "list", *tls_control.tls_flags(cert=False))
    assert (code, out) == (1, "")


async def test_client_certificate_from_a_stranger_ca_is_refused(tls_control: TlsControl) -> None:
    stranger = tls_control.world.stranger_client
    flags = ["--tls-ca", str(tls_control.world.ca.cert)]
    flags += ["--tls-cert", str(stranger.cert), "--tls-key", str(stranger.key)]
    code, out, _ = await cli(tls_control, "contracts", "list", *flags)
    assert (code, out) == (1, "")


async def test_client_pinning_the_wrong_ca_refuses_the_server(tls_control: TlsControl) -> None:
    flags = tls_control.tls_flags(ca=tls_control.world.stranger_ca.cert)
    code, out, _ = await cli(tls_control, "contracts", "list", *flags)
    assert (code, out) == (1, "")


@pytest.mark.parametrize(
    ("problem", "first_words"),
    [
        ("cert without key", "rewardseal-control: --tls-cert needs --tls-key"),
        ("key without cert", "rewardseal-control: --tls-key needs --tls-cert"),
        ("unreadable CA", "rewardseal-control: cannot read the CA certificate "),
        ("not PEM", "rewardseal-control: the client certificate "),
    ],
)
def test_control_cli_tls_flag_errors_exit_2_with_one_line(
    tmp_path: Path, problem: str, first_words: str
) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    flags = {
        "cert without key": ["--tls-cert", str(world.client.cert)],
        "key without cert": ["--tls-key", str(world.client.key)],
        "unreadable CA": ["--tls-ca", str(tmp_path / "missing-ca.pem")],
        "not PEM": ["--tls-cert", str(garbage), "--tls-key", str(world.client.key)],
    }[problem]
    out, err = io.StringIO(), io.StringIO()
    argv = ["contracts", "list", "--target", "127.0.0.1:1", "--token", ADMIN_TOKEN, *flags]
    assert main(argv, stdout=out, stderr=err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(first_words), lines[0]
    assert out.getvalue() == ""


@pytest.mark.parametrize("problem", ["cert without key", "unreadable client CA"])
def test_serve_with_bad_tls_flags_exits_2_with_one_line(tmp_path: Path, problem: str) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    flags = ["--tls-cert", str(world.server.cert)]
    if problem == "unreadable client CA":
        flags += ["--tls-key", str(world.server.key), "--tls-client-ca", str(tmp_path / "no.pem")]
    out, err = io.StringIO(), io.StringIO()
    argv = ["serve", "--data-dir", str(tmp_path / "data"), "--port", "0", *flags]
    assert main(argv, stdout=out, stderr=err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    expected = {
        "cert without key": "rewardseal-control: --tls-cert needs --tls-key",
        "unreadable client CA": "rewardseal-control: cannot read the client CA ",
    }[problem]
    assert lines[0].startswith(expected), lines[0]


def _run_cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.slow
def test_serve_over_mtls_and_the_cli_as_processes(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    data_dir = tmp_path / "control"
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_CONTROL_")}
    serve_env = {
        **env,
        "REWARDSEAL_CONTROL_TLS_CERT": str(world.server.cert),
        "REWARDSEAL_CONTROL_TLS_KEY": str(world.server.key),
    }
    command = [str(CLI), "serve", "--data-dir", str(data_dir), "--port", "0"]
    command += ["--ready-file", str(ready), "--tls-client-ca", str(world.ca.cert)]
    serve = subprocess.Popen(
        command,
        env=serve_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert serve.poll() is None, serve.stdout.read() if serve.stdout else ""
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)
        banner = json.loads(ready.read_text())
        assert banner["transport"] == "mtls"
        common = ["--target", banner["target"], "--data-dir", str(data_dir), "--timeout", "10"]
        tls = ["--tls-ca", str(world.ca.cert)]
        tls += ["--tls-cert", str(world.client.cert), "--tls-key", str(world.client.key)]
        listed = _run_cli("contracts", "list", "--json", *common, *tls, env=env)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"contracts": []}
        plaintext = _run_cli("contracts", "list", *common, env=env)
        assert plaintext.returncode == 1, plaintext.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            status = serve.wait(timeout=30)
        finally:
            if serve.poll() is None:
                serve.kill()
    output = serve.stdout.read() if serve.stdout else ""
    assert status == 0, output
    assert "transport         mutual TLS (client certificates required)" in output
