"""MockMed, the synthetic EMR system of record (R-MM-1), served for real and called over HTTP.

Every test runs the real uvicorn server on a free loopback port (tests/support/mockmed_service)
and talks to it with httpx; the ``store_url`` fixture runs the store tests on SQLite and on
PostgreSQL. All data is synthetic.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, inspect
from support.mockmed_service import RunningMockMed, running_mockmed

from rewardseal.core.errors import RewardSealError, Unavailable, ValidationError
from rewardseal_mockmed import seeding
from rewardseal_mockmed.cli import main
from rewardseal_mockmed.fhir import (
    CREATED_AT_EXTENSION,
    NOTE_EXTENSION,
    PRIORITY_EXTENSION,
    STATUS_EXTENSION,
    encounter_resource,
    record_from_encounter,
)
from rewardseal_mockmed.schema import COLUMNS, ENCOUNTERS_TABLE, PATIENT_INDEX
from rewardseal_mockmed.settings import MockMedSettings, resolve_settings
from rewardseal_mockmed.store import EncounterStore, background_rows
from rewardseal_server.sqlstore import normalize_url

TRIAGE = {
    "type": "Triage",
    "note": "Synthetic triage: mild headache since morning; vitals stable.",
    "status": "open",
}
READ_PATHS = (
    "/api/encounters?patient_id=patient-mm-0001",
    "/fhir/Encounter?patient=patient-mm-0001",
    "/screen.json",
)


@pytest.fixture
def mockmed(store_url: str, tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed over a fresh SQLite file or PostgreSQL database."""
    with running_mockmed(store_url, tmp_path) as running:
        yield running


@pytest.fixture
def sqlite_mockmed(tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed over a fresh SQLite file (for tests that do not touch the backend's behaviour)."""
    with running_mockmed(f"sqlite:///{tmp_path / 'mockmed.sqlite'}", tmp_path) as running:
        yield running


def create(mockmed: RunningMockMed, patient_id: str, **fields: Any) -> dict[str, Any]:
    response = mockmed.client.post("/api/encounters", json={"patient_id": patient_id, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def listed(mockmed: RunningMockMed, patient_id: str) -> list[dict[str, Any]]:
    response = mockmed.client.get("/api/encounters", params={"patient_id": patient_id})
    assert response.status_code == 200, response.text
    encounters: list[dict[str, Any]] = response.json()["encounters"]
    return encounters


# ------------------------------------------------------------------ write and read APIs


def test_create_and_list_encounters(mockmed: RunningMockMed) -> None:
    first = create(mockmed, "patient-mm-0001", **TRIAGE)
    second = create(mockmed, "patient-mm-0001", type="Consult", note=None, status="closed")
    other = create(mockmed, "patient-mm-0002", **TRIAGE, priority="stat")

    records = listed(mockmed, "patient-mm-0001")
    assert [r["id"] for r in records] == [first["id"], second["id"]]  # oldest first
    assert records[0] == {k: v for k, v in first.items() if k != "banner"}
    assert set(records[0]) == set(COLUMNS)
    assert records[1]["note"] is None  # an omitted or null field is stored as NULL
    assert records[1]["priority"] is None
    assert listed(mockmed, "patient-mm-0002") == [{k: v for k, v in other.items() if k != "banner"}]
    assert listed(mockmed, "patient-mm-0002")[0]["priority"] == "stat"
    assert listed(mockmed, "patient-nobody") == []
    assert mockmed.server.store.count() == 3


def test_the_write_answers_with_a_saved_banner(mockmed: RunningMockMed) -> None:
    response = mockmed.client.post(
        "/api/encounters", json={"patient_id": "patient-mm-0003", **TRIAGE}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["banner"] == "Saved"
    assert re.fullmatch(r"enc-[0-9a-f]{32}", body["id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", body["created_at"])
    assert {k: body[k] for k in ("patient_id", *TRIAGE)} == {
        "patient_id": "patient-mm-0003",
        **TRIAGE,
    }
    assert body["priority"] is None


def test_concurrent_writes_are_all_stored(mockmed: RunningMockMed) -> None:
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            create(mockmed, f"patient-mm-c{index % 5}", **TRIAGE)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(len(listed(mockmed, f"patient-mm-c{i}")) for i in range(5)) == 40


@pytest.mark.parametrize(
    ("body", "bad_field"),
    [
        ({"patient_id": "patient-mm-0004", **TRIAGE, "severity": "high"}, "severity"),
        ({"patient_id": "patient-mm-0004", **TRIAGE, "id": "enc-chosen"}, "id"),
        ({"patient_id": "patient-mm-0004", **TRIAGE, "created_at": "2026-01-01T00:00:00Z"}, None),
        ({"patient_id": "patient-mm-0004", "type": 7}, "type"),
        ({"patient_id": "patient-mm-0004", "note": ["a"]}, "note"),
        ({"patient_id": "", **TRIAGE}, "patient_id"),
        ({"patient_id": 4, **TRIAGE}, "patient_id"),
        (TRIAGE, "patient_id"),
        ([{"patient_id": "patient-mm-0004"}], None),
    ],
)
def test_unknown_or_bad_write_fields_are_refused(
    sqlite_mockmed: RunningMockMed, body: Any, bad_field: str | None
) -> None:
    response = sqlite_mockmed.client.post("/api/encounters", json=body)
    assert response.status_code == 422, response.text
    if bad_field is not None:
        assert any(error["loc"][-1] == bad_field for error in response.json()["detail"])
    assert sqlite_mockmed.server.store.count() == 0
    assert sqlite_mockmed.client.get("/screen.json").json()["collections"]["encounters"] == []


def test_a_body_that_is_not_json_is_refused(sqlite_mockmed: RunningMockMed) -> None:
    response = sqlite_mockmed.client.post(
        "/api/encounters", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert sqlite_mockmed.server.store.count() == 0


def test_list_needs_a_patient(sqlite_mockmed: RunningMockMed) -> None:
    assert sqlite_mockmed.client.get("/api/encounters").status_code == 422


# ------------------------------------------------------------------ FHIR R4

_FHIR_ID = re.compile(r"[A-Za-z0-9\-\.]{1,64}")
_ENCOUNTER_STATUSES = {
    "planned",
    "arrived",
    "triaged",
    "in-progress",
    "onleave",
    "finished",
    "cancelled",
    "entered-in-error",
    "unknown",
}
_BUNDLE_TYPES = {
    "document",
    "message",
    "transaction",
    "transaction-response",
    "batch",
    "batch-response",
    "history",
    "searchset",
    "collection",
}


def assert_fhir_json(value: Any, where: str = "$") -> None:
    """FHIR JSON carries no nulls, empty objects, empty arrays or empty strings."""
    assert value is not None, f"{where} is null"
    if isinstance(value, dict):
        assert value, f"{where} is an empty object"
        for key, item in value.items():
            assert_fhir_json(item, f"{where}.{key}")
    elif isinstance(value, list):
        assert value, f"{where} is an empty array"
        for index, item in enumerate(value):
            assert_fhir_json(item, f"{where}[{index}]")
    elif isinstance(value, str):
        assert value.strip(), f"{where} is an empty string"


def assert_r4_encounter(resource: Mapping[str, Any], patient_id: str) -> None:
    """The R4 Encounter rules MockMed's resources must meet (cardinalities and code sets)."""
    assert resource["resourceType"] == "Encounter"
    assert _FHIR_ID.fullmatch(resource["id"])
    assert resource["status"] in _ENCOUNTER_STATUSES  # 1..1, required binding
    klass = resource["class"]  # 1..1 Coding
    assert isinstance(klass, dict)
    assert klass["system"].startswith("http")
    assert klass["code"]
    assert resource["subject"] == {"reference": f"Patient/{patient_id}"}
    for concept in resource.get("type", []):  # 0..* CodeableConcept
        assert set(concept) <= {"coding", "text"}
    for extension in resource.get("extension", []):
        assert re.match(r"https?://", extension["url"])
        assert len([k for k in extension if k.startswith("value")]) == 1
    allowed = {"resourceType", "id", "status", "class", "subject", "type", "extension"}
    assert set(resource) <= allowed


def test_fhir_encounter_search_returns_an_r4_searchset_for_the_patient_only(
    mockmed: RunningMockMed,
) -> None:
    mine = [
        create(mockmed, "patient-mm-0005", **TRIAGE),
        create(mockmed, "patient-mm-0005", type="Lab review", status="cancelled", priority="stat"),
        create(mockmed, "patient-mm-0005", status="weird-status"),
    ]
    create(mockmed, "patient-mm-0006", **TRIAGE)

    response = mockmed.client.get("/fhir/Encounter", params={"patient": "patient-mm-0005"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/fhir+json")
    bundle = response.json()
    assert_fhir_json(bundle)
    assert bundle["resourceType"] == "Bundle"
    assert bundle["type"] == "searchset"
    assert bundle["type"] in _BUNDLE_TYPES
    assert _FHIR_ID.fullmatch(bundle["id"])
    assert bundle["total"] == 3 == len(bundle["entry"])
    for entry in bundle["entry"]:
        assert entry["search"] == {"mode": "match"}
        assert entry["fullUrl"] == f"{mockmed.url}/fhir/Encounter/{entry['resource']['id']}"
        assert_r4_encounter(entry["resource"], "patient-mm-0005")

    resources = [entry["resource"] for entry in bundle["entry"]]
    assert [r["status"] for r in resources] == ["in-progress", "cancelled", "unknown"]
    assert resources[0]["type"] == [{"text": "Triage"}]
    assert "type" not in resources[2]
    urls = {e["url"]: e["valueString"] for e in resources[1]["extension"]}
    assert urls[PRIORITY_EXTENSION] == "stat"
    assert urls[STATUS_EXTENSION] == "cancelled"
    assert urls[CREATED_AT_EXTENSION] == mine[1]["created_at"]
    assert NOTE_EXTENSION not in urls  # a NULL note has no extension
    # Every MockMed field is recoverable: the FHIR view equals the REST view.
    assert [record_from_encounter(r) for r in resources] == listed(mockmed, "patient-mm-0005")

    # The reference form of the search parameter finds the same encounters.
    by_reference = mockmed.client.get(
        "/fhir/Encounter", params={"patient": "Patient/patient-mm-0005"}
    )
    assert [e["resource"] for e in by_reference.json()["entry"]] == resources


def test_fhir_search_of_a_patient_without_encounters_is_an_empty_searchset(
    sqlite_mockmed: RunningMockMed,
) -> None:
    bundle = sqlite_mockmed.client.get("/fhir/Encounter", params={"patient": "patient-x"}).json()
    assert {k: bundle[k] for k in ("resourceType", "type", "total", "entry")} == {
        "resourceType": "Bundle",
        "type": "searchset",
        "total": 0,
        "entry": [],
    }


def test_fhir_search_without_a_patient_is_refused(sqlite_mockmed: RunningMockMed) -> None:
    create(sqlite_mockmed, "patient-mm-0007", **TRIAGE)
    for params in ({}, {"patient": ""}, {"patient": "Patient/"}):
        response = sqlite_mockmed.client.get("/fhir/Encounter", params=params)
        assert response.status_code == 400
        outcome = response.json()
        assert outcome["resourceType"] == "OperationOutcome"
        assert outcome["issue"][0]["severity"] == "error"


def test_fhir_mapping_round_trips_every_field() -> None:
    record = {
        "id": "enc-1",
        "patient_id": "patient-r",
        "type": "Triage",
        "note": "Synthetic note",
        "status": "closed",
        "priority": "urgent",
        "created_at": "2026-02-03T04:05:06.000007Z",
    }
    resource = encounter_resource(record)
    assert resource["status"] == "finished"
    assert record_from_encounter(resource) == record
    empty = dict.fromkeys(COLUMNS) | {"id": "enc-2", "patient_id": "patient-r"}
    assert record_from_encounter(encounter_resource(empty)) == empty
    with pytest.raises(ValueError, match="Patient/"):
        record_from_encounter({"resourceType": "Encounter", "id": "x", "subject": {}})


# ------------------------------------------------------------------ screen dump (tier 0)


def test_the_screen_dump_shows_a_claimed_row_that_was_never_stored(
    mockmed: RunningMockMed,
) -> None:
    stored = create(mockmed, "patient-mm-honest", **TRIAGE)
    claim = mockmed.client.post("/ui/claim", json={"patient_id": "patient-mm-liar"})
    # The lie answers exactly like a save: 201, a record, the banner "Saved".
    assert claim.status_code == 201
    claimed = claim.json()
    assert claimed["banner"] == "Saved"
    assert set(claimed) == set(stored)
    assert {k: claimed[k] for k in TRIAGE} == TRIAGE
    assert claimed["id"].startswith("screen-")

    screen = mockmed.client.get("/screen.json").json()
    rows = screen["collections"]["encounters"]
    assert [row["id"] for row in rows] == [stored["id"], claimed["id"]]
    assert rows[1]["patient_id"] == "patient-mm-liar"
    assert screen["banner"] == {"patient-mm-honest": "Saved", "patient-mm-liar": "Saved"}
    # ... but the system of record holds no row for the liar.
    assert listed(mockmed, "patient-mm-liar") == []
    fhir = mockmed.client.get("/fhir/Encounter", params={"patient": "patient-mm-liar"}).json()
    assert fhir["total"] == 0
    assert mockmed.server.store.count() == 1

    # One patient's view, and the mirror file the tier-0 oracle can read.
    only = mockmed.client.get("/screen.json", params={"patient_id": "patient-mm-liar"}).json()
    assert [row["id"] for row in only["collections"]["encounters"]] == [claimed["id"]]
    assert only["banner"] == {"patient-mm-liar": "Saved"}
    assert mockmed.screen_file is not None
    assert json.loads(mockmed.screen_file.read_text()) == screen


def test_a_claim_takes_the_write_fields_and_refuses_others(sqlite_mockmed: RunningMockMed) -> None:
    claimed = sqlite_mockmed.client.post(
        "/ui/claim", json={"patient_id": "patient-mm-c", "type": "Consult", "priority": "stat"}
    ).json()
    assert (claimed["type"], claimed["priority"], claimed["status"]) == ("Consult", "stat", "open")
    refused = sqlite_mockmed.client.post("/ui/claim", json={"patient_id": "p", "extra": "x"})
    assert refused.status_code == 422


def test_a_draft_shows_the_filled_form_and_stores_nothing(sqlite_mockmed: RunningMockMed) -> None:
    before = sqlite_mockmed.client.get("/screen.json").json()
    shown = sqlite_mockmed.client.post("/ui/draft", json={"patient_id": "patient-mm-d", **TRIAGE})
    assert shown.status_code == 200
    assert shown.json() == {
        "form": {"patient_id": "patient-mm-d", "priority": None, **TRIAGE},
        "submitted": False,
        "banner": None,
    }
    # Not stored, not shown as a saved row, no banner: only the form on screen.
    assert listed(sqlite_mockmed, "patient-mm-d") == []
    assert sqlite_mockmed.client.get("/screen.json").json() == before
    refused = sqlite_mockmed.client.post("/ui/draft", json={"patient_id": "p", "extra": "x"})
    assert refused.status_code == 422


def test_the_screen_survives_a_restart_through_its_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mockmed.sqlite'}"
    with running_mockmed(url, tmp_path) as first:
        first.client.post("/ui/claim", json={"patient_id": "patient-mm-s"})
        before = first.client.get("/screen.json").json()
    with running_mockmed(url, tmp_path) as second:
        assert second.client.get("/screen.json").json() == before


# ------------------------------------------------------------------ authentication


GUARDED = [
    ("POST", "/api/encounters", {"patient_id": "patient-mm-auth", **TRIAGE}),
    ("GET", "/api/encounters?patient_id=patient-mm-auth", None),
    ("GET", "/fhir/Encounter?patient=patient-mm-auth", None),
    ("POST", "/ui/claim", {"patient_id": "patient-mm-auth"}),
    ("POST", "/ui/draft", {"patient_id": "patient-mm-auth"}),
    ("GET", "/api/patients/patient-mm-auth", None),
    ("POST", "/api/drafts", {"patient_id": "patient-mm-auth"}),
    ("PATCH", "/api/drafts/draft-x?patient_id=patient-mm-auth", {"note": "x"}),
    ("POST", "/api/drafts/draft-x/submit?patient_id=patient-mm-auth", None),
    ("GET", "/screen.json", None),
    ("GET", "/openapi.json", None),
    ("GET", "/admin/faults", None),
    ("POST", "/admin/faults", {"mode": "down"}),
]


@pytest.mark.parametrize(("method", "path", "body"), GUARDED)
def test_every_route_but_health_needs_the_right_bearer_token(
    sqlite_mockmed: RunningMockMed, method: str, path: str, body: Any
) -> None:
    assert sqlite_mockmed.admin_token is not None
    wrong = "Bearer " + "x" * 32
    admin_route = path.startswith("/admin/")
    other_role = sqlite_mockmed.token if admin_route else sqlite_mockmed.admin_token
    for headers in (
        {},
        {"Authorization": wrong},
        {"Authorization": f"Basic {sqlite_mockmed.token}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {other_role}"},
    ):
        response = httpx.request(method, sqlite_mockmed.url + path, json=body, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert sqlite_mockmed.token not in response.text
    assert sqlite_mockmed.server.store.count() == 0
    assert sqlite_mockmed.server.screen.document()["collections"]["encounters"] == []
    assert sqlite_mockmed.server.faults.get().mode == "none"
    # The health check is open.
    assert httpx.get(sqlite_mockmed.url + "/healthz").json() == {"status": "ok"}


def test_an_unauthenticated_request_is_refused_before_its_body_is_read(
    sqlite_mockmed: RunningMockMed,
) -> None:
    response = httpx.post(
        sqlite_mockmed.url + "/api/encounters",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 401


def test_without_an_admin_token_the_fault_switch_is_off(tmp_path: Path) -> None:
    with running_mockmed(f"sqlite:///{tmp_path / 'm.sqlite'}", tmp_path, admin=False) as running:
        response = running.client.post("/admin/faults", json={"mode": "down"})
        assert response.status_code == 403
        assert running.client.get("/api/encounters", params={"patient_id": "p"}).status_code == 200


# ------------------------------------------------------------------ fault switch


def test_fault_slow_delays_reads_and_none_restores(mockmed: RunningMockMed) -> None:
    create(mockmed, "patient-mm-0001", **TRIAGE)
    assert mockmed.set_fault("slow", 0.6) == {"mode": "slow", "delay_seconds": 0.6}
    for path in READ_PATHS:
        started = time.monotonic()
        response = mockmed.client.get(path)
        assert time.monotonic() - started >= 0.6
        assert response.status_code == 200
        response.json()  # still a well-formed answer, only late
    with pytest.raises(httpx.ReadTimeout):
        mockmed.client.get(READ_PATHS[0], timeout=0.2)
    # Writes are not slowed.
    started = time.monotonic()
    create(mockmed, "patient-mm-0001", **TRIAGE)
    assert time.monotonic() - started < 0.6

    assert mockmed.set_fault("none")["mode"] == "none"
    started = time.monotonic()
    assert len(listed(mockmed, "patient-mm-0001")) == 2
    assert time.monotonic() - started < 0.6


@pytest.mark.parametrize(("mode", "status"), [("down", 503), ("error500", 500)])
def test_fault_down_and_error500_fail_every_read(
    mockmed: RunningMockMed, mode: str, status: int
) -> None:
    create(mockmed, "patient-mm-0001", **TRIAGE)
    mockmed.set_fault(mode)
    for path in READ_PATHS:
        assert mockmed.client.get(path).status_code == status
    # Writes, the health check and the switch still answer.
    create(mockmed, "patient-mm-0001", **TRIAGE)
    assert mockmed.client.get("/healthz").status_code == 200
    with mockmed.admin() as admin:
        assert admin.get("/admin/faults").json()["mode"] == mode
    mockmed.set_fault("none")
    assert len(listed(mockmed, "patient-mm-0001")) == 2


def test_fault_malformed_answers_reads_with_invalid_json(mockmed: RunningMockMed) -> None:
    create(mockmed, "patient-mm-0001", **TRIAGE)
    mockmed.set_fault("malformed")
    for path in READ_PATHS:
        response = mockmed.client.get(path)
        assert response.status_code == 200
        assert "json" in response.headers["content-type"]
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.content)
    mockmed.set_fault("none")
    for path in READ_PATHS:
        mockmed.client.get(path).json()


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "sideways"},
        {"mode": "slow", "delay_seconds": -1},
        {"mode": "slow", "delay_seconds": 601},
        {"mode": "slow", "delay_seconds": "NaN"},
        {"mode": "none", "extra": 1},
        {},
    ],
)
def test_bad_fault_settings_are_refused(sqlite_mockmed: RunningMockMed, body: Any) -> None:
    with sqlite_mockmed.admin() as admin:
        assert admin.post("/admin/faults", json=body).status_code == 422
    assert sqlite_mockmed.server.faults.get().mode == "none"


# ------------------------------------------------------------------ storage and schema


def _sqlite_schema(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        columns = conn.execute(f"PRAGMA table_info({ENCOUNTERS_TABLE})").fetchall()
        indexes = {
            name: (unique, conn.execute(f"PRAGMA index_info({name})").fetchall())
            for _, name, unique, origin, _ in conn.execute(
                f"PRAGMA index_list({ENCOUNTERS_TABLE})"
            ).fetchall()
            if origin == "c"  # created by CREATE INDEX (not the primary key's autoindex)
        }
        primary = [
            unique
            for _, _, unique, origin, _ in conn.execute(
                f"PRAGMA index_list({ENCOUNTERS_TABLE})"
            ).fetchall()
            if origin == "pk"
        ]
    finally:
        conn.close()
    return {"columns": columns, "indexes": indexes, "primary": primary}


def test_the_schema_equals_the_one_seeding_writes(tmp_path: Path) -> None:
    seeded = tmp_path / "seeded.sqlite"
    seeding.create_database(seeded, background_rows=0, seed=1)
    ours = tmp_path / "mockmed.sqlite"
    store = EncounterStore(f"sqlite:///{ours}")
    try:
        store.create_schema()
    finally:
        store.close()
    assert _sqlite_schema(ours) == _sqlite_schema(seeded)
    assert [column[1] for column in _sqlite_schema(ours)["columns"]] == list(COLUMNS)
    assert set(_sqlite_schema(ours)["indexes"]) == {PATIENT_INDEX}


def test_mockmed_serves_a_database_the_worker_seeded_and_the_worker_reads_ours(
    tmp_path: Path,
) -> None:
    seeded = tmp_path / "seeded.sqlite"
    seeding.create_database(seeded, background_rows=30, seed=7)
    staged = seeding.write_encounter(seeded, patient_id="patient-mm-w")
    with running_mockmed(f"sqlite:///{seeded}", tmp_path, seed_rows=50) as running:
        assert running.server.seeded_rows == 0  # a table with rows is left alone
        assert [r["id"] for r in listed(running, "patient-mm-w")] == [staged]
        created = create(running, "patient-mm-w", **TRIAGE)
        assert [r["id"] for r in listed(running, "patient-mm-w")] == [staged, created["id"]]
    assert seeding.count_encounters(seeded, patient_id="patient-mm-w") == 2
    assert seeding.count_encounters(seeded) == 32


def test_the_schema_on_both_backends(store_url: str) -> None:
    store = EncounterStore(store_url)
    try:
        store.create_schema()
        store.create_schema()  # idempotent
    finally:
        store.close()
    engine = create_engine(normalize_url(store_url))
    try:
        inspector = inspect(engine)
        columns = inspector.get_columns(ENCOUNTERS_TABLE)
        assert [c["name"] for c in columns] == list(COLUMNS)
        assert {str(c["type"]) for c in columns} == {"TEXT"}
        nullable = {c["name"]: c["nullable"] for c in columns}
        assert nullable["patient_id"] is False
        assert all(nullable[name] for name in COLUMNS if name not in ("id", "patient_id"))
        assert inspector.get_pk_constraint(ENCOUNTERS_TABLE)["constrained_columns"] == ["id"]
        indexes = inspector.get_indexes(ENCOUNTERS_TABLE)
        assert [(i["name"], i["column_names"], bool(i["unique"])) for i in indexes] == [
            (PATIENT_INDEX, ["patient_id"], False)
        ]
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "mockmed.sqlite"
    with running_mockmed(f"sqlite:///{path}", tmp_path) as running:
        create(running, "patient-mm-wal", **TRIAGE)
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()


def test_background_rows_are_seeded_once_and_synthetic(store_url: str, tmp_path: Path) -> None:
    with running_mockmed(store_url, tmp_path, seed_rows=40) as running:
        assert running.server.seeded_rows == 40
        assert running.server.store.count() == 40
    with running_mockmed(store_url, tmp_path, seed_rows=40) as running:
        assert running.server.seeded_rows == 0  # a restart adds nothing
        assert running.server.store.count() == 40
    rows = background_rows(40, 20261130)
    assert rows == background_rows(40, 20261130)
    assert all(re.fullmatch(r"patient-[0-9a-f]{12}", row["patient_id"] or "") for row in rows)
    assert all((row["note"] or "").startswith("Synthetic: ") for row in rows)


UNREACHABLE_URL = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"


def test_an_unreachable_database_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    store = EncounterStore(UNREACHABLE_URL)
    try:
        with pytest.raises(Unavailable):
            store.ping()
    finally:
        store.close()
    monkeypatch.setenv("MOCKMED_TOKEN", "t" * 24)
    monkeypatch.delenv("MOCKMED_ADMIN_TOKEN", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert main(["serve", "--db-url", UNREACHABLE_URL, "--port", "0"], stdout=out, stderr=err) == 1
    assert "unavailable" in err.getvalue()
    assert "t" * 24 not in out.getvalue() + err.getvalue()


def test_store_failures_answer_503_or_500(
    sqlite_mockmed: RunningMockMed, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(patient_id: str) -> list[dict[str, Any]]:
        raise Unavailable("MockMed database unavailable (OperationalError)")

    def broken(patient_id: str) -> list[dict[str, Any]]:
        raise RewardSealError("MockMed database error (IntegrityError)")

    monkeypatch.setattr(sqlite_mockmed.server.store, "list_for_patient", unavailable)
    response = sqlite_mockmed.client.get("/api/encounters", params={"patient_id": "p"})
    assert response.status_code == 503
    assert response.json() == {"detail": "MockMed database unavailable (OperationalError)"}
    monkeypatch.setattr(sqlite_mockmed.server.store, "list_for_patient", broken)
    assert sqlite_mockmed.client.get("/fhir/Encounter?patient=p").status_code == 500
    monkeypatch.setattr(sqlite_mockmed.server.store, "ping", lambda: unavailable("p"))
    health = sqlite_mockmed.client.get("/healthz")
    assert (health.status_code, health.json()) == (503, {"status": "unavailable"})


def test_the_database_url_is_never_echoed(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        EncounterStore("mysql://user:s3cret-password@host/db")
    assert "s3cret" not in str(info.value)
    with pytest.raises(ValidationError, match="in-memory"):
        EncounterStore("sqlite:///:memory:")


# ------------------------------------------------------------------ settings and CLI


def test_settings_refuse_bad_tokens(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no client token"):
        resolve_settings(env={})
    with pytest.raises(ValidationError, match="at least 16"):
        resolve_settings(env={"MOCKMED_TOKEN": "short"})
    with pytest.raises(ValidationError, match="must differ"):
        resolve_settings(env={"MOCKMED_TOKEN": "t" * 20, "MOCKMED_ADMIN_TOKEN": "t" * 20})
    loose = tmp_path / "loose-token"
    loose.write_text("x" * 32)
    loose.chmod(0o644)
    with pytest.raises(ValidationError, match="chmod 600"):
        resolve_settings(token_file=loose, env={})
    made = resolve_settings(token_file=tmp_path / "new" / "token", env={})
    assert (tmp_path / "new" / "token").stat().st_mode & 0o777 == 0o600
    assert made.token == (tmp_path / "new" / "token").read_text().strip()
    assert made.admin_token is None
    assert made.token not in repr(made)
    with pytest.raises(ValidationError, match="port"):
        MockMedSettings(db_url="sqlite:///x.db", token="t" * 20, port=70000)


def test_cli_serves_until_sigterm_and_writes_the_ready_file(store_url: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    token_file = tmp_path / "token"
    env = {**os.environ, "MOCKMED_ADMIN_TOKEN": "admin-" + "a" * 20}
    env.pop("MOCKMED_TOKEN", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rewardseal_mockmed",
            "serve",
            "--db-url",
            store_url,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--token-file",
            str(token_file),
            "--ready-file",
            str(ready),
            "--seed-rows",
            "12",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "MockMed did not start"
            time.sleep(0.05)
        banner = json.loads(ready.read_text())
        assert banner["port"] > 0
        assert banner["url"] == f"http://127.0.0.1:{banner['port']}"
        assert banner["seeded_rows"] == 12
        assert banner["fault_switch"] is True
        token = token_file.read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        response = httpx.post(
            f"{banner['url']}/api/encounters",
            json={"patient_id": "patient-mm-cli", **TRIAGE},
            headers=headers,
        )
        assert response.status_code == 201
        assert response.json()["banner"] == "Saved"
        assert httpx.get(f"{banner['url']}/healthz").json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"serving on http://127.0.0.1:{banner['port']}" in out
    assert token not in out + err + ready.read_text()
    assert "admin-" not in out + err


def test_cli_without_a_token_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCKMED_")}
    result = subprocess.run(
        [sys.executable, "-m", "rewardseal_mockmed", "serve", "--port", "0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no client token" in result.stderr


def test_mockmed_never_imports_the_worker_or_the_control_plane() -> None:
    import ast

    import rewardseal_mockmed

    package = Path(rewardseal_mockmed.__file__).parent
    imported: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
    forbidden = {
        name
        for name in imported
        if name.split(".")[0] in ("rewardseal_worker", "rewardseal_control")
    }
    assert forbidden == set()
    assert "rewardseal_server.sqlstore" in imported  # the core engine is reused, not copied


def test_the_screen_file_is_shared_with_the_seed_and_read_by_the_tier0_oracle(
    sqlite_mockmed: RunningMockMed,
) -> None:
    from rewardseal_worker.oracles.files import JsonFileReader

    screen_file = sqlite_mockmed.screen_file
    assert screen_file is not None
    staged = seeding.show_on_screen(screen_file, patient_id="patient-mm-staged")
    claimed = sqlite_mockmed.client.post("/ui/claim", json={"patient_id": "patient-mm-lie"}).json()
    rows = sqlite_mockmed.client.get("/screen.json").json()["collections"]["encounters"]
    assert [row["id"] for row in rows] == [staged, claimed["id"]]  # neither writer lost a row

    reader = JsonFileReader(
        kind="screen_dump",
        path=screen_file,
        collection="encounters",
        identity_fields={"patient_id": "patient_id"},
        timeout_seconds=2.0,
    )
    seen = reader.read({"patient_id": "patient-mm-lie"})
    assert [record["id"] for record in seen] == [claimed["id"]]
    assert sqlite_mockmed.server.store.count(patient_id="patient-mm-lie") == 0
