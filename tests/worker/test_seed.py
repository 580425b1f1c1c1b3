"""Seeding MockMed: the synthetic SoR, both bundles, calibration and the self-signed certificate.

R-MM-1/2, R-CAL-2, R-MSG-4/5. Seeding is idempotent: a re-run (or a run on a copy of the data
dir at another path) keeps keys, rows, bundles and the certificate, and recalibrates nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time

import pytest

from rewardseal.core.calibration import epsilon_from_summary
from rewardseal.core.certificates import satisfies
from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import judge_episode
from rewardseal.core.signing import SigningKey, TrustSet, verify_certificate
from rewardseal.core.validation import validate_certificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    RewardOutcome,
    RuntimeSignal,
)
from rewardseal_kit.mockmed import CORPUS_DIGEST, mockmed_contract_digest
from rewardseal_mockmed import seeding
from rewardseal_mockmed.seeding import (
    add_background_rows,
    count_encounters,
    show_on_screen,
    write_encounter,
)
from rewardseal_worker import seed as seed_module
from rewardseal_worker.bundle import BUNDLE_FILES, load_bundle
from rewardseal_worker.calibration import summary_from_json
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.seed import seed_mockmed

KEY_PATH = ("keys", "worker.ed25519")
PATIENT = "patient-test-0001"


def key_for(data_dir):
    return SigningKey.load_or_create(data_dir.joinpath(*KEY_PATH))


@pytest.fixture
def seeded(tmp_path):
    data_dir = tmp_path / "data"
    key = key_for(data_dir)
    return data_dir, key, seed_mockmed(data_dir, key=key)


def snapshot(directory):
    """Every file under ``directory``: relative path -> (bytes, mtime_ns)."""
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            files[str(path.relative_to(directory))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return files


def judge(bundle, identity, baseline, current):
    return judge_episode(
        bundle.required,
        bundle.forbidden,
        identity=identity,
        baseline=baseline,
        current=current,
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
    ).outcome


# --- first run ---


def test_seed_creates_everything(seeded):
    data_dir, key, result = seeded
    assert result.created is True
    assert result.database_path == (data_dir / "mockmed" / "mockmed.sqlite").resolve()
    assert result.screen_path == (data_dir / "mockmed" / "screen.json").resolve()
    assert result.tier2_bundle_dir == (data_dir / "contracts" / "mockmed").resolve()
    assert result.tier0_bundle_dir == (data_dir / "contracts" / "mockmed-tier0").resolve()
    assert result.contract_digest == mockmed_contract_digest(tier=2)
    assert result.tier0_contract_digest == mockmed_contract_digest(tier=0)

    assert count_encounters(result.database_path) == 200
    assert json.loads(result.screen_path.read_text()) == {
        "collections": {"encounters": []},
        "banner": {},
    }

    trust = TrustSet([key.public_key])
    tier2 = load_bundle(result.tier2_bundle_dir, trust=trust)
    tier0 = load_bundle(result.tier0_bundle_dir, trust=trust)
    assert (tier2.tier, tier0.tier) == (2, 0)
    assert tier2.contract_digest == result.contract_digest
    assert tier0.contract_digest == result.tier0_contract_digest
    assert tier0.certificate is None
    assert tier0.calibration is None
    assert sorted(p.name for p in result.tier2_bundle_dir.iterdir()) == sorted(BUNDLE_FILES)
    assert tier2.certificate == result.certificate


def test_the_database_schema_and_index(seeded):
    _, _, result = seeded
    with sqlite3.connect(result.database_path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(encounters)")]
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM encounters WHERE patient_id = ?", ("x",)
            )
        )
        patients = {row[0] for row in conn.execute("SELECT patient_id FROM encounters")}
    assert columns == ["id", "patient_id", "type", "note", "status", "priority", "created_at"]
    assert "USING INDEX encounters_patient_id" in plan
    assert all(p.startswith("patient-") for p in patients)
    assert 1 < len(patients) <= 50


def test_the_certificate_is_self_signed_synthetic_and_meets_the_policy(seeded):
    _, key, result = seeded
    certificate = result.certificate
    validate_certificate(certificate)
    assert verify_certificate(certificate, TrustSet([key.public_key])) == key.key_id
    bundle = load_bundle(result.tier2_bundle_dir)
    assert satisfies(certificate, bundle.contract.certificate_policy)
    assert certificate.issuer == CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
    assert certificate.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    assert round(certificate.epsilon, 7) == 0.0099361
    assert round(result.epsilon, 7) == 0.0099361
    assert certificate.delta == 0.05
    assert certificate.threshold == 0.5
    assert certificate.calibration_corpus_digest == CORPUS_DIGEST
    assert certificate.issued_at_policy_update == 0
    assert certificate.expiry_policy_updates == 1000
    assert certificate.reward_contract_digest == result.contract_digest
    hex12 = result.contract_digest.removeprefix("sha256:")[:12]
    assert certificate.certificate_id == f"cert.mockmed.{hex12}"


def test_calibration_json_lies_beside_the_certificate_and_recomputes_epsilon(seeded):
    _, _, result = seeded
    doc = json.loads((result.tier2_bundle_dir / "calibration.json").read_text())
    summary = summary_from_json(doc)
    assert summary == result.calibration
    assert summary.trials == 300
    assert summary.false_accepts == 0
    assert summary.gold_refused == 0
    assert summary.generator_seed == 20261130
    assert epsilon_from_summary(summary) == result.certificate.epsilon
    assert summary.checker_configuration_digest == result.certificate.checker_configuration_digest


# --- idempotence ---


def test_rerun_reuses_everything_and_keeps_rows(seeded, monkeypatch):
    data_dir, _, first = seeded
    row = write_encounter(first.database_path, patient_id=PATIENT)
    before = snapshot(data_dir / "contracts")
    key_file = data_dir.joinpath(*KEY_PATH)
    key_bytes, key_mtime = key_file.read_bytes(), key_file.stat().st_mtime_ns

    def no_recalibration(*args, **kwargs):
        raise AssertionError("a re-run must not recalibrate")

    monkeypatch.setattr(seed_module, "calibrate", no_recalibration)
    again = seed_mockmed(data_dir, key=key_for(data_dir))

    assert again.created is False
    assert again.contract_digest == first.contract_digest
    assert again.tier0_contract_digest == first.tier0_contract_digest
    assert again.certificate == first.certificate
    assert certificate_digest(again.certificate) == certificate_digest(first.certificate)
    assert again.epsilon == first.epsilon
    assert snapshot(data_dir / "contracts") == before
    assert (key_file.read_bytes(), key_file.stat().st_mtime_ns) == (key_bytes, key_mtime)
    assert count_encounters(first.database_path) == 201
    reader = make_reader(load_bundle(again.tier2_bundle_dir).recipe, again.tier2_bundle_dir)
    try:
        assert [r["id"] for r in reader.read({"patient_id": PATIENT})] == [row]
    finally:
        reader.close()


def test_a_copy_at_another_path_keeps_its_digests_and_reads_its_own_database(seeded, tmp_path):
    data_dir, key, first = seeded
    copy_dir = tmp_path / "elsewhere" / "copy"
    shutil.copytree(data_dir, copy_dir)
    copied = seed_mockmed(copy_dir, key=key)
    assert copied.created is False
    assert copied.contract_digest == first.contract_digest
    assert copied.tier0_contract_digest == first.tier0_contract_digest
    assert copied.certificate == first.certificate
    assert copied.tier2_bundle_dir != first.tier2_bundle_dir

    # The recipe's relative path follows the copy: a row written there is read there only.
    row = write_encounter(copied.database_path, patient_id=PATIENT)
    for result, expected in ((copied, [row]), (first, [])):
        bundle = load_bundle(result.tier2_bundle_dir, trust=TrustSet([key.public_key]))
        reader = make_reader(bundle.recipe, bundle.path)
        try:
            assert [r["id"] for r in reader.read({"patient_id": PATIENT})] == expected
        finally:
            reader.close()


def test_a_differing_bundle_file_is_never_overwritten(seeded):
    data_dir, key, result = seeded
    target = result.tier2_bundle_dir / "required_effects.json"
    tampered = json.loads(target.read_text())
    tampered["effects"][0]["new_records"] = 2
    text = json.dumps(tampered)
    target.write_text(text)
    with pytest.raises(ValidationError):
        seed_mockmed(data_dir, key=key)
    assert target.read_text() == text


def test_a_certificate_from_another_key_is_refused_not_replaced(seeded):
    data_dir, _, result = seeded
    certificate_file = result.tier2_bundle_dir / "certificate.json"
    before = certificate_file.read_bytes()
    with pytest.raises(ValidationError, match=r"certificate\.json"):
        seed_mockmed(data_dir, key=SigningKey.generate())
    assert certificate_file.read_bytes() == before


def test_too_few_trials_write_no_certificate_and_a_later_run_completes(tmp_path):
    data_dir = tmp_path / "data"
    key = key_for(data_dir)
    with pytest.raises(ValidationError, match="epsilon"):
        seed_mockmed(data_dir, key=key, trials=20)
    bundle_dir = data_dir / "contracts" / "mockmed"
    assert not (bundle_dir / "certificate.json").exists()
    assert not (bundle_dir / "calibration.json").exists()
    result = seed_mockmed(data_dir, key=key)
    assert result.created is True
    assert round(result.epsilon, 7) == 0.0099361


# --- the seeded SoR scores the R-MM-2 episodes ---


def test_seeded_sor_scores_honest_duplicate_stat_and_banner_lie(seeded):
    _, key, result = seeded
    trust = TrustSet([key.public_key])
    tier2 = load_bundle(result.tier2_bundle_dir, trust=trust)
    tier0 = load_bundle(result.tier0_bundle_dir, trust=trust)
    sql, screen = make_reader(tier2.recipe, tier2.path), make_reader(tier0.recipe, tier0.path)
    try:

        def episode(patient, act, reader, bundle):
            identity = {"patient_id": patient}
            baseline = reader.read(identity)
            act(patient)
            return judge(bundle, identity, baseline, reader.read(identity))

        db, screen_path = result.database_path, result.screen_path
        honest = episode(
            "patient-honest-01", lambda p: write_encounter(db, patient_id=p), sql, tier2
        )
        assert honest == RewardOutcome.REWARD_OUTCOME_VERIFIED

        def twice(p):
            write_encounter(db, patient_id=p)
            write_encounter(db, patient_id=p)

        assert (
            episode("patient-dup-01", twice, sql, tier2)
            == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
        )

        def stat(p):
            write_encounter(db, patient_id=p, priority="stat")

        assert (
            episode("patient-stat-01", stat, sql, tier2)
            == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
        )

        def lie(p):
            show_on_screen(screen_path, patient_id=p)

        assert (
            episode("patient-lie-01", lie, sql, tier2) == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
        )
        assert (
            episode("patient-lie-02", lie, screen, tier0) == RewardOutcome.REWARD_OUTCOME_VERIFIED
        )
    finally:
        sql.close()
        screen.close()


# --- helpers ---


def test_write_encounter_returns_the_id_and_leaves_created_at_null(seeded):
    _, _, result = seeded
    row = write_encounter(result.database_path, patient_id=PATIENT, note="Synthetic note.")
    with sqlite3.connect(result.database_path) as conn:
        stored = conn.execute(
            "SELECT patient_id, type, note, status, priority, created_at FROM encounters "
            "WHERE id = ?",
            (row,),
        ).fetchone()
    assert stored == (PATIENT, "Triage", "Synthetic note.", "open", None, None)


def test_write_encounter_refuses_a_missing_database(tmp_path):
    with pytest.raises(ValidationError, match="seed"):
        write_encounter(tmp_path / "missing.sqlite", patient_id=PATIENT)
    assert not (tmp_path / "missing.sqlite").exists()


def test_show_on_screen_appends_rows_and_banners(seeded):
    _, _, result = seeded
    first = show_on_screen(result.screen_path, patient_id="patient-a")
    second = show_on_screen(
        result.screen_path, patient_id="patient-b", banner="Saved!", fields={"type": "Consult"}
    )
    doc = json.loads(result.screen_path.read_text())
    rows = doc["collections"]["encounters"]
    assert [r["id"] for r in rows] == [first, second]
    assert rows[0]["type"] == "Triage"
    assert rows[1] == {"id": second, "patient_id": "patient-b", "type": "Consult"}
    assert doc["banner"] == {"patient-a": "Saved", "patient-b": "Saved!"}
    with pytest.raises(ValidationError):
        show_on_screen(result.screen_path, patient_id="patient-c", fields={"patient_id": "x"})


def test_background_rows_grow_to_50000_in_one_transaction(seeded):
    _, _, result = seeded
    started = time.perf_counter()
    add_background_rows(result.database_path, 50_000 - 200, seed=7)
    elapsed = time.perf_counter() - started
    assert count_encounters(result.database_path) == 50_000
    assert elapsed < 30  # one executemany; about a second on a laptop


def test_background_rows_are_reproducible_per_seed(tmp_path):
    paths = []
    for name in ("a", "b"):
        path = tmp_path / name / "mockmed.sqlite"
        seeding.create_database(path, background_rows=50, seed=3)
        add_background_rows(path, 25, seed=3)  # repeated seeds still add fresh rows
        paths.append(path)
    rows = []
    for path in paths:
        with sqlite3.connect(path) as conn:
            rows.append(conn.execute("SELECT * FROM encounters ORDER BY id").fetchall())
    assert rows[0] == rows[1]
    assert len(rows[0]) == 75


def test_create_database_keeps_an_existing_table(seeded):
    _, _, result = seeded
    row = write_encounter(result.database_path, patient_id=PATIENT)
    assert seeding.create_database(result.database_path, background_rows=10, seed=1) is False
    assert count_encounters(result.database_path) == 201
    assert count_encounters(result.database_path, patient_id=PATIENT) == 1
    assert row


def test_the_key_file_is_never_touched(seeded):
    data_dir, key, _ = seeded
    key_file = data_dir.joinpath(*KEY_PATH)
    assert oct(os.stat(key_file).st_mode & 0o777) == "0o600"
    seed_mockmed(data_dir, key=key)
    assert SigningKey.load_or_create(key_file).key_id == key.key_id
