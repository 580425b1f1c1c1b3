"""FHIR calibration (R-CAL-8): a fhir bundle calibrated against a sandbox FHIR server.

The sandbox is a real MockMed (uvicorn on a free port) over its own SQLite database: each
trial's Encounter records are written where the server's writes land (``--sandbox-store``) and
read back through the server's FHIR search by the bundle's own fhir reader, so the server's
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
from rewardseal_worker.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def encounters(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count: int = conn.execute("SELECT count(*) FROM encounters").fetchone()[0]
    return count


def test_a_fhir_bundle_calibrates_against_a_sandbox_fhir_server_and_certifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "triage"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "fhir")[0] == 0
    database = tmp_path / "fhir-sandbox.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path, admin=False) as sandbox:
        monkeypatch.setenv("SOR_FHIR_TOKEN", sandbox.token)
        store = f"sqlite:///{database}"

        # The live FHIR server, spelled otherwise, is refused before any write (R-CAL-5).
        monkeypatch.setenv("SOR_FHIR_URL", sandbox.url.replace("127.0.0.1", "localhost") + "/")
        code, _, err = run(
            capsys, "calibrate", str(directory), "--sandbox", sandbox.url, "--sandbox-store", store
        )
        assert code == 2
        assert "own read target" in err

        monkeypatch.setenv("SOR_FHIR_URL", "https://fhir.example.invalid")
        code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", sandbox.url)
        assert code == 2
        assert "--sandbox-store" in err
        assert "FHIR server" in err

        code, out, err = run(
            capsys,
            "calibrate",
            str(directory),
            "--sandbox",
            sandbox.url,
            "--sandbox-store",
            store,
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
