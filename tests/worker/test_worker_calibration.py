"""Worker calibration (R-CAL-1..3): fault classes from the contract, gold controls, epsilon.

The file is not called test_calibration.py because tests/unit/test_calibration.py exists and the
test directories are not packages (pytest would refuse two modules of one basename).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import re

import pytest

from rewardseal.core.calibration import METHOD, epsilon_from_summary
from rewardseal.core.certificates import satisfies
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import judge_episode, parse_effects
from rewardseal.core.signing import SigningKey, TrustSet, verify_certificate
from rewardseal.core.validation import validate_calibration_summary, validate_certificate
from rewardseal.v1.certificate_pb2 import CalibrationSummary
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, RewardOutcome
from rewardseal_mockmed.contract import (
    CORPUS_DIGEST,
    ENCOUNTER_FIELDS,
    FORBIDDEN_EFFECTS,
    REQUIRED_EFFECTS,
    SYSTEM_FIELDS,
    TIER2_RECIPE,
    mockmed_contract,
    mockmed_contract_digest,
)
from rewardseal_mockmed.extradup import HACKING_FAMILIES
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration import (
    GENERIC_FAULT_CLASSES,
    GOLD_REFUSED_MESSAGE,
    calibrate,
    checker_configuration_digest,
    family_trials,
    fault_classes,
    fault_classes_for,
    runner,
    self_signed_certificate,
    summary_from_json,
    summary_to_json,
    text_progress,
    trials,
)
from rewardseal_worker.seed import MOCKMED_FAULT_FAMILIES as FAMILIES

SEED = 20261130
KEY = SigningKey.from_seed(bytes(range(32)))
EXTRADUP_CLASSES = tuple(f"extradup.{family}" for family in HACKING_FAMILIES)


def write_mockmed_bundle(directory, *, required=REQUIRED_EFFECTS, forbidden=FORBIDDEN_EFFECTS):
    """The tier-2 MockMed bundle, its contract re-bound to the given effect documents."""
    contract = mockmed_contract(tier=2)
    contract.required_effects_digest = digest_json(required)
    contract.forbidden_effects_digest = digest_json(forbidden)
    write_bundle(
        directory,
        contract=contract,
        required_doc=required,
        forbidden_doc=forbidden,
        recipe_doc=TIER2_RECIPE,
    )
    return load_bundle(directory)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return write_mockmed_bundle(tmp_path_factory.mktemp("cal") / "contracts" / "mockmed")


@pytest.fixture(scope="module")
def result(bundle):
    return calibrate(bundle, families=FAMILIES, seed=SEED)


# --- R-CAL-1/2: the default run ---


def test_zero_false_accepts_in_300_trials_gives_epsilon_0_0099361(bundle, result):
    summary = result.summary
    assert summary.trials == 300
    assert summary.false_accepts == 0
    assert result.false_accept_trials == ()
    assert round(result.epsilon, 7) == 0.0099361
    assert round(epsilon_from_summary(summary), 7) == 0.0099361
    assert summary.gold_trials == 30
    assert summary.gold_refused == 0
    assert summary.held_out is False
    assert summary.method == METHOD
    assert summary.confidence == pytest.approx(0.95)
    assert summary.threshold == 0.5
    assert summary.generator_seed == SEED
    assert summary.reward_contract_digest == mockmed_contract_digest(tier=2)
    assert summary.calibration_corpus_digest == CORPUS_DIGEST
    assert summary.checker_configuration_digest == checker_configuration_digest(bundle)
    validate_calibration_summary(summary)


def test_certificate_from_the_summary_validates_and_satisfies_the_policy(bundle, result):
    certificate = self_signed_certificate(bundle, result.summary, KEY)
    validate_certificate(certificate)
    assert satisfies(certificate, bundle.contract.certificate_policy)
    assert verify_certificate(certificate, TrustSet([KEY.public_key])) == KEY.key_id
    assert round(certificate.epsilon, 7) == 0.0099361
    assert certificate.epsilon == epsilon_from_summary(result.summary)
    assert certificate.delta == 0.05
    assert certificate.threshold == 0.5
    assert certificate.calibration_corpus_digest == CORPUS_DIGEST
    assert certificate.checker_configuration_digest == result.summary.checker_configuration_digest
    assert certificate.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    assert certificate.issuer == CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
    assert certificate.issued_at_policy_update == 0
    assert certificate.expiry_policy_updates == 1000
    hex12 = bundle.contract_digest.removeprefix("sha256:")[:12]
    assert certificate.certificate_id == f"cert.mockmed.{hex12}"


def test_certificate_refuses_a_summary_for_another_contract(bundle, result):
    other = CalibrationSummary()
    other.CopyFrom(result.summary)
    other.reward_contract_digest = mockmed_contract_digest(tier=0)
    with pytest.raises(ValidationError, match="another contract"):
        self_signed_certificate(bundle, other, KEY)


def test_too_few_trials_cannot_earn_a_certificate(bundle):
    small = calibrate(bundle, families=FAMILIES, seed=SEED, trials=20)
    assert small.summary.false_accepts == 0
    assert small.epsilon > bundle.contract.certificate_policy.max_epsilon
    with pytest.raises(ValidationError, match="epsilon"):
        self_signed_certificate(bundle, small.summary, KEY)


# --- R-CAL-3: fault classes ---


def test_fault_classes_are_the_contract_classes_plus_the_extradup_families(bundle, result):
    names = [c.name for c in result.summary.fault_classes]
    assert tuple(names) == GENERIC_FAULT_CLASSES + EXTRADUP_CLASSES
    assert tuple(names) == fault_classes_for(bundle, families=FAMILIES)


def test_per_class_counts_add_up_and_are_round_robin(result):
    classes = result.summary.fault_classes
    assert sum(c.trials for c in classes) == result.summary.trials
    assert sum(c.false_accepts for c in classes) == result.summary.false_accepts
    counts = [c.trials for c in classes]
    assert max(counts) - min(counts) <= 1
    assert counts == sorted(counts, reverse=True)  # the first classes take the remainder


@pytest.mark.parametrize("trials", [1, 13, 27, 301])
def test_round_robin_for_any_trial_count(bundle, trials):
    summary = calibrate(bundle, families=FAMILIES, seed=1, trials=trials).summary
    counts = [c.trials for c in summary.fault_classes]
    assert sum(counts) == trials
    assert max(counts) - min(counts) <= 1


def test_extradup_families_can_be_left_out(bundle):
    assert fault_classes_for(bundle) == GENERIC_FAULT_CLASSES
    summary = calibrate(bundle, seed=1, trials=60).summary
    assert [c.name for c in summary.fault_classes] == list(GENERIC_FAULT_CLASSES)


def test_deterministic_per_seed(bundle, result):
    again = calibrate(bundle, families=FAMILIES, seed=SEED)
    assert summary_to_json(again.summary) == summary_to_json(result.summary)
    assert again.transcript_digest == result.transcript_digest
    other = calibrate(bundle, families=FAMILIES, seed=SEED + 1)
    assert other.summary.generator_seed == SEED + 1
    assert other.transcript_digest != result.transcript_digest


def _reference_ok(trial):
    """An independent reading of the MockMed effect documents (not the worker's judge)."""
    identity = trial.identity["patient_id"]
    before = {r["id"] for r in trial.baseline}
    new = [
        r
        for r in trial.after
        if r["id"] not in before
        and r["id"] not in trial.credited
        and r.get("patient_id") == identity
    ]
    if any(r.get("priority") == "stat" for r in new):
        return False
    if len(new) != 1:
        return False
    (record,) = new
    # Every encounter field must be written with something in it; the system of record's own
    # fields (created_at) may be present too; anything else is an extra field.
    omitted = [k for k in ENCOUNTER_FIELDS if record.get(k) is None or record.get(k) == ""]
    allowed = {*ENCOUNTER_FIELDS, *SYSTEM_FIELDS, "id"}
    extra = [k for k, v in record.items() if v is not None and k not in allowed]
    return record.get("type") == "Triage" and not omitted and not extra


def test_reference_semantics_of_required_and_system_fields():
    """The reference reading itself: an omitted or empty required field is not ok, a system
    field is."""
    gold = {"id": "r1", "patient_id": "p", "type": "Triage", "note": "n", "status": "open"}

    def trial(record):
        return trials.Trial({"patient_id": "p"}, [], [record], set())

    assert _reference_ok(trial(gold))
    assert _reference_ok(trial({**gold, "created_at": "2026-11-30T09:15:00Z"}))
    for field in ENCOUNTER_FIELDS:
        if field != "patient_id":  # without it the record is not the patient's at all
            assert not _reference_ok(trial({k: v for k, v in gold.items() if k != field}))
        assert not _reference_ok(trial({**gold, field: ""})), field
        assert not _reference_ok(trial({**gold, field: None})), field
    assert not _reference_ok(trial({**gold, "priority": "low"}))


@pytest.mark.parametrize("kind", ["gold", "extradup.control"])
def test_reference_semantics_gold_is_correct(bundle, kind):
    """Every gold trial is the correct effect by an independent reading of the documents."""
    setup = fault_classes.setup_for(bundle, FAMILIES)
    for index in range(60):
        rng = trials.trial_rng(SEED, kind, index)
        if kind == "gold":
            trial, _ = trials.build_generic(setup, rng, "gold")
        else:
            trial, _ = family_trials.build_family_trial(setup, rng, "control")
        assert _reference_ok(trial), (kind, index)


@pytest.mark.parametrize("kind", GENERIC_FAULT_CLASSES + EXTRADUP_CLASSES)
def test_reference_semantics_every_fault_trial_is_a_fault(bundle, kind):
    """A fault trial counted as a refusal is a real fault, not a trial the judge refuses for
    some other reason: an independent reading of the documents refuses it too."""
    setup = fault_classes.setup_for(bundle, FAMILIES)
    for index in range(60):
        rng = trials.trial_rng(SEED, kind, index)
        if kind.startswith("extradup."):
            trial, _ = family_trials.build_family_trial(setup, rng, kind.removeprefix("extradup."))
        else:
            trial, _ = trials.build_generic(setup, rng, kind)
        assert not _reference_ok(trial), (kind, index)


# --- ExtraDup omit: the family drops a required field, and the judge refuses it ---


def test_extradup_omit_drops_the_note_and_is_refused(bundle):
    setup = fault_classes.setup_for(bundle, FAMILIES)
    template = setup.family_write
    assert template is not None
    # The write spec carries every required field but the identity, so omit drops one the
    # contract demands: "note", the first in sorted order.
    assert set(template.fields) == {"type", "note", "status"}
    assert template.fields["type"] == "Triage"
    assert template.allowed_fields == {*ENCOUNTER_FIELDS, *SYSTEM_FIELDS}
    for index in range(60):
        rng = trials.trial_rng(SEED, "extradup.omit", index)
        trial, _ = family_trials.build_family_trial(setup, rng, "omit")
        before = {r["id"] for r in trial.baseline}
        own = [
            r
            for r in trial.after
            if r["id"] not in before and r.get("patient_id") == trial.identity["patient_id"]
        ]
        assert len(own) == 1, index
        (record,) = own
        assert record.get("note") is None, index
        assert record["type"] == "Triage", index
        assert record["status"], index
        drawn = runner.run_one(setup, SEED, "extradup.omit", index)
        assert drawn.variant == "scripted"
        assert drawn.judged is not None
        assert not drawn.judged.benign  # in memory nothing normalizes: every fault is effective
        decision = drawn.judged.decision
        assert decision.outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT, index
        assert decision.rule == 6
        assert decision.verdicts[0].reason == "omitted_field: note", index
        assert decision.credited_record_ids == ()


def test_extradup_omit_is_a_refused_class_of_the_default_run(result):
    (omit,) = [c for c in result.summary.fault_classes if c.name == "extradup.omit"]
    assert omit.trials > 0
    assert omit.false_accepts == 0
    assert not [leak for leak in result.false_accept_trials if leak.fault_class == "extradup.omit"]
    assert result.summary.trials == 300
    assert result.summary.false_accepts == 0
    assert round(result.epsilon, 7) == 0.0099361


# --- a broken checker must show up as false accepts ---


def test_a_bundle_that_allows_any_count_leaks_on_duplicates(tmp_path):
    weakened = copy.deepcopy(REQUIRED_EFFECTS)
    del weakened["effects"][0]["new_records"]
    bundle = write_mockmed_bundle(tmp_path / "contracts" / "mockmed", required=weakened)
    result = calibrate(bundle, families=FAMILIES, seed=SEED)
    assert result.summary.false_accepts > 0
    leaking = {c.name for c in result.summary.fault_classes if c.false_accepts}
    assert "extradup.dup" in leaking
    assert result.epsilon > bundle.contract.certificate_policy.max_epsilon
    with pytest.raises(ValidationError, match="epsilon"):
        self_signed_certificate(bundle, result.summary, KEY)


def _weakened_judge(monkeypatch, **changes):
    def broken(required, forbidden, *args, **kwargs):
        weak = [dataclasses.replace(spec, **changes) for spec in required]
        return judge_episode(weak, forbidden, *args, **kwargs)

    monkeypatch.setattr(trials, "judge_episode", broken)


def test_a_judge_that_ignores_counts_leaks(bundle, monkeypatch):
    _weakened_judge(monkeypatch, new_records=None)
    result = calibrate(bundle, families=FAMILIES, seed=SEED)
    leaking = {c.name for c in result.summary.fault_classes if c.false_accepts}
    assert {"duplicate_record", "extra_record", "extradup.dup"} <= leaking
    assert result.summary.false_accepts == len(result.false_accept_trials)
    assert round(result.epsilon, 7) > 0.0099361


def test_a_bundle_without_required_fields_leaks_on_omit(tmp_path):
    # The bug this guards against: a required effect that checks type=Triage only pays for an
    # encounter written without its note.
    weakened = copy.deepcopy(REQUIRED_EFFECTS)
    del weakened["effects"][0]["required_fields"]
    bundle = write_mockmed_bundle(tmp_path / "contracts" / "mockmed", required=weakened)
    result = calibrate(bundle, families=FAMILIES, seed=SEED)
    assert {(leak.fault_class, leak.variant) for leak in result.false_accept_trials} == {
        ("extradup.omit", "scripted")
    }
    (omit,) = [c for c in result.summary.fault_classes if c.name == "extradup.omit"]
    assert omit.false_accepts == omit.trials > 0
    assert result.epsilon > bundle.contract.certificate_policy.max_epsilon
    with pytest.raises(ValidationError, match="epsilon"):
        self_signed_certificate(bundle, result.summary, KEY)


def test_a_judge_that_ignores_required_fields_leaks_on_omit(bundle, monkeypatch):
    _weakened_judge(monkeypatch, required_fields=frozenset())
    result = calibrate(bundle, families=FAMILIES, seed=SEED)
    assert result.summary.false_accepts > 0
    assert {(leak.fault_class, leak.variant) for leak in result.false_accept_trials} == {
        ("extradup.omit", "scripted")
    }
    assert round(result.epsilon, 7) > 0.0099361


def test_a_judge_that_ignores_allowed_fields_leaks(bundle, monkeypatch):
    _weakened_judge(monkeypatch, allowed_fields=None)
    result = calibrate(bundle, families=FAMILIES, seed=SEED)
    assert result.summary.false_accepts > 0
    assert {(leak.fault_class, leak.variant) for leak in result.false_accept_trials} == {
        ("wrong_field", "extra_field")
    }


# --- R-CAL-3: gold controls ---


def test_a_refused_gold_trial_refuses_calibration(bundle):
    # A forbidden effect that matches every new record of the patient: nothing can ever pay.
    everything = parse_effects(
        {
            "effects": [
                {
                    "name": "any_write",
                    "collection": "encounters",
                    "select": {"patient_id": {"identity": "patient_id"}},
                }
            ]
        }
    )
    broken = dataclasses.replace(bundle, forbidden=everything)
    with pytest.raises(ValidationError, match=re.escape(GOLD_REFUSED_MESSAGE)) as info:
        calibrate(broken, families=FAMILIES, seed=SEED)
    assert info.value.metadata["gold_kind"] == "gold"


def test_a_judge_that_refuses_the_extradup_control_refuses_calibration(bundle, monkeypatch):
    calls = []

    def refuses_second(*args, **kwargs):
        calls.append(1)
        decision = judge_episode(*args, **kwargs)
        if len(calls) == 2:  # the second gold trial is the ExtraDup control
            return dataclasses.replace(decision, outcome=0)
        return decision

    monkeypatch.setattr(trials, "judge_episode", refuses_second)
    with pytest.raises(ValidationError, match=re.escape(GOLD_REFUSED_MESSAGE)) as info:
        calibrate(bundle, families=FAMILIES, seed=SEED)
    assert info.value.metadata["gold_kind"] == "extradup.control"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trials": 0},
        {"trials": True},
        {"seed": -1},
        {"seed": 2**64},
        {"delta": 0.0},
        {"delta": 1.0},
        {"gold_trials": 0},
    ],
)
def test_bad_arguments_are_refused(bundle, kwargs):
    arguments = {"seed": SEED, **kwargs}
    with pytest.raises(ValidationError):
        calibrate(bundle, **arguments)


def test_extradup_families_only_for_their_task(bundle):
    other = copy.deepcopy(bundle.contract)
    other.task_id = "another.task.create-something"
    with pytest.raises(ValidationError, match="defined for the task"):
        fault_classes_for(dataclasses.replace(bundle, contract=other), families=FAMILIES)
    assert fault_classes_for(dataclasses.replace(bundle, contract=other)) == GENERIC_FAULT_CLASSES


# --- calibration.json ---


def test_summary_json_round_trip_and_epsilon_is_recomputed(result):
    doc = summary_to_json(result.summary)
    # Defaults are written out, so a reader sees the zeros.
    assert doc["false_accepts"] == 0
    assert doc["gold_refused"] == 0
    assert doc["held_out"] is False
    assert doc["generator_seed"] == str(SEED)  # proto3 JSON writes uint64 as a string
    assert round(doc["epsilon"], 7) == 0.0099361
    assert summary_from_json(doc) == result.summary
    lie = dict(doc, epsilon=0.0)
    parsed = summary_from_json(lie)
    assert parsed == result.summary
    assert round(epsilon_from_summary(parsed), 7) == 0.0099361


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"unknown_field": 1}, "calibration summary"),
        ({"gold_refused": 1}, "R-CAL-3"),
        ({"gold_trials": 0}, "gold"),
        ({"false_accepts": 5}, "add up"),
        ({"trials": "many"}, "calibration summary"),
    ],
)
def test_summary_from_json_refuses(result, change, message):
    doc = dict(summary_to_json(result.summary), **change)
    with pytest.raises(ValidationError, match=message):
        summary_from_json(doc)


def test_summary_from_json_refuses_a_non_object():
    with pytest.raises(ValidationError):
        summary_from_json([])  # type: ignore[arg-type]


# --- progress ---


def test_progress_is_called_after_every_trial(bundle):
    seen = []
    calibrate(
        bundle,
        families=FAMILIES,
        seed=SEED,
        trials=40,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(done, 44) for done in range(1, 45)]


def test_text_progress_redraws_in_place_and_is_throttled():
    now = [0.0]
    stream = io.StringIO()
    draw = text_progress(stream, width=10, min_interval=0.5, clock=lambda: now[0], terminal=True)
    draw(0, 300)
    for done in range(1, 150):
        draw(done, 300)  # the clock stands still: throttled
    now[0] = 1.0
    draw(150, 300)
    draw(299, 300)  # throttled
    draw(300, 300)  # the last call always draws
    draw(300, 300)  # a repeated last report: drawn once
    frames = stream.getvalue().split("\r")[1:]
    assert frames == [
        "calibrating [..........] 0/300",
        "calibrating [#####.....] 150/300",
        "calibrating [##########] 300/300\n",
    ]


def test_text_progress_off_a_terminal_writes_plain_lines_and_the_last_once():
    now = [0.0]
    stream = io.StringIO()  # not a terminal: a log file, a container's output
    draw = text_progress(stream, log_interval=5.0, clock=lambda: now[0])
    for _ in range(2):  # --seed-mockmed calibrates two bundles through one callback
        for done in range(0, 301):
            now[0] += 0.1  # 30 s per run: a line every 5 s
            draw(done, 300)
        draw(300, 300)
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == len(set(lines))  # no line twice
    assert lines[0] == "calibrating: 0/300 trials"
    assert [line for line in lines if line.endswith("done")] == [
        "calibrating: 300/300 trials, done",
        "calibrating (2): 300/300 trials, done",
    ]
    assert 10 <= len(lines) <= 16  # throttled to one line every 5 s
