"""The HTTP face over mutual TLS: the worker's ``--tls-*`` identity serves HTTPS too, and a
client without a certificate from the worker's client CA is refused at the handshake."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from support.tls_certs import TlsWorld

from rewardseal_worker.app import start_worker
from rewardseal_worker.settings import resolve_settings


async def test_http_face_serves_mutual_tls(data_dir: Path, tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    settings = resolve_settings(
        data_dir=data_dir,
        contract_dir=data_dir / "contracts" / "mockmed",
        port=0,
        http_port=0,
        tls_cert=world.server.cert,
        tls_key=world.server.key,
        tls_client_ca=world.ca.cert,
        env={},
    )
    app = await start_worker(settings)
    try:
        assert app.http is not None
        assert app.http.scheme == "https"
        url = f"https://127.0.0.1:{app.http.port}"
        trusted = ssl.create_default_context(cafile=world.ca.cert)
        trusted.load_cert_chain(world.client.cert, world.client.key)
        async with httpx.AsyncClient(verify=trusted, timeout=10) as client:
            health = await client.get(f"{url}/health")
        assert health.status_code == 200
        assert health.json()["reward_contract_digest"] == app.bundle.contract_digest
        anonymous = ssl.create_default_context(cafile=world.ca.cert)
        async with httpx.AsyncClient(verify=anonymous, timeout=10) as client:
            with pytest.raises(httpx.HTTPError):
                await client.get(f"{url}/health")
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(httpx.HTTPError):  # plaintext to a TLS port
                await client.get(f"http://127.0.0.1:{app.http.port}/health")
    finally:
        await app.stop()
