"""Every HTTP server of the project sees the socket peer as the client (R-H-20): the two ways an
app is served (rewardseal_server.http_serving for MockMed and the helpdesk example,
rewardseal_server.embedded_http for the worker's HTTP face and the console) over real uvicorn on a
free loopback port, with headers claiming another client and scheme, and uvicorn told by its own
variable to trust every proxy."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from rewardseal_server.embedded_http import start_http_server
from rewardseal_server.http_serving import HttpService
from rewardseal_server.uvicorn_config import uvicorn_config

CLAIMS = {
    "x-forwarded-for": "203.0.113.9",
    "x-forwarded-proto": "https",
    "forwarded": "for=203.0.113.9;proto=https",
}


async def echo(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    """An ASGI app answering with the client and scheme uvicorn handed it."""
    assert scope["type"] == "http"
    body = json.dumps({"client": scope["client"][0], "scheme": scope["scheme"]}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(autouse=True)
def uvicorn_trusts_everyone(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's own default would believe these headers from any peer with this set."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")


def test_a_process_server_sees_the_socket_peer() -> None:
    with HttpService(echo, host="127.0.0.1", port=0, name="echo") as service:
        answer = httpx.get(f"{service.url}/", headers=CLAIMS, timeout=10)
    assert answer.json() == {"client": "127.0.0.1", "scheme": "http"}
    assert "server" not in answer.headers


async def test_an_embedded_server_sees_the_socket_peer() -> None:
    server = await start_http_server(echo, host="127.0.0.1", port=0, name="echo")
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.get(f"{server.url}/", headers=CLAIMS)
    finally:
        await server.stop()
    assert answer.json() == {"client": "127.0.0.1", "scheme": "http"}
    assert "server" not in answer.headers


def test_no_server_can_turn_proxy_headers_back_on() -> None:
    assert uvicorn_config(echo).proxy_headers is False
    for option in ("proxy_headers", "forwarded_allow_ips", "server_header"):
        with pytest.raises(TypeError, match="fixed for every server"):
            uvicorn_config(echo, **{option: True})
