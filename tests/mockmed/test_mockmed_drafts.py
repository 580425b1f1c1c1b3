"""MockMed's patient summary and encounter drafts (open, change, submit), over real HTTP.

A draft is never in the system of record until it is submitted; a draft is reachable only
with its own patient's id; submitting stores exactly one encounter with the banner "Saved".
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_service import RunningMockMed, running_mockmed

PATIENT = "patient-draft-0001"
OTHER = "patient-draft-0002"


@pytest.fixture
def mockmed(tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{tmp_path / 'mockmed.sqlite'}", tmp_path) as running:
        yield running


def open_draft(mockmed: RunningMockMed, patient_id: str = PATIENT, **fields: Any) -> str:
    response = mockmed.client.post("/api/drafts", json={"patient_id": patient_id, **fields})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["submitted"] is False
    assert body["banner"] is None
    draft_id: str = body["draft"]["id"]
    return draft_id


def stored(mockmed: RunningMockMed, patient_id: str = PATIENT) -> list[dict[str, Any]]:
    response = mockmed.client.get("/api/encounters", params={"patient_id": patient_id})
    rows: list[dict[str, Any]] = response.json()["encounters"]
    return rows


def test_patient_summary_counts_the_stored_encounters(mockmed: RunningMockMed) -> None:
    empty = mockmed.client.get(f"/api/patients/{PATIENT}").json()
    assert empty == {
        "patient_id": PATIENT,
        "encounter_count": 0,
        "open_encounter_count": 0,
        "last_encounter_at": None,
    }
    mockmed.client.post("/api/encounters", json={"patient_id": PATIENT, "status": "open"})
    last = mockmed.client.post(
        "/api/encounters", json={"patient_id": PATIENT, "status": "closed"}
    ).json()
    summary = mockmed.client.get(f"/api/patients/{PATIENT}").json()
    assert summary["encounter_count"] == 2
    assert summary["open_encounter_count"] == 1
    assert summary["last_encounter_at"] == last["created_at"]


def test_a_draft_stores_nothing_until_it_is_submitted(mockmed: RunningMockMed) -> None:
    draft_id = open_draft(mockmed, type="Triage", note="Synthetic: cough.")
    assert re.fullmatch(r"draft-[0-9a-f]{32}", draft_id)
    changed = mockmed.client.patch(
        f"/api/drafts/{draft_id}", params={"patient_id": PATIENT}, json={"status": "open"}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["draft"] == {
        "id": draft_id,
        "patient_id": PATIENT,
        "type": "Triage",
        "note": "Synthetic: cough.",
        "status": "open",
        "priority": None,
    }
    assert stored(mockmed) == []
    assert mockmed.client.get("/screen.json").json()["banner"] == {}

    submitted = mockmed.client.post(
        f"/api/drafts/{draft_id}/submit", params={"patient_id": PATIENT}
    )
    assert submitted.status_code == 201, submitted.text
    record = submitted.json()
    assert record["banner"] == "Saved"
    assert re.fullmatch(r"enc-[0-9a-f]{32}", record["id"])
    assert stored(mockmed) == [{k: v for k, v in record.items() if k != "banner"}]
    again = mockmed.client.post(f"/api/drafts/{draft_id}/submit", params={"patient_id": PATIENT})
    assert again.status_code == 404  # a submitted draft is gone: it stores once
    assert len(stored(mockmed)) == 1


def test_another_patients_draft_is_not_found(mockmed: RunningMockMed) -> None:
    draft_id = open_draft(mockmed, OTHER, type="Triage")
    changed = mockmed.client.patch(
        f"/api/drafts/{draft_id}", params={"patient_id": PATIENT}, json={"note": "x"}
    )
    assert changed.status_code == 404
    submit = mockmed.client.post(f"/api/drafts/{draft_id}/submit", params={"patient_id": PATIENT})
    assert submit.status_code == 404
    assert stored(mockmed, PATIENT) == []
    assert stored(mockmed, OTHER) == []
    # Its own patient still has it, unchanged.
    mine = mockmed.client.post(f"/api/drafts/{draft_id}/submit", params={"patient_id": OTHER})
    assert mine.status_code == 201
    assert mine.json()["note"] is None


@pytest.mark.parametrize(
    "body", [{"patient_id": "patient-x"}, {"id": "draft-x"}, {"type": 3}, {"severity": "high"}]
)
def test_a_draft_change_writes_only_its_fields(mockmed: RunningMockMed, body: Any) -> None:
    draft_id = open_draft(mockmed, type="Triage")
    changed = mockmed.client.patch(
        f"/api/drafts/{draft_id}", params={"patient_id": PATIENT}, json=body
    )
    assert changed.status_code == 422


def test_concurrent_submits_of_one_draft_store_it_once(mockmed: RunningMockMed) -> None:
    draft_id = open_draft(mockmed, type="Triage", note="n", status="open")
    codes: list[int] = []

    def submit() -> None:
        response = mockmed.client.post(
            f"/api/drafts/{draft_id}/submit", params={"patient_id": PATIENT}
        )
        codes.append(response.status_code)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [201] + [404] * 7
    assert len(stored(mockmed)) == 1
