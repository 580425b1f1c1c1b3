"""MockMed's read-only token (``MOCKMED_READ_TOKEN``): what a reward worker's oracle holds. It
reads the read, FHIR and screen APIs and nothing else; a write with it is 403 and stores
nothing; it never opens the fault switch; it must differ from the other tokens."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.server import MockMedServer
from rewardseal_mockmed.settings import READ_TOKEN_ENV, MockMedSettings, resolve_settings

TOKEN = secrets.token_urlsafe(24)
ADMIN_TOKEN = secrets.token_urlsafe(24)
READ_TOKEN = secrets.token_urlsafe(24)
PATIENT = "patient-read-token-0001"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockMedServer]:
    database = tmp_path_factory.mktemp("read-token") / "mockmed.sqlite"
    settings = MockMedSettings(
        db_url=f"sqlite:///{database}",
        token=TOKEN,
        admin_token=ADMIN_TOKEN,
        read_token=READ_TOKEN,
        host="127.0.0.1",
        port=0,
        token_source="test",
        admin_token_source="test",
        read_token_source="test",
    )
    with MockMedServer(settings) as running:
        with httpx.Client(base_url=running.url, timeout=10.0) as client:
            written = client.post(
                "/api/encounters",
                json={"patient_id": PATIENT, "type": "Triage", "status": "open"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert written.status_code == 201
        yield running


def call(
    server: MockMedServer, method: str, path: str, token: str, **kwargs: object
) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        return client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "path",
    [
        f"/api/encounters?patient_id={PATIENT}",
        f"/fhir/Encounter?patient={PATIENT}",
        f"/api/patients/{PATIENT}",
        "/screen.json",
    ],
)
def test_the_read_token_reads(server: MockMedServer, path: str) -> None:
    assert call(server, "GET", path, READ_TOKEN).status_code == 200


@pytest.mark.parametrize(
    "path", ["/api/encounters", "/ui/claim", "/ui/draft", "/api/drafts", "/api/drafts/d/submit"]
)
def test_the_read_token_cannot_write(server: MockMedServer, path: str) -> None:
    refused = call(server, "POST", path, READ_TOKEN, json={"patient_id": PATIENT, "type": "Triage"})
    assert refused.status_code == 403
    assert refused.json() == {"detail": "the read token may only read"}
    rows = call(server, "GET", f"/api/encounters?patient_id={PATIENT}", READ_TOKEN).json()
    assert len(rows["encounters"]) == 1


def test_the_read_token_never_opens_the_fault_switch(server: MockMedServer) -> None:
    assert call(server, "GET", "/admin/faults", READ_TOKEN).status_code == 401
    assert (
        call(server, "POST", "/admin/faults", READ_TOKEN, json={"mode": "down"}).status_code == 401
    )


def test_the_banner_names_where_the_read_token_came_from_never_the_token(
    server: MockMedServer,
) -> None:
    banner = server.banner()
    assert banner["read_token_source"] == "test"
    assert READ_TOKEN not in str(banner)


def test_the_read_token_comes_from_its_variable_and_must_differ() -> None:
    env = {"MOCKMED_TOKEN": TOKEN, READ_TOKEN_ENV: READ_TOKEN}
    settings = resolve_settings(env=env)
    assert settings.read_token == READ_TOKEN
    assert settings.read_token_source == f"${READ_TOKEN_ENV}"
    assert resolve_settings(env={"MOCKMED_TOKEN": TOKEN}).read_token is None
    with pytest.raises(ValidationError, match="the client token and the read token must differ"):
        resolve_settings(env={"MOCKMED_TOKEN": TOKEN, READ_TOKEN_ENV: TOKEN})
    with pytest.raises(ValidationError, match="the read token must have at least"):
        resolve_settings(env={"MOCKMED_TOKEN": TOKEN, READ_TOKEN_ENV: "short"})
