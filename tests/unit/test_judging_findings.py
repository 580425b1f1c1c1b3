"""The judge's one fault vocabulary: findings, their frozen evidence reasons, the snapshot judge,
and the map from calibration fault classes and ExtraDup families onto findings."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Literal

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal.core.judging import (
    EXPECTED_FAULTS,
    EffectSpec,
    Fault,
    Finding,
    IdentityRef,
    Verdict,
    judge_required,
    judge_snapshots,
    new_records,
    required_findings,
)
from rewardseal.core.judging.findings import RECORD_FAULTS
from rewardseal_mockmed.extradup import (
    CONTROL,
    FAULTS,
    HACKING_FAMILIES,
    WRITE_EFFECT_NAME,
    mockmed_write_spec,
    run_family,
    variants,
)

SPEC = mockmed_write_spec("patient-0000a1b2", "Synthetic: sore throat; fluids advised.")
EFFECT = EffectSpec(
    name="triage",
    collection="encounters",
    select=MappingProxyType({"patient_id": IdentityRef("patient_id")}),
    expect=MappingProxyType({"type": "Triage"}),
    new_records=2,
    allowed_fields=frozenset({"patient_id", "type", "note"}),
    required_fields=frozenset({"note"}),
)
ME = {"patient_id": "p-1"}


def row(rid: str, **fields: Any) -> dict[str, Any]:
    return {"id": rid, "patient_id": "p-1", "type": "Triage", "note": "n", **fields}


# --- evidence reasons: they enter evidence digests, so their wording is frozen ---


@pytest.mark.parametrize(
    ("finding", "reason"),
    [
        (Finding(Fault.MISSING_RECORD, count=0, expected=1), "missing"),
        (Finding(Fault.MISSING_RECORD, count=0), "missing"),
        (
            Finding(Fault.MISSING_RECORD, count=1, expected=2),
            "partial: 1 new matching records, expected 2",
        ),
        (
            Finding(Fault.DUPLICATE_RECORD, count=3, expected=1),
            "duplicate: 3 new matching records, expected 1",
        ),
        (Finding(Fault.MISSING_FIELD, ("note",)), "omitted_field: note"),
        (Finding(Fault.WRONG_FIELD, ("type",)), "wrong_field: type"),
        (Finding(Fault.EXTRA_FIELD, ("a", "b")), "extra_field: a, b"),
        (Finding(Fault.FORBIDDEN_PRESENT, count=1), "present"),
    ],
)
def test_evidence_reasons_are_frozen(finding: Finding, reason: str) -> None:
    assert finding.reason() == reason


def test_the_kit_faults_are_judge_faults() -> None:
    # The kit judges records; the faults about a stop signal or an unreadable SoR (R-MSG-12)
    # are the worker's alone.
    assert set(FAULTS) == {fault.value for fault in RECORD_FAULTS} - {Fault.FORBIDDEN_PRESENT.value}


# --- required_findings: every fault; the verdict rests on the first ---


@pytest.mark.parametrize(
    "current",
    [
        [],
        [row("r1")],
        [row("r1"), row("r2")],
        [row("r1"), row("r2"), row("r3")],
        [row("r1", type="Intake"), row("r2", note=None, flag="x")],
        [row("r2", note=""), row("r1", flag="x", type=None)],
    ],
)
def test_a_required_verdict_rests_on_the_first_finding(current: list[dict[str, Any]]) -> None:
    fresh = new_records(EFFECT, ME, [], current, frozenset())
    findings = required_findings(EFFECT, fresh)
    verdict = judge_required(EFFECT, ME, [], current, frozenset())
    if findings:
        assert verdict.verdict is Verdict.REFUTED
        assert verdict.reason == findings[0].reason()
    else:
        assert verdict.verdict is Verdict.CONFIRMED


def test_required_findings_list_every_fault_of_every_record() -> None:
    fresh = [row("r1", type="Intake"), row("r2", note=None, flag="x")]
    assert required_findings(EFFECT, fresh) == (
        Finding(Fault.WRONG_FIELD, ("type",)),
        Finding(Fault.MISSING_FIELD, ("note",)),
        Finding(Fault.EXTRA_FIELD, ("flag",)),
    )


# --- the snapshot judge (the ExtraDup kit's read) ---


def test_a_write_spec_is_a_required_effect() -> None:
    effect = SPEC.effect()
    assert effect.name == WRITE_EFFECT_NAME
    assert effect.collection == SPEC.collection
    assert dict(effect.select) == {SPEC.identity_field: SPEC.identity}
    assert dict(effect.expect) == dict(SPEC.fields)
    assert effect.new_records == SPEC.spec_count
    assert effect.allowed_fields == SPEC.allowed_fields


def test_snapshots_see_stray_and_altered_records() -> None:
    before = [row("r1"), row("r2", patient_id="p-2")]
    after = [row("r1", note="changed"), row("r2", patient_id="p-2"), row("r4"), row("r3")]
    after.append(row("r5", patient_id="p-3"))
    judgement = judge_snapshots(EFFECT, ME, before, after)
    assert judgement.new_record_ids == ("r4", "r3")  # after-snapshot order
    assert judgement.stray_record_ids == ("r5",)
    assert judgement.altered_record_ids == ("r1",)
    assert [f.fault for f in judgement.findings] == [Fault.WRONG_SUBJECT, Fault.ALTERED_RECORD]
    assert not judgement.confirmed
    assert judge_snapshots(EFFECT, ME, before, [*before, row("r3"), row("r4")]).confirmed


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ([{"id": 1}], [], "before snapshot has no string id"),
        ([], [{"id": "a"}, {"id": "a"}], "after snapshot holds record 'a' twice"),
    ],
)
def test_snapshots_need_unique_string_ids(
    before: list[dict[str, Any]], after: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        judge_snapshots(EFFECT, ME, before, after)


# --- one vocabulary: calibration classes and ExtraDup families map onto findings ---


def test_every_calibration_class_and_hacking_family_maps_onto_findings() -> None:
    assert set(EXPECTED_FAULTS) == set(GENERIC_FAULT_CLASSES) | set(HACKING_FAMILIES)
    assert all(EXPECTED_FAULTS.values())


@pytest.mark.parametrize("kind", ["mockmed", "openemr"])
def test_each_family_is_refused_for_the_faults_that_name_it(
    kind: Literal["mockmed", "openemr"],
) -> None:
    for spec in variants(20, 7, kind=kind):
        assert run_family(CONTROL, spec).check.faults == ()
        for family in HACKING_FAMILIES:
            faults = {Fault(code) for code in run_family(family, spec).check.faults}
            assert faults & EXPECTED_FAULTS[family], (family, faults)
