"""FHIR calibration (R-CAL-8): a fhir bundle calibrated against a sandbox FHIR server.

The sandbox is a real MockMed (uvicorn on a free port) over its own SQLite database: each
trial's records are written as Encounters with the FHIR interactions (``POST``, ``PUT``,
``DELETE /fhir/Encounter``), or with ``--sandbox-store`` as rows where the server's writes land,
and read back through the server's FHIR search by the bundle's own fhir reader, so the server's
record -> Encounter mapping and the reader's inverse are in the measurement. The classification
is the sandbox one (R-CAL-7); the live FHIR server is never the sandbox (R-CAL-5).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support.mockmed_service import running_mockmed

from rewardseal.core.calibration import summary_from_json
from rewardseal.core.signing import SigningKey
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.calibration import self_signed_certificate
from rewardseal_worker.calibration.fhir_sandbox import FhirSandboxStore
from rewardseal_worker.calibration.runner import TrialNotWritable, TrialRejected
from rewardseal_worker.cli import main
from rewardseal_worker.oracles.http import encounter_from_record, records_from_bundle


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def encounters(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count: int = conn.execute("SELECT count(*) FROM encounters").fetchone()[0]
    return count


@pytest.mark.parametrize("write", ["fhir_interactions", "sandbox_store"])
def test_a_fhir_bundle_calibrates_against_a_sandbox_fhir_server_and_certifies(
    write: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = tmp_path / "triage"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "fhir")[0] == 0
    database = tmp_path / "fhir-sandbox.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path, admin=False) as sandbox:
        monkeypatch.setenv("SOR_FHIR_TOKEN", sandbox.token)
        store = ["--sandbox-store", f"sqlite:///{database}"] if write == "sandbox_store" else []

        # The live FHIR server, spelled otherwise, is refused before any write (R-CAL-5).
        monkeypatch.setenv("SOR_FHIR_URL", sandbox.url.replace("127.0.0.1", "localhost") + "/")
        code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", sandbox.url, *store)
        assert code == 2
        assert "own read target" in err
        assert encounters(database) == 0

        monkeypatch.setenv("SOR_FHIR_URL", "https://fhir.example.invalid")
        code, out, err = run(
            capsys,
            "calibrate",
            str(directory),
            "--sandbox",
            sandbox.url,
            *store,
            "--trials",
            "90",
            "--seed",
            "8",
            "--explain",
        )
        assert code == 0, err
    summary = summary_from_json(json.loads((directory / "calibration.json").read_text()))
    assert summary.false_accepts == 0
    assert summary.trials + summary.benign_trials + summary.rejected_trials == 90
    assert summary.trials > 0
    assert "accepted faults  none" in out
    assert "fault class" in out
    assert encounters(database) == 0  # every trial's Encounters deleted again
    # 0 in ~90 effective faults meets the starting policy (epsilon <= 0.05).
    certificate = self_signed_certificate(load_bundle(directory), summary, SigningKey.generate())
    assert certificate.epsilon <= 0.05


def test_the_fhir_store_tells_a_refused_write_from_one_no_encounter_can_carry(
    tmp_path: Path,
) -> None:
    """A value the server refuses (an integer where FHIR wants a string: 422) is the SoR
    refusing the fault (rejected, R-CAL-7), and the creates already made are deleted again; a
    field no Encounter has a place for is a draw for another schema (drawn again)."""
    database = tmp_path / "fhir-sandbox.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path, admin=False) as sandbox:
        store = FhirSandboxStore(sandbox.url, "/fhir/Encounter", sandbox.token)
        try:
            good = {"id": "rec-1", "patient_id": "patient-a", "type": "Triage", "status": "open"}
            ids = store.insert([good])
            assert list(ids) == ["rec-1"]
            store.update(ids["rec-1"], {**good, "status": "closed"})
            (record,) = sandbox.client.get("/api/encounters?patient_id=patient-a").json()[
                "encounters"
            ]
            assert (record["id"], record["status"]) == (ids["rec-1"], "closed")
            store.delete(list(ids.values()))
            assert encounters(database) == 0

            with pytest.raises(TrialRejected, match="HTTP 422"):
                store.insert([good, {"id": "rec-2", "patient_id": "patient-a", "note": 3}])
            assert encounters(database) == 0  # the first create was deleted again
            with pytest.raises(TrialNotWritable, match="no place for the fields") as refused:
                store.insert([{"id": "rec-3", "patient_id": "patient-a", "comment": "x"}])
            assert not isinstance(refused.value, TrialRejected)
        finally:
            store.close()


@pytest.mark.parametrize("status", ["open", "closed", "cancelled", "OPEN", None])
def test_encounter_from_record_is_the_inverse_of_the_fhir_readers_mapping(
    status: str | None,
) -> None:
    record = {
        "patient_id": "patient-a",
        "type": "Triage",
        "note": "Synthetic note",
        "status": status,
        "priority": None,
        "created_at": "2026-12-04T00:00:00Z",
    }
    resource = {**encounter_from_record(record), "id": "enc-1"}
    bundle = {"resourceType": "Bundle", "type": "searchset", "entry": [{"resource": resource}]}
    assert records_from_bundle(bundle, "test") == [{**record, "id": "enc-1"}]
    with pytest.raises(ValueError, match="no place"):
        encounter_from_record({**record, "comment": "x"})
