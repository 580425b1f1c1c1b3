"""The worker's HTTP/JSON face on a real server (docs/spec.md §13, R-H-1/R-H-2; docs/http.md).

One seeded worker serves gRPC and HTTP for the whole module (its own event loop in a thread);
httpx calls the HTTP face, the rewardseal gRPC client the other. Every route, every status the
face answers, receipts that equal the gRPC receipts of the same episodes field for field, and
an envelope that verifies with the rewardseal client. Each test uses its own episodes and
patients, and every episode scores at policy update 0 (the ledger is shared) except the last
test's, which raises it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.http_worker import HttpWorker, http_worker
from support.mockmed_episodes import CHECKPOINT, descriptor, write_triage

from rewardseal.core.errors import DuplicateEpisode, Unavailable, ValidationError
from rewardseal.core.receipts import open_receipt
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateState,
    RewardOutcome,
    Uncertainty,
)
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker.health_watch import HealthWatch
from rewardseal_worker.http.guards import MAX_BODY_BYTES
from rewardseal_worker.http.responses import error_response
from rewardseal_worker.http.shapes import WITHHELD_PRODUCTION, ReceiptView, reward_view
from rewardseal_worker.settings import resolve_settings

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


@pytest.fixture(scope="module")
def worker(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpWorker]:
    with http_worker(seeded_template, tmp_path_factory.mktemp("http") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def http(worker: HttpWorker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=worker.url, headers=worker.auth, timeout=20.0) as client:
        yield client


@pytest.fixture(scope="module")
def anon(worker: HttpWorker) -> Iterator[httpx.Client]:
    """A client without a token."""
    with httpx.Client(base_url=worker.url, timeout=20.0) as client:
        yield client


def body(worker: HttpWorker, episode_id: str, **fields: Any) -> dict[str, Any]:
    """A POST /v1/rewards body as an HTTP reward client sends it."""
    return {
        "episode_id": episode_id,
        "policy_checkpoint_id": CHECKPOINT,
        "policy_update": 0,
        "reward_contract_digest": worker.digest,
        **fields,
    }


def begin(http: httpx.Client, worker: HttpWorker, episode_id: str, patient: str) -> None:
    answer = http.post(
        "/v1/episodes",
        json={
            "episode_id": episode_id,
            "reward_contract_digest": worker.digest,
            "oracle_identity": {"patient_id": patient},
        },
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["baseline_recorded"] is True


def refused(answer: httpx.Response, status: int, reason: str) -> dict[str, Any]:
    """The JSON error body, after checking its status and reason."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    document: dict[str, Any] = answer.json()
    assert document["error"] == reason, document
    assert isinstance(document["detail"], str)
    assert document["detail"]
    return document


def envelope_of(document: dict[str, Any]) -> SignedEnvelope:
    return json_format.ParseDict(document["envelope"], SignedEnvelope())


def assert_view_equals(view: dict[str, Any], receipt: RewardEvidenceReceipt) -> None:
    """The HTTP receipt JSON states exactly what the signed gRPC receipt does (R-H-2)."""
    word = {
        "reward_outcome": RewardOutcome.Name(receipt.reward_outcome).removeprefix(
            "REWARD_OUTCOME_"
        ),
        "certificate_state": CertificateState.Name(receipt.certificate_state).removeprefix(
            "CERTIFICATE_STATE_"
        ),
        "uncertainty": Uncertainty.Name(receipt.uncertainty).removeprefix("UNCERTAINTY_"),
    }
    for name, value in word.items():
        assert view[name] == value.lower(), name
    plain = (
        "receipt_id",
        "reward_contract_digest",
        "policy_checkpoint_id",
        "episode_id",
        "evidence_digest",
        "certified",
        "development_only",
        "issuer_key_id",
        "nonce",
    )
    for name in plain:
        assert view[name] == getattr(receipt, name), name
    assert type(view["policy_update"]) is int
    assert view["policy_update"] == receipt.policy_update
    assert type(view["oracle_tier"]) is int
    assert view["oracle_tier"] == receipt.oracle_tier
    assert view["reward_components"] == dict(receipt.reward_components)
    if receipt.HasField("scalar_reward"):
        assert view["scalar_reward"] == receipt.scalar_reward
    else:
        assert view["scalar_reward"] is None
    for name in ("certificate_id", "certificate_digest", "calibration_corpus_digest"):
        assert view[name] == (getattr(receipt, name) or None), name
    scope = CalibrationScope.Name(receipt.calibration_scope).removeprefix("CALIBRATION_SCOPE_")
    assert view["calibration_scope"] == (None if scope == "UNSPECIFIED" else scope.lower())
    issued = datetime.fromtimestamp(receipt.issued_at.seconds, UTC)
    assert view["issued_at"] == issued.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert view["issued_at"].endswith("Z")
    assert "." not in view["issued_at"]
    assert set(view) == set(ReceiptView.model_fields)


# --- GET /health ---


def test_health_needs_no_token_and_matches_the_health_rpc(
    worker: HttpWorker, anon: httpx.Client
) -> None:
    answer = anon.get("/health")
    assert answer.status_code == 200
    health = answer.json()
    with worker.grpc() as client:
        rpc = client.health()
    assert health["issuer_key_id"] == rpc.issuer_key_id
    assert health["issuer_public_key"] == rpc.issuer_public_key.hex()
    assert health["reward_contract_digest"] == worker.digest
    assert health["oracle_tier"] == 2
    assert health["oracle_channel"] == "db"
    assert health["certificate_state"] == "current"
    assert health["certificate_id"] == rpc.certificate_id


def grpc_health(worker: HttpWorker) -> int:
    """What the worker's grpc.health.v1 says for the whole server, over real gRPC."""
    with grpc.insecure_channel(worker.target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
    status: int = answer.status
    return status


def test_health_reports_the_serving_state_grpc_health_reports(
    worker: HttpWorker, anon: httpx.Client
) -> None:
    """A store watch that finds the store down turns both faces' health NOT_SERVING (HTTP 503),
    even between its probes when a read of the store would still succeed; and both SERVING
    again once it answers."""
    store_down = True

    def probe() -> None:
        if store_down:
            raise Unavailable("the store does not answer")

    watch = HealthWatch({"store": probe}, worker.app.running, interval=3600)
    try:
        assert worker.run(watch.check()) is False
        assert grpc_health(worker) == health_pb2.HealthCheckResponse.NOT_SERVING
        document = refused(anon.get("/health"), 503, "unavailable")
        assert "NOT_SERVING" in document["detail"]
        store_down = False
        assert worker.run(watch.check()) is True
        assert grpc_health(worker) == health_pb2.HealthCheckResponse.SERVING
        assert anon.get("/health").status_code == 200
    finally:
        worker.run(worker.app.running.set_serving(True))


# --- POST /v1/rewards and GET /v1/rewards/{id} ---


def test_verified_episode_begun_over_grpc_scored_over_http_is_one_receipt(
    worker: HttpWorker, http: httpx.Client
) -> None:
    with worker.grpc() as client:
        client.begin("episode.http.0001", worker.digest, {"patient_id": "patient-http-0001"})
        write_triage(worker.database, "patient-http-0001")
        answer = http.post("/v1/rewards", json=body(worker, "episode.http.0001"))
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert "schema_version" not in document  # clients of the widely used shape key on it
        view = document["receipt"]
        assert view["reward_outcome"] == "verified"
        assert view["scalar_reward"] == 1.0
        assert view["certified"] is True
        opened = open_receipt(envelope_of(document), worker.trust)  # exact bytes, pinned key
        assert_view_equals(view, opened.receipt)
        assert document["certification_refusals"] == list(opened.receipt.certification_refusals)
        assert document["rewardseal"] == {
            "certified": True,
            "calibration_scope": "synthetic",
            "certificate_state": "current",
            "outcome": "verified",
            "findings": [],
            "task_parameters_digest": "",
        }
        stored = client.get_receipt(episode_id="episode.http.0001")
        assert stored.receipt == opened.receipt  # the gRPC face holds this very receipt
        with pytest.raises(DuplicateEpisode) as again:
            client.score(descriptor(worker.digest, "episode.http.0001"))
    assert again.value.metadata["receipt_id"] == view["receipt_id"]


def test_episode_begun_over_http_scored_over_grpc_is_one_receipt(
    worker: HttpWorker, http: httpx.Client
) -> None:
    begin(http, worker, "episode.http.0002", "patient-http-0002")
    write_triage(worker.database, "patient-http-0002")
    with worker.grpc() as client:
        got = client.score(descriptor(worker.digest, "episode.http.0002"))
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    duplicate = refused(
        http.post("/v1/rewards", json=body(worker, "episode.http.0002")), 409, "duplicate_episode"
    )
    assert duplicate["receipt_id"] == got.receipt.receipt_id
    fetched = http.get(f"/v1/rewards/{got.receipt.receipt_id}")
    assert fetched.status_code == 200
    assert_view_equals(fetched.json()["receipt"], got.receipt)
    assert envelope_of(fetched.json()).payload == got.envelope.payload


def test_unscored_episode_is_null_never_zero(worker: HttpWorker, http: httpx.Client) -> None:
    # No begin: no baseline for a count-new effect, so the judge cannot tell (R-W-4 rule 3).
    write_triage(worker.database, "patient-http-0003")
    answer = http.post(
        "/v1/rewards",
        json=body(
            worker,
            "episode.http.0003",
            metadata={"oracle_identity": {"patient_id": "patient-http-0003"}},
        ),
    )
    assert answer.status_code == 200, answer.text
    view = answer.json()["receipt"]
    assert view["reward_outcome"] == "reconciliation_required"
    assert view["scalar_reward"] is None
    assert view["reward_components"] == {}
    assert view["uncertainty"] == "effect_uncertain"
    assert answer.json()["envelope"]["unscored"] is True
    assert '"scalar_reward":null' in answer.text


def test_wrong_effect_pays_the_contracts_value(worker: HttpWorker, http: httpx.Client) -> None:
    begin(http, worker, "episode.http.0004", "patient-http-0004")
    # The banner lie: nothing written, the runtime says completed.
    answer = http.post("/v1/rewards", json=body(worker, "episode.http.0004"))
    view = answer.json()["receipt"]
    assert view["reward_outcome"] == "wrong_effect"
    assert view["scalar_reward"] == 0.0  # the seeded contract's wrong_effect_reward
    assert isinstance(view["scalar_reward"], float)


@pytest.mark.parametrize(
    "fields",
    [
        {"metadata": {"runtime_signal": "halted_before_effect"}},
        {"runtime_signal": "halted_before_effect"},
        {"metadata": {"runtime_signal": "RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT"}},
    ],
    ids=["metadata", "field", "enum-name"],
)
def test_halted_episode_is_not_judged_completed(
    worker: HttpWorker, http: httpx.Client, fields: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    episode = f"episode.http.halt.{request.node.callspec.id}"
    begin(http, worker, episode, f"patient-halt-{request.node.callspec.id}")
    answer = http.post("/v1/rewards", json=body(worker, episode, **fields))
    view = answer.json()["receipt"]
    assert view["reward_outcome"] == "halted_before_effect"  # not wrong_effect: it stopped
    assert view["scalar_reward"] == 0.0


def test_runtime_signal_refusals_name_the_field(worker: HttpWorker, http: httpx.Client) -> None:
    unknown = refused(
        http.post(
            "/v1/rewards",
            json=body(worker, "episode.http.0005", metadata={"runtime_signal": "exploded"}),
        ),
        422,
        "invalid_episode",
    )
    assert "metadata.runtime_signal" in unknown["detail"]
    both = refused(
        http.post(
            "/v1/rewards",
            json=body(
                worker,
                "episode.http.0005",
                runtime_signal="completed",
                metadata={"runtime_signal": "refused"},
            ),
        ),
        422,
        "invalid_episode",
    )
    assert "runtime_signal" in both["detail"]


def test_get_receipt_unknown_and_malformed(http: httpx.Client) -> None:
    refused(http.get("/v1/rewards/rcpt.00000000000000000000000000000000"), 404, "not_found")
    bad = refused(http.get("/v1/rewards/..bad"), 422, "invalid_argument")
    assert "receipt_id" in bad["detail"]


# --- POST /v1/episodes ---


def test_begin_refuses_a_busy_identity_and_bad_ids(worker: HttpWorker, http: httpx.Client) -> None:
    begin(http, worker, "episode.http.0006", "patient-http-0006")
    busy = {
        "episode_id": "episode.http.0007",
        "reward_contract_digest": worker.digest,
        "oracle_identity": {"patient_id": "patient-http-0006"},
    }
    refused(http.post("/v1/episodes", json=busy), 422, "identity_busy")
    bad = refused(
        http.post("/v1/episodes", json={**busy, "episode_id": "x"}), 422, "invalid_episode"
    )
    assert "episode_id" in bad["detail"]


# --- POST /v1/graders/openai ---


def test_grader_pays_verified_and_refuses_unscored(worker: HttpWorker, http: httpx.Client) -> None:
    begin(http, worker, "episode.http.0008", "patient-http-0008")
    write_triage(worker.database, "patient-http-0008")
    graded = http.post(
        "/v1/graders/openai", json={"sample": {}, "item": body(worker, "episode.http.0008")}
    )
    assert graded.status_code == 200, graded.text
    assert graded.json()["score"] == 1.0
    assert graded.json()["receipt"]["reward_outcome"] == "verified"
    item = body(worker, "episode.http.0009", oracle_identity={"patient_id": "patient-http-0009"})
    unscored = refused(
        http.post("/v1/graders/openai", json={"sample": {}, "item": item}), 422, "unscored"
    )
    assert unscored["reward_outcome"] == "REWARD_OUTCOME_RECONCILIATION_REQUIRED"
    # The dry run stored nothing: the episode id is not burned.
    assert http.post("/v1/rewards", json=item).json()["receipt"]["scalar_reward"] is None


# --- Bad input and auth ---


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/episodes"),
        ("POST", "/v1/rewards"),
        ("GET", "/v1/rewards/rcpt.00000000000000000000000000000000"),
        ("POST", "/v1/graders/openai"),
    ],
)
@pytest.mark.parametrize("token", [None, "wrong-token-wrong-token"])
def test_every_route_but_health_needs_the_token(
    anon: httpx.Client, method: str, path: str, token: str | None
) -> None:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    answer = anon.request(method, path, headers=headers, json={})
    refused(answer, 401, "unauthenticated")
    assert answer.headers["www-authenticate"] == "Bearer"


def test_body_that_is_not_json_is_400(worker: HttpWorker, http: httpx.Client) -> None:
    headers = {"content-type": "application/json"}
    refused(http.post("/v1/rewards", content=b"{not json", headers=headers), 400, "invalid_json")
    refused(http.post("/v1/rewards", content=b"", headers=headers), 400, "invalid_json")
    refused(http.post("/v1/rewards", content=b"\xff\xfe{}", headers=headers), 400, "invalid_json")
    # Nested past the bound, a body is refused before any parser sees it: 422 invalid_episode
    # like any too-deep metadata (R-MSG-9; tests/worker/test_deep_metadata.py), not a parse error.
    deep = b"[" * 100_000 + b"]" * 100_000
    refused(http.post("/v1/rewards", content=deep, headers=headers), 422, "invalid_episode")


def test_wrong_content_type_is_415(worker: HttpWorker, http: httpx.Client) -> None:
    text = json.dumps(body(worker, "episode.http.0010"))
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {} if content_type is None else {"content-type": content_type}
        answer = http.post("/v1/rewards", content=text, headers=headers)
        refused(answer, 415, "unsupported_media_type")


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_ten_megabyte_body_is_413_and_the_server_stays_up(
    anon: httpx.Client, http: httpx.Client, chunked: bool
) -> None:
    huge = b'{"episode_id": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    content: Any = huge
    if chunked:

        def pieces() -> Iterator[bytes]:
            for start in range(0, len(huge), 1 << 20):
                yield huge[start : start + (1 << 20)]

        content = pieces()
    answer = http.post("/v1/rewards", content=content, headers={"content-type": "application/json"})
    refused(answer, 413, "body_too_large")
    assert str(MAX_BODY_BYTES) in answer.json()["detail"]
    assert anon.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"policy_update": "7"}, "policy_update"),
        ({"policy_update": 1.5}, "policy_update"),
        ({"episode_id": 12345678}, "episode_id"),
        ({"metadata": ["not", "a", "map"]}, "metadata"),
        ({"oracle_identity": {"patient_id": 7}}, "oracle_identity.patient_id"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_wrong_shape_is_422_naming_the_field(
    worker: HttpWorker, http: httpx.Client, change: dict[str, Any], field: str
) -> None:
    document = refused(
        http.post("/v1/rewards", json={**body(worker, "episode.http.0011"), **change}),
        422,
        "invalid_episode",
    )
    assert document["field"] == field
    assert document["detail"].startswith(field)


def test_missing_field_is_422_naming_it(worker: HttpWorker, http: httpx.Client) -> None:
    partial = body(worker, "episode.http.0011")
    del partial["policy_checkpoint_id"]
    document = refused(http.post("/v1/rewards", json=partial), 422, "invalid_episode")
    assert document["field"] == "policy_checkpoint_id"


@pytest.mark.parametrize(
    ("route", "misspelled", "meant"),
    [
        ("/v1/rewards", "policy_chekpoint_id", "policy_checkpoint_id"),
        ("/v1/episodes", "oracle_identty", "oracle_identity"),
    ],
)
def test_a_misspelled_field_is_422_naming_the_unknown_field(
    worker: HttpWorker, http: httpx.Client, route: str, misspelled: str, meant: str
) -> None:
    """R-H-25: the caller's mistake is the unknown name, not the real one it left "missing"."""
    if route == "/v1/rewards":
        sent = body(worker, "episode.http.0012")
    else:
        sent = {
            "episode_id": "episode.http.0012",
            "reward_contract_digest": worker.digest,
            "oracle_identity": {"patient_id": "patient-http-0012"},
        }
    sent[misspelled] = sent.pop(meant)
    document = refused(http.post(route, json=sent), 422, "invalid_episode")
    assert document["field"] == misspelled
    assert document["detail"] == f"{misspelled}: unknown field (did you mean {meant}?)"


def test_json_that_is_not_an_object_is_422(http: httpx.Client) -> None:
    refused(http.post("/v1/rewards", json=[1, 2]), 422, "invalid_episode")


@pytest.mark.parametrize(
    ("change", "reason", "named"),
    [
        ({"episode_id": "bad id!"}, "invalid_episode", "episode_id"),
        ({"policy_checkpoint_id": "short"}, "invalid_episode", "policy_checkpoint_id"),
        ({"reward_contract_digest": "sha256:" + "0" * 64}, "contract_mismatch", "contract"),
        ({"task_id": "task.someone.else"}, "contract_mismatch", "task"),
        ({}, "identity_missing", "identity"),
        ({"oracle_identity": {"pid": "patient-x-0001"}}, "identity_mismatch", "identity"),
        ({"metadata": {"prompt": "secret"}}, "invalid_episode", "metadata.prompt"),
        ({"policy_update": 2**70}, "invalid_episode", "policy_update"),
    ],
)
def test_every_other_refusal_is_422_with_its_reason(
    worker: HttpWorker, http: httpx.Client, change: dict[str, Any], reason: str, named: str
) -> None:
    document = refused(
        http.post("/v1/rewards", json={**body(worker, "episode.http.0012"), **change}), 422, reason
    )
    assert named in document["detail"]


def test_identity_conflict_is_422(worker: HttpWorker, http: httpx.Client) -> None:
    begin(http, worker, "episode.http.0013", "patient-http-0013")
    conflict = body(
        worker,
        "episode.http.0013",
        metadata={"oracle_identity": {"patient_id": "patient-other-01"}},
    )
    refused(http.post("/v1/rewards", json=conflict), 422, "identity_conflict")


def test_unknown_route_and_method_answer_json(http: httpx.Client) -> None:
    refused(http.get("/v1/nothing-here"), 404, "not_found")
    refused(
        http.delete("/v1/rewards/rcpt.00000000000000000000000000000000"), 405, "method_not_allowed"
    )


# --- OpenAPI ---


def test_openapi_document_is_served_and_checked_in(anon: httpx.Client) -> None:
    served = anon.get("/openapi.json").json()
    paths = set(served["paths"])
    assert paths == {
        "/v1/episodes",
        "/v1/rewards",
        "/v1/rewards/{receipt_id}",
        "/v1/graders/openai",
        "/health",
    }
    checked_in = json.loads(OPENAPI_FILE.read_text())
    assert served == checked_in, (
        "docs/openapi.json drifted from the served document: regenerate it with "
        "`python tools/openapi.py`"
    )


# --- The view's rules (R-H-2) and the status map, without a server ---


def _receipt(**fields: Any) -> RewardEvidenceReceipt:
    receipt = RewardEvidenceReceipt(
        receipt_id="rcpt.0123456789abcdef",
        reward_outcome=RewardOutcome.REWARD_OUTCOME_VERIFIED,
        certificate_state=CertificateState.CERTIFICATE_STATE_CURRENT,
        calibration_scope=CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
        uncertainty=Uncertainty.UNCERTAINTY_NONE,
        certified=True,
        scalar_reward=1.0,
        issuer_key_id="ed25519:sha256:" + "ab" * 32,
    )
    for name, value in fields.items():
        setattr(receipt, name, value)
    return receipt


def test_production_scope_is_never_reported_certified() -> None:
    production = _receipt(calibration_scope=CalibrationScope.CALIBRATION_SCOPE_PRODUCTION)
    document = reward_view(production, SignedEnvelope())
    assert document["receipt"]["certified"] is False
    assert document["receipt"]["calibration_scope"] == "production"
    assert WITHHELD_PRODUCTION in document["certification_refusals"]
    # rewardseal's own view beside it states the certification as signed (R-H-24).
    assert document["rewardseal"]["certified"] is True
    assert document["rewardseal"]["calibration_scope"] == "production"
    synthetic = reward_view(_receipt(), SignedEnvelope())
    assert synthetic["receipt"]["certified"] is True
    assert synthetic["rewardseal"]["certified"] is True
    assert synthetic["certification_refusals"] == []


def test_revoked_is_never_reported_certified() -> None:
    revoked = _receipt(certificate_state=CertificateState.CERTIFICATE_STATE_REVOKED)
    document = reward_view(revoked, SignedEnvelope())
    view = document["receipt"]
    assert view["certified"] is False
    assert view["certificate_state"] == "revoked"
    assert document["rewardseal"]["certificate_state"] == "revoked"


def test_unavailable_is_503() -> None:
    answer = error_response(Unavailable("the store is down"))
    assert answer.status_code == 503
    assert json.loads(bytes(answer.body)) == {"error": "unavailable", "detail": "the store is down"}


def test_http_port_settings(tmp_path: Path) -> None:
    env = {"REWARDSEAL_WORKER_HTTP_PORT": "8795"}
    assert resolve_settings(data_dir=tmp_path, env={}).http_port is None
    assert resolve_settings(data_dir=tmp_path, env=env).http_port == 8795
    assert resolve_settings(data_dir=tmp_path, http_port=0, env=env).http_port == 0
    with pytest.raises(ValidationError, match="REWARDSEAL_WORKER_HTTP_PORT"):
        resolve_settings(data_dir=tmp_path, env={"REWARDSEAL_WORKER_HTTP_PORT": "http"})
    # Every process of --processes N serves it (tests/reliability/test_http_processes.py).
    assert resolve_settings(data_dir=tmp_path, http_port=0, processes=2, env={}).http_port == 0


# --- Last: raises the shared ledger ---


def test_policy_update_regressed_is_422(worker: HttpWorker, http: httpx.Client) -> None:
    begin(http, worker, "episode.http.0014", "patient-http-0014")
    assert (
        http.post(
            "/v1/rewards", json=body(worker, "episode.http.0014", policy_update=3)
        ).status_code
        == 200
    )
    refused(
        http.post(
            "/v1/rewards",
            json=body(
                worker,
                "episode.http.0015",
                policy_update=0,  # below 3 less the default lag of 2
                oracle_identity={"patient_id": "patient-http-0015"},
            ),
        ),
        422,
        "policy_update_regressed",
    )
