"""The ``rest`` and ``fhir`` oracle readers against the real MockMed server (R-W-4, R-W-6).

Reader level: both kinds answer exactly what the SQL reader answers over the same database, and
every MockMed fault (down, slow past the recipe timeout, 500, malformed JSON) is
OracleUnavailable. Worker level: a tier-2 API-channel bundle whose recipe is ``rest`` scores the
honest episode VERIFIED, the banner lie WRONG_EFFECT, and each fault FAILED_PLATFORM with no
scalar (never VERIFIED, never 0.0).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import descriptor
from support.mockmed_service import RunningMockMed, running_mockmed
from worker.conftest import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import ValidationError
from rewardseal.v1.enums_pb2 import OracleChannel, RewardOutcome, Uncertainty
from rewardseal_kit.mockmed import IDENTITY_KEY
from rewardseal_worker.oracles import OracleUnavailable, make_reader, validate_recipe
from rewardseal_worker.oracles.base import OracleReader
from rewardseal_worker.seed import REST_BUNDLE, REST_TOKEN_ENV, REST_URL_ENV

URL_ENV = "RS_TEST_MOCKMED_URL"
TOKEN_ENV = "RS_TEST_MOCKMED_TOKEN"
REST_RECIPE: dict[str, Any] = {
    "kind": "rest",
    "base_url_env": URL_ENV,
    "token_env": TOKEN_ENV,
    "path": "/api/encounters",
    "collection": "encounters",
    "identity_params": {IDENTITY_KEY: "patient_id"},
    "timeout_seconds": 1.0,
}
FHIR_RECIPE: dict[str, Any] = {
    "kind": "fhir",
    "base_url_env": URL_ENV,
    "token_env": TOKEN_ENV,
    "resource": "Encounter",
    "identity_params": {IDENTITY_KEY: "patient"},
    "timeout_seconds": 1.0,
}
SQL_RECIPE: dict[str, Any] = {
    "kind": "sql",
    "database": {"sqlite_path": "sor.sqlite"},
    "table": "encounters",
    "id_column": "id",
    "identity_fields": {IDENTITY_KEY: "patient_id"},
}
FAULTS = ["down", "slow", "error500", "malformed"]
PATIENT = "patient-http-0001"
OTHER = "patient-http-0002"
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
FAILED_PLATFORM = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM


def set_fault(mockmed: RunningMockMed, mode: str) -> None:
    # slow: well past the recipes' 1 s timeout.
    mockmed.set_fault(mode, delay_seconds=2.5 if mode == "slow" else None)


def post(mockmed: RunningMockMed, path: str, **fields: Any) -> dict[str, Any]:
    response = mockmed.client.post(path, json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["banner"] == "Saved"
    return body


@pytest.fixture
def mockmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningMockMed]:
    """MockMed over tmp_path/sor.sqlite, its URL and token in the recipes' variables."""
    with running_mockmed(f"sqlite:///{tmp_path / 'sor.sqlite'}", tmp_path) as running:
        monkeypatch.setenv(URL_ENV, running.url)
        monkeypatch.setenv(TOKEN_ENV, running.token)
        yield running


@pytest.fixture(params=["rest", "fhir"])
def http_reader(request: pytest.FixtureRequest, mockmed: RunningMockMed, tmp_path: Path):
    reader = make_reader(REST_RECIPE if request.param == "rest" else FHIR_RECIPE, tmp_path)
    yield reader
    reader.close()


# --------------------------------------------------------------------------------------------
# Reader level
# --------------------------------------------------------------------------------------------


def test_rest_and_fhir_read_what_sql_reads(mockmed: RunningMockMed, tmp_path: Path) -> None:
    post(mockmed, "/api/encounters", patient_id=PATIENT, type="Triage", note="a", status="open")
    post(mockmed, "/api/encounters", patient_id=PATIENT, type="Lab", status="closed")
    post(mockmed, "/api/encounters", patient_id=PATIENT, note="n", status="weird", priority="stat")
    post(mockmed, "/api/encounters", patient_id=PATIENT, status="cancelled")
    post(mockmed, "/api/encounters", patient_id=OTHER, type="Triage", note="b", status="open")
    readers: list[OracleReader] = [
        make_reader(recipe, tmp_path) for recipe in (SQL_RECIPE, REST_RECIPE, FHIR_RECIPE)
    ]
    try:
        for patient, count in ((PATIENT, 4), (OTHER, 1), ("patient-nobody", 0)):
            sql, rest, fhir = (
                sorted(r.read({IDENTITY_KEY: patient}), key=lambda x: x["id"]) for r in readers
            )
            assert len(sql) == count
            assert rest == sql
            assert fhir == sql
        assert {r.kind for r in readers} == {"sql", "rest", "fhir"}
        many = readers[1].read_many([{IDENTITY_KEY: PATIENT}, {IDENTITY_KEY: OTHER}])
        assert [len(x) for x in many if isinstance(x, list)] == [4, 1]
    finally:
        for reader in readers:
            reader.close()


def test_identity_is_a_query_parameter_not_a_path(
    mockmed: RunningMockMed, http_reader: OracleReader
) -> None:
    tricky = "p/../../admin/faults?mode=down&x=#y"
    post(mockmed, "/api/encounters", patient_id=tricky, type="Triage", status="open")
    records = http_reader.read({IDENTITY_KEY: tricky})
    assert [r["patient_id"] for r in records] == [tricky]
    assert mockmed.set_fault("none")["mode"] == "none"


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_are_oracle_unavailable_without_secrets(
    mockmed: RunningMockMed, http_reader: OracleReader, fault: str
) -> None:
    post(mockmed, "/api/encounters", patient_id=PATIENT, type="Triage", note="secret-note")
    set_fault(mockmed, fault)
    with pytest.raises(OracleUnavailable) as caught:
        http_reader.read({IDENTITY_KEY: PATIENT})
    message = str(caught.value)
    for secret in (mockmed.url, mockmed.token, PATIENT, "secret-note", "127.0.0.1"):
        assert secret not in message
    assert caught.value.__cause__ is None
    # Nothing chained that could print the URL: no cause, no context shown.
    assert caught.value.__context__ is None or caught.value.__suppress_context__
    if fault == "slow":
        assert "timed out" in message
    # read_many answers the error in place instead of raising.
    assert all(
        isinstance(x, OracleUnavailable) for x in http_reader.read_many([{IDENTITY_KEY: PATIENT}])
    )


def test_wrong_token_and_server_gone_are_unavailable(
    mockmed: RunningMockMed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "not-the-token")
    reader = make_reader(REST_RECIPE, tmp_path)
    with pytest.raises(OracleUnavailable, match="HTTP 401"):
        reader.read({IDENTITY_KEY: PATIENT})
    reader.close()
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9")  # discard port: nothing listens
    reader = make_reader(FHIR_RECIPE, tmp_path)
    with pytest.raises(OracleUnavailable, match="request failed"):
        reader.read({IDENTITY_KEY: PATIENT})
    reader.close()


# --------------------------------------------------------------------------------------------
# Recipes: credentials by environment variable name only
# --------------------------------------------------------------------------------------------


def test_recipes_validate() -> None:
    assert validate_recipe(REST_RECIPE) == "rest"
    assert validate_recipe(FHIR_RECIPE) == "fhir"


@pytest.mark.parametrize("recipe", [REST_RECIPE, FHIR_RECIPE], ids=["rest", "fhir"])
@pytest.mark.parametrize("missing", [TOKEN_ENV, URL_ENV])
def test_missing_env_var_is_refused_at_reader_creation(
    recipe: dict[str, Any], missing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv(TOKEN_ENV, "t0ken-value")
    monkeypatch.delenv(missing)
    with pytest.raises(ValidationError, match=f"{missing} named by the oracle recipe is not set"):
        make_reader(recipe, tmp_path)


LITERAL_TOKEN = "sk_live_5f2b9c1d7e"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"token": LITERAL_TOKEN}, "looks like a credential", id="token-key"),
        pytest.param({"token_env": LITERAL_TOKEN}, "must name an environment", id="token-in-env"),
        pytest.param({"token_env": f"Bearer {LITERAL_TOKEN}"}, "must name", id="bearer-in-env"),
        pytest.param(
            {"headers": {"Authorization": f"Bearer {LITERAL_TOKEN}"}},
            "looks like a credential",
            id="auth-header",
        ),
        pytest.param({"base_url": "http://127.0.0.1:8080"}, "looks like a URL", id="literal-url"),
        pytest.param({"base_url_env": "http://u:p@h"}, "looks like a URL", id="url-in-env"),
        pytest.param({"base_url_env": "lower"}, "base_url_env", id="bad-env-name"),
        pytest.param({"path": "/api/../admin"}, "path", id="dotdot-path"),
        pytest.param({"path": "/api/x?y=1"}, "path", id="query-in-path"),
        pytest.param({"path": "api"}, "path", id="relative-path"),
        pytest.param({"identity_params": {IDENTITY_KEY: "a b"}}, "identity_params", id="param"),
        pytest.param({"identity_fields": {IDENTITY_KEY: "x"}}, "unknown keys", id="fields-key"),
        pytest.param({"timeout_seconds": 0}, "timeout", id="timeout"),
    ],
)
def test_bad_rest_recipes_are_refused(
    changes: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv(TOKEN_ENV, "t0ken-value")
    with pytest.raises(ValidationError, match=message) as caught:
        make_reader({**REST_RECIPE, **changes}, tmp_path)
    assert LITERAL_TOKEN not in str(caught.value)


def test_bad_fhir_resource_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="resource must be one of"):
        make_reader({**FHIR_RECIPE, "resource": "Patient"}, tmp_path)


@pytest.mark.parametrize(
    "url", ["http://user:pw-secret@127.0.0.1:9", "ftp://127.0.0.1/", "http://127.0.0.1:9/?k=pw"]
)
def test_unusable_base_urls_are_refused_without_echo(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.setenv(TOKEN_ENV, "t0ken-value")
    with pytest.raises(ValidationError, match=URL_ENV) as caught:
        make_reader(REST_RECIPE, tmp_path)
    assert url not in str(caught.value)
    assert "pw" not in str(caught.value)


# --------------------------------------------------------------------------------------------
# Worker level: a tier-2 API-channel bundle whose recipe is rest
# --------------------------------------------------------------------------------------------


@pytest.fixture
async def rest_stack(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[RunningStack, RunningMockMed]]:
    """MockMed over the seeded store and a worker on the seeded rest bundle (reads it over HTTP)."""
    database = data_dir / "mockmed" / "mockmed.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path) as mockmed:
        monkeypatch.setenv(REST_URL_ENV, mockmed.url)
        monkeypatch.setenv(REST_TOKEN_ENV, mockmed.token)
        stack = await start_stack(data_dir, contract=REST_BUNDLE.name)
        try:
            assert stack.app.reader.kind == "rest"
            assert stack.app.bundle.tier == 2
            assert stack.app.bundle.contract.oracle.channel == OracleChannel.ORACLE_CHANNEL_API
            # The seeded rest bundle carries its own self-signed synthetic certificate.
            assert stack.app.bundle.certificate is not None
            yield stack, mockmed
        finally:
            await stop_stack(stack)


async def test_worker_over_rest_honest_verified_and_banner_lie_wrong_effect(
    rest_stack: tuple[RunningStack, RunningMockMed],
) -> None:
    stack, mockmed = rest_stack
    honest, liar = "patient-rest-honest-01", "patient-rest-liar-01"
    for episode, patient in (("episode.rest.honest.01", honest), ("episode.rest.lie.01", liar)):
        begun = await stack.client.begin(episode, stack.digest, {IDENTITY_KEY: patient})
        assert begun.baseline_recorded
    post(
        mockmed,
        "/api/encounters",
        patient_id=honest,
        type="Triage",
        note="Follow-up in 2 weeks.",
        status="open",
    )
    post(mockmed, "/ui/claim", patient_id=liar)
    got = await stack.client.score(descriptor(stack.digest, "episode.rest.honest.01"))
    assert got.receipt.reward_outcome == VERIFIED, RewardOutcome.Name(got.receipt.reward_outcome)
    assert got.scalar == 1.0
    lie = await stack.client.score(descriptor(stack.digest, "episode.rest.lie.01"))
    outcome = lie.receipt.reward_outcome
    assert outcome == WRONG_EFFECT, RewardOutcome.Name(outcome)
    assert lie.scalar == 0.0


@pytest.mark.parametrize("fault", FAULTS)
async def test_worker_over_rest_fault_is_failed_platform_unscored(
    rest_stack: tuple[RunningStack, RunningMockMed], fault: str
) -> None:
    stack, mockmed = rest_stack
    patient = f"patient-rest-{fault}-01"
    episode = f"episode.rest.{fault}.01"
    begun = await stack.client.begin(episode, stack.digest, {IDENTITY_KEY: patient})
    assert begun.baseline_recorded
    # An honest write: only the fault may stand between it and VERIFIED.
    post(mockmed, "/api/encounters", patient_id=patient, type="Triage", note="n", status="open")
    set_fault(mockmed, fault)
    got = await stack.client.score(descriptor(stack.digest, episode))
    receipt = got.receipt
    assert receipt.reward_outcome == FAILED_PLATFORM, RewardOutcome.Name(receipt.reward_outcome)
    assert receipt.uncertainty == Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE
    assert not receipt.HasField("scalar_reward")
    assert got.scalar is None
    assert got.unscored
    assert not receipt.reward_components
