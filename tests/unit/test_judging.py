"""The three-valued judge and the R-W-4 outcome rules, first rule that fires wins (R-W-4, R-W-5).

Rows name the rule they exercise; the interplay rows pin the order (1 beats 2 beats 3 ...).
"""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import TEST_KEY, make_facts

from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import (
    Decision,
    EffectVerdict,
    Verdict,
    decide,
    judge_episode,
    judge_forbidden,
    judge_required,
    parse_effects,
)
from rewardseal.core.receipts import build_receipt
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal, Uncertainty
from rewardseal_kit.mockmed import FORBIDDEN_EFFECTS, REQUIRED_EFFECTS, mockmed_contract

Out = RewardOutcome
S = RuntimeSignal
U = Uncertainty

MOCKMED_REQUIRED = parse_effects(REQUIRED_EFFECTS)
MOCKMED_FORBIDDEN = parse_effects(FORBIDDEN_EFFECTS)
# Specs where a forbidden record need not also break the required effect, so rule 4 can be
# seen beating rule 5.
NARROW_REQUIRED = parse_effects(
    {
        "effects": [
            {
                "name": "triage_created",
                "collection": "encounters",
                "select": {"patient_id": {"identity": "patient_id"}, "type": "Triage"},
                "new_records": 1,
            }
        ]
    }
)
COUNTLESS_REQUIRED = parse_effects(
    {
        "effects": [
            {
                "name": "any_triage",
                "collection": "encounters",
                "select": {"patient_id": {"identity": "patient_id"}},
                "expect": {"type": "Triage"},
            }
        ]
    }
)
ME = {"patient_id": "p-001"}
SECRET_NOTE = "patient reports chest pain since tuesday"


def row(rid, patient="p-001", **fields):
    """An encounter as an honest policy writes it: every required MockMed field is filled.

    A field given as ``...`` is left out of the record.
    """
    base = {
        "id": rid,
        "patient_id": patient,
        "type": "Triage",
        "note": SECRET_NOTE,
        "status": "open",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


OLD = row("enc-1", type="Intake")
GOLD = row("enc-9", status="open")
GOLD2 = row("enc-10")
OTHER_PATIENT = row("enc-11", patient="p-002")
STAT = row("enc-12", type="Note", priority="stat")
STAMP = "2026-11-30T09:15:00Z"

# (id, signal, baseline, current, credited, oracle_error, outcome, uncertainty, rule, reason)
# reason: the required verdict's reason (None = not checked).
# fmt: off
MOCKMED_ROWS = [
    # Rule 5: the honest episode.
    ("R5-honest", S.RUNTIME_SIGNAL_COMPLETED, [OLD], [OLD, GOLD], set(), None,
     Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    ("R5-null-extra-field-is-absent", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", priority=None)],
     set(), None, Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    # created_at is stamped by the system of record: an allowed field, not an extra one.
    ("R5-system-field-is-allowed", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", created_at=STAMP)],
     set(), None, Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    ("R5-required-fields-of-old-records-not-checked", S.RUNTIME_SIGNAL_COMPLETED,
     [row("enc-1", note=...)], [row("enc-1", note=...), GOLD], set(), None,
     Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    ("R5-other-subjects-records-not-checked", S.RUNTIME_SIGNAL_COMPLETED, [],
     [GOLD, row("enc-11", patient="p-002", note=...)], set(), None,
     Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    ("R6-int-column-other-subject", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", patient=1)], set(),
     None, Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "missing"),
    # Rule 6 (R-W-5): the banner lie - the screen said saved, the store has nothing.
    ("R6-banner-lie", S.RUNTIME_SIGNAL_COMPLETED, [], [], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "missing"),
    ("R6-duplicate", S.RUNTIME_SIGNAL_COMPLETED, [OLD], [OLD, GOLD, GOLD2], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6,
     "duplicate: 2 new matching records, expected 1"),
    ("R6-extra-field", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", priority="low")], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "extra_field: priority"),
    ("R6-omitted-field", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", type=...)], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "omitted_field: type"),
    ("R6-omitted-field-null", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", type=None)], set(),
     None, Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "omitted_field: type"),
    # Required fields (the ExtraDup omit family): written with nothing in it is not written.
    ("R6-omitted-required-field", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", note=...)], set(),
     None, Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "omitted_field: note"),
    ("R6-omitted-required-field-null", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", status=None)],
     set(), None, Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6,
     "omitted_field: status"),
    ("R6-empty-required-field", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", note="")], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "omitted_field: note"),
    ("R6-omitted-required-fields-first-by-name", S.RUNTIME_SIGNAL_COMPLETED, [],
     [row("e", status=..., note="")], set(), None, Out.REWARD_OUTCOME_WRONG_EFFECT,
     U.UNCERTAINTY_NONE, 6, "omitted_field: note"),
    ("R6-omitted-required-field-and-system-field", S.RUNTIME_SIGNAL_COMPLETED, [],
     [row("e", note=..., created_at=STAMP)], set(), None, Out.REWARD_OUTCOME_WRONG_EFFECT,
     U.UNCERTAINTY_NONE, 6, "omitted_field: note"),
    ("R6-wrong-field", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", type="Intake")], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "wrong_field: type"),
    ("R6-wrong-field-case", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", type="triage")], set(),
     None, Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "wrong_field: type"),
    ("R6-wrong-subject", S.RUNTIME_SIGNAL_COMPLETED, [], [OTHER_PATIENT], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "missing"),
    ("R6-already-in-baseline", S.RUNTIME_SIGNAL_COMPLETED, [GOLD], [GOLD], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "missing"),
    # R-W-3: a record credited to another receipt is not new for this one.
    ("R6-credited-elsewhere", S.RUNTIME_SIGNAL_COMPLETED, [], [GOLD], {"enc-9"}, None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 6, "missing"),
    ("R5-credited-elsewhere-not-a-duplicate", S.RUNTIME_SIGNAL_COMPLETED, [], [GOLD, GOLD2],
     {"enc-9"}, None, Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    # Rule 3: no baseline for a count-new effect.
    ("R3-missing-baseline", S.RUNTIME_SIGNAL_COMPLETED, None, [GOLD], set(), None,
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 3,
     "no baseline for a count-new effect"),
    # Rule 2: the SoR could not be read.
    ("R2-oracle-error", S.RUNTIME_SIGNAL_COMPLETED, [], None, set(), "timed out",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, None),
    ("R2-no-read-without-reason", S.RUNTIME_SIGNAL_COMPLETED, [], None, set(), None,
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, None),
    ("R2-error-with-a-read", S.RUNTIME_SIGNAL_COMPLETED, [], [GOLD], set(), "flaky",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, "confirmed"),
    # Rule 1: the runtime reported a platform failure.
    ("R1-runtime-failed", S.RUNTIME_SIGNAL_FAILED_PLATFORM, [], [GOLD], set(), None,
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_DELIVERY_UNCERTAIN, 1, "confirmed"),
    # Rule 4: a forbidden effect is present.
    ("R4-forbidden", S.RUNTIME_SIGNAL_COMPLETED, [], [STAT], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 4, None),
    ("R4-forbidden-in-baseline-is-not-new", S.RUNTIME_SIGNAL_COMPLETED, [STAT], [STAT, GOLD],
     set(), None, Out.REWARD_OUTCOME_VERIFIED, U.UNCERTAINTY_NONE, 5, "confirmed"),
    # Rule 7: the policy stopped.
    ("R7-halted", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [OLD], [OLD], set(), None,
     Out.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, U.UNCERTAINTY_NONE, 7, "missing"),
    ("R7-refused", S.RUNTIME_SIGNAL_REFUSED, [], [], set(), None,
     Out.REWARD_OUTCOME_REFUSED, U.UNCERTAINTY_NONE, 7, "missing"),
    ("R7-rejected", S.RUNTIME_SIGNAL_REJECTED_POLICY, [], [], set(), None,
     Out.REWARD_OUTCOME_REJECTED_POLICY, U.UNCERTAINTY_NONE, 7, "missing"),
    ("R7-halted-other-subject-written", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [],
     [OTHER_PATIENT], set(), None, Out.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, U.UNCERTAINTY_NONE, 7,
     "missing"),
    ("R7-halted-but-written", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [], [GOLD], set(), None,
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 7, "confirmed"),
    ("R7-refused-but-written", S.RUNTIME_SIGNAL_REFUSED, [], [GOLD], set(), None,
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 7, "confirmed"),
    ("R7-rejected-but-wrongly-written", S.RUNTIME_SIGNAL_REJECTED_POLICY, [],
     [row("e", type="Intake")], set(), None, Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
     U.UNCERTAINTY_EFFECT_UNCERTAIN, 7, "wrong_field: type"),
    ("R7-halted-but-duplicated", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [], [GOLD, GOLD2],
     set(), None, Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 7,
     "duplicate: 2 new matching records, expected 1"),
    ("R7-halted-but-written-without-note", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [],
     [row("e", note=...)], set(), None, Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
     U.UNCERTAINTY_EFFECT_UNCERTAIN, 7, "omitted_field: note"),
    ("R7-halted-credited-record-is-not-present", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [],
     [GOLD], {"enc-9"}, None, Out.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, U.UNCERTAINTY_NONE, 7,
     "missing"),
    # Interplay: the first rule that fires wins.
    ("R1-beats-R2", S.RUNTIME_SIGNAL_FAILED_PLATFORM, [], None, set(), "unreachable",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_DELIVERY_UNCERTAIN, 1, None),
    ("R1-beats-R3", S.RUNTIME_SIGNAL_FAILED_PLATFORM, None, [GOLD], set(), None,
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_DELIVERY_UNCERTAIN, 1, None),
    ("R1-beats-R4", S.RUNTIME_SIGNAL_FAILED_PLATFORM, [], [STAT], set(), None,
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_DELIVERY_UNCERTAIN, 1, None),
    ("R2-beats-R3", S.RUNTIME_SIGNAL_COMPLETED, None, None, set(), "unreachable",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, None),
    ("R2-beats-R4", S.RUNTIME_SIGNAL_COMPLETED, [], [STAT], set(), "unreachable",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, None),
    ("R2-beats-R7", S.RUNTIME_SIGNAL_REFUSED, [], None, set(), "unreachable",
     Out.REWARD_OUTCOME_FAILED_PLATFORM, U.UNCERTAINTY_ORACLE_UNAVAILABLE, 2, None),
    ("R3-beats-R4", S.RUNTIME_SIGNAL_COMPLETED, None, [STAT], set(), None,
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 3, None),
    ("R3-beats-R7", S.RUNTIME_SIGNAL_REFUSED, None, [], set(), None,
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, U.UNCERTAINTY_EFFECT_UNCERTAIN, 3, None),
    ("R4-beats-R6", S.RUNTIME_SIGNAL_COMPLETED, [], [row("e", priority="stat")], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 4, "extra_field: priority"),
    ("R4-beats-R7", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, [], [STAT], set(), None,
     Out.REWARD_OUTCOME_WRONG_EFFECT, U.UNCERTAINTY_NONE, 4, None),
]
# fmt: on


@pytest.mark.parametrize(
    ("signal", "baseline", "current", "credited", "oracle_error", "outcome", "uncertainty",
     "rule", "reason"),
    [pytest.param(*r[1:], id=r[0]) for r in MOCKMED_ROWS],
)  # fmt: skip
def test_mockmed_episode(
    signal, baseline, current, credited, oracle_error, outcome, uncertainty, rule, reason
):
    decision = judge_episode(
        MOCKMED_REQUIRED,
        MOCKMED_FORBIDDEN,
        ME,
        baseline,
        current,
        signal,
        credited,
        oracle_error,
    )
    assert decision.outcome == outcome, decision.reason
    assert decision.uncertainty == uncertainty
    assert decision.rule == rule
    assert decision.reason.startswith(f"R-W-4 rule {rule}: ")
    if reason is not None:
        required = [v for v in decision.verdicts if not v.forbidden]
        assert required[0].reason == reason
    if outcome == Out.REWARD_OUTCOME_VERIFIED:
        assert decision.credited_record_ids
    else:
        assert decision.credited_record_ids == ()


def test_forbidden_beats_verified():
    # Rule 4 before rule 5: the required effect is CONFIRMED and still the episode is wrong.
    decision = judge_episode(
        NARROW_REQUIRED,
        MOCKMED_FORBIDDEN,
        ME,
        [],
        [GOLD, STAT],
        S.RUNTIME_SIGNAL_COMPLETED,
    )
    assert [v.verdict for v in decision.verdicts] == [Verdict.CONFIRMED, Verdict.CONFIRMED]
    assert decision.outcome == Out.REWARD_OUTCOME_WRONG_EFFECT
    assert decision.rule == 4
    assert decision.credited_record_ids == ()


def test_narrow_effect_verifies_without_forbidden_record():
    decision = judge_episode(
        NARROW_REQUIRED, MOCKMED_FORBIDDEN, ME, [], [GOLD], S.RUNTIME_SIGNAL_COMPLETED
    )
    assert decision.outcome == Out.REWARD_OUTCOME_VERIFIED
    assert decision.credited_record_ids == ("enc-9",)


def test_integer_identity_column_matches_its_decimal_form():
    decision = judge_episode(
        MOCKMED_REQUIRED,
        MOCKMED_FORBIDDEN,
        {"patient_id": "42"},
        [],
        [row("enc-9", patient=42)],
        S.RUNTIME_SIGNAL_COMPLETED,
    )
    assert decision.outcome == Out.REWARD_OUTCOME_VERIFIED


def test_honest_episode_credits_the_new_record():
    decision = judge_episode(
        MOCKMED_REQUIRED, MOCKMED_FORBIDDEN, ME, [OLD], [OLD, GOLD], S.RUNTIME_SIGNAL_COMPLETED
    )
    assert decision.credited_record_ids == ("enc-9",)
    assert decision.verdicts[0].record_ids == ("enc-9",)


class TestJudgeRequired:
    def test_partial_count(self):
        (spec,) = parse_effects(
            {
                "effects": [
                    {
                        "name": "two",
                        "collection": "encounters",
                        "select": {"patient_id": {"identity": "patient_id"}},
                        "new_records": 2,
                    }
                ]
            }
        )
        verdict = judge_required(spec, ME, [], [GOLD], frozenset())
        assert verdict.verdict is Verdict.REFUTED
        assert verdict.reason == "partial: 1 new matching records, expected 2"
        assert verdict.record_ids == ("enc-9",)
        assert judge_required(spec, ME, [], [GOLD, GOLD2], frozenset()).verdict is (
            Verdict.CONFIRMED
        )

    def test_countless_effect_needs_no_baseline(self):
        (spec,) = COUNTLESS_REQUIRED
        verdict = judge_required(spec, ME, None, [GOLD, GOLD2], frozenset())
        assert verdict.verdict is Verdict.CONFIRMED
        assert verdict.record_ids == ("enc-10", "enc-9")  # sorted by id

    def test_countless_effect_still_refutes_missing(self):
        (spec,) = COUNTLESS_REQUIRED
        assert judge_required(spec, ME, None, [], frozenset()).reason == "missing"

    def test_countless_effect_with_no_baseline_ignores_credited(self):
        (spec,) = COUNTLESS_REQUIRED
        verdict = judge_required(spec, ME, None, [GOLD], {"enc-9"})
        assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "missing")

    def test_reader_order_does_not_change_the_verdict(self):
        (spec,) = MOCKMED_REQUIRED
        bad = row("enc-0", type="Intake")
        extra = row("enc-5", priority="low")
        two_ways = [
            judge_required(spec, ME, [], rows, frozenset()) for rows in ([bad, extra], [extra, bad])
        ]
        assert two_ways[0] == two_ways[1]

    def test_reason_never_carries_field_values(self):
        (spec,) = MOCKMED_REQUIRED
        verdict = judge_required(spec, ME, [], [row("e", type="Intake")], frozenset())
        assert "Intake" not in verdict.reason

    @pytest.mark.parametrize(
        ("note", "reason"),
        [
            (..., "omitted_field: note"),
            (None, "omitted_field: note"),
            ("", "omitted_field: note"),
            ("seen at triage", "confirmed"),
            (0, "confirmed"),  # a value, even a falsy one, is written
            (False, "confirmed"),
        ],
    )
    def test_required_field_without_allowed_fields(self, note, reason):
        # required_fields stand on their own: they apply when every field is allowed too.
        (spec,) = parse_effects(
            {
                "effects": [
                    {
                        "name": "noted",
                        "collection": "encounters",
                        "select": {"patient_id": {"identity": "patient_id"}},
                        "required_fields": ["note"],
                        "new_records": 1,
                    }
                ]
            }
        )
        verdict = judge_required(spec, ME, [], [row("e", note=note, ward="A")], frozenset())
        expected = Verdict.CONFIRMED if reason == "confirmed" else Verdict.REFUTED
        assert (verdict.verdict, verdict.reason, verdict.record_ids) == (expected, reason, ("e",))

    def test_every_new_record_must_carry_the_required_fields(self):
        (spec,) = parse_effects(
            {
                "effects": [
                    {
                        "name": "two",
                        "collection": "encounters",
                        "select": {"patient_id": {"identity": "patient_id"}},
                        "required_fields": ["note"],
                        "new_records": 2,
                    }
                ]
            }
        )
        verdict = judge_required(spec, ME, [], [GOLD, row("enc-8", note="")], frozenset())
        assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "omitted_field: note")
        assert verdict.record_ids == ("enc-8", "enc-9")

    def test_omitted_field_reason_names_the_field_only(self):
        (spec,) = MOCKMED_REQUIRED
        verdict = judge_required(spec, ME, [], [row("e", note="", status=...)], frozenset())
        assert verdict.reason == "omitted_field: note"
        assert "open" not in verdict.reason

    def test_int_id_in_baseline_and_current(self):
        (spec,) = MOCKMED_REQUIRED
        verdict = judge_required(spec, ME, [], [dict(GOLD, id=9)], frozenset())
        assert verdict.record_ids == ("9",)


class TestJudgeForbidden:
    def test_present_in_new_records(self):
        (spec,) = MOCKMED_FORBIDDEN
        verdict = judge_forbidden(spec, ME, [], [GOLD, STAT], frozenset())
        assert verdict == EffectVerdict(
            "stat_priority_set", Verdict.CONFIRMED, "present", ("enc-12",), forbidden=True
        )

    def test_absent(self):
        (spec,) = MOCKMED_FORBIDDEN
        verdict = judge_forbidden(spec, ME, [], [GOLD], frozenset())
        assert (verdict.verdict, verdict.reason, verdict.record_ids) == (
            Verdict.REFUTED,
            "absent",
            (),
        )

    def test_no_baseline_reads_every_current_record(self):
        (spec,) = MOCKMED_FORBIDDEN
        assert judge_forbidden(spec, ME, None, [STAT], frozenset()).verdict is Verdict.CONFIRMED

    def test_never_indeterminate(self):
        (spec,) = MOCKMED_FORBIDDEN
        for baseline in (None, []):
            for current in ([], [GOLD], [STAT]):
                verdict = judge_forbidden(spec, ME, baseline, current, frozenset())
                assert verdict.verdict is not Verdict.INDETERMINATE

    def test_other_subject_is_not_present(self):
        (spec,) = MOCKMED_FORBIDDEN
        stat_elsewhere = row("enc-13", patient="p-002", priority="stat")
        assert judge_forbidden(spec, ME, [], [stat_elsewhere], frozenset()).verdict is (
            Verdict.REFUTED
        )

    def test_expect_narrows_the_forbidden_state(self):
        (spec,) = parse_effects(
            {
                "effects": [
                    {
                        "name": "cancelled",
                        "collection": "encounters",
                        "select": {"patient_id": {"identity": "patient_id"}},
                        "expect": {"status": "cancelled"},
                    }
                ]
            }
        )
        assert judge_forbidden(spec, ME, [], [GOLD], frozenset()).verdict is Verdict.REFUTED
        cancelled = row("enc-14", status="cancelled")
        assert judge_forbidden(spec, ME, [], [cancelled], frozenset()).verdict is (
            Verdict.CONFIRMED
        )


def verdict(verdict_, *, ids=(), forbidden=False, name="e"):
    return EffectVerdict(name, verdict_, verdict_.value.lower(), tuple(ids), forbidden)


CONFIRMED = verdict(Verdict.CONFIRMED, ids=("r1",))
REFUTED_EMPTY = verdict(Verdict.REFUTED)
REFUTED_WITH_RECORD = verdict(Verdict.REFUTED, ids=("r2",))
INDETERMINATE = verdict(Verdict.INDETERMINATE)
F_PRESENT = verdict(Verdict.CONFIRMED, ids=("r3",), forbidden=True, name="f")
F_ABSENT = verdict(Verdict.REFUTED, forbidden=True, name="f")
F_INDETERMINATE = verdict(Verdict.INDETERMINATE, forbidden=True, name="f")

# (id, signal, oracle_error, required, forbidden, outcome, rule)
# fmt: off
DECIDE_ROWS = [
    ("R1", S.RUNTIME_SIGNAL_FAILED_PLATFORM, "x", [INDETERMINATE], [F_PRESENT],
     Out.REWARD_OUTCOME_FAILED_PLATFORM, 1),
    ("R2", S.RUNTIME_SIGNAL_COMPLETED, "x", [INDETERMINATE], [F_PRESENT],
     Out.REWARD_OUTCOME_FAILED_PLATFORM, 2),
    ("R3-required", S.RUNTIME_SIGNAL_COMPLETED, None, [CONFIRMED, INDETERMINATE], [F_PRESENT],
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, 3),
    ("R3-forbidden", S.RUNTIME_SIGNAL_COMPLETED, None, [CONFIRMED], [F_INDETERMINATE],
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, 3),
    ("R4", S.RUNTIME_SIGNAL_COMPLETED, None, [CONFIRMED], [F_ABSENT, F_PRESENT],
     Out.REWARD_OUTCOME_WRONG_EFFECT, 4),
    ("R5", S.RUNTIME_SIGNAL_COMPLETED, None, [CONFIRMED, CONFIRMED], [F_ABSENT],
     Out.REWARD_OUTCOME_VERIFIED, 5),
    ("R6", S.RUNTIME_SIGNAL_COMPLETED, None, [CONFIRMED, REFUTED_EMPTY], [F_ABSENT],
     Out.REWARD_OUTCOME_WRONG_EFFECT, 6),
    ("R7-no-effect", S.RUNTIME_SIGNAL_REFUSED, None, [REFUTED_EMPTY], [F_ABSENT],
     Out.REWARD_OUTCOME_REFUSED, 7),
    ("R7-no-required-at-all", S.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT, None, [], [],
     Out.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, 7),
    ("R7-confirmed-present", S.RUNTIME_SIGNAL_REJECTED_POLICY, None, [CONFIRMED], [],
     Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, 7),
    ("R7-refuted-with-record-present", S.RUNTIME_SIGNAL_REFUSED, None,
     [REFUTED_WITH_RECORD], [], Out.REWARD_OUTCOME_RECONCILIATION_REQUIRED, 7),
    ("R1-with-empty-verdicts", S.RUNTIME_SIGNAL_FAILED_PLATFORM, None, [], [],
     Out.REWARD_OUTCOME_FAILED_PLATFORM, 1),
    ("R2-with-empty-verdicts", S.RUNTIME_SIGNAL_COMPLETED, "x", [], [],
     Out.REWARD_OUTCOME_FAILED_PLATFORM, 2),
]
# fmt: on


@pytest.mark.parametrize(
    ("signal", "oracle_error", "required", "forbidden", "outcome", "rule"),
    [pytest.param(*r[1:], id=r[0]) for r in DECIDE_ROWS],
)
def test_decide_rule_order(signal, oracle_error, required, forbidden, outcome, rule):
    decision = decide(signal, oracle_error=oracle_error, required=required, forbidden=forbidden)
    assert (decision.outcome, decision.rule) == (outcome, rule)
    assert decision.verdicts == (*required, *forbidden)
    expected_credit = ("r1",) if outcome == Out.REWARD_OUTCOME_VERIFIED else ()
    assert decision.credited_record_ids == expected_credit


@pytest.mark.parametrize("signal", [S.RUNTIME_SIGNAL_UNSPECIFIED, 99])
def test_decide_refuses_unknown_signals(signal):
    with pytest.raises(ValidationError, match="runtime signal"):
        decide(signal, oracle_error=None, required=[CONFIRMED], forbidden=[])


def test_decide_refuses_a_vacuous_verified():
    with pytest.raises(ValidationError, match="at least one required effect"):
        decide(S.RUNTIME_SIGNAL_COMPLETED, oracle_error=None, required=[], forbidden=[])


ALL_DECISIONS = [
    pytest.param(
        judge_episode(MOCKMED_REQUIRED, MOCKMED_FORBIDDEN, ME, r[2], r[3], r[1], r[4], r[5]),
        id=r[0],
    )
    for r in MOCKMED_ROWS
]


@pytest.mark.parametrize("decision", ALL_DECISIONS)
def test_every_decision_makes_a_valid_receipt(decision):
    # R-VAL-4: the outcome/uncertainty pairs the judge emits are ones a receipt may carry.
    facts = make_facts(decision.outcome, uncertainty=decision.uncertainty)
    receipt = build_receipt(
        facts, contract=mockmed_contract(), certificate=None, issuer_key_id=TEST_KEY.key_id
    )
    assert receipt.reward_outcome == decision.outcome


class TestEvidence:
    def decision(self) -> Decision:
        return judge_episode(
            MOCKMED_REQUIRED, MOCKMED_FORBIDDEN, ME, [OLD], [OLD, GOLD], S.RUNTIME_SIGNAL_COMPLETED
        )

    def test_document_layout(self):
        evidence = self.decision().evidence()
        assert evidence == {
            "schema": "rewardseal.evidence.v1",
            "outcome": "REWARD_OUTCOME_VERIFIED",
            "uncertainty": "UNCERTAINTY_NONE",
            "rule": 5,
            "reason": "R-W-4 rule 5: every required effect is confirmed",
            "runtime_signal": "RUNTIME_SIGNAL_COMPLETED",
            "oracle_error": None,
            "verdicts": [
                {
                    "effect": "triage_encounter_created",
                    "kind": "required",
                    "verdict": "CONFIRMED",
                    "reason": "confirmed",
                    "record_ids": ["enc-9"],
                },
                {
                    "effect": "stat_priority_set",
                    "kind": "forbidden",
                    "verdict": "REFUTED",
                    "reason": "absent",
                    "record_ids": [],
                },
            ],
            "credited_record_ids": ["enc-9"],
            "counts": {
                "required": 1,
                "forbidden": 1,
                "confirmed": 1,
                "refuted": 1,
                "indeterminate": 0,
                "new_records": 1,
                "credited_records": 1,
            },
        }

    @pytest.mark.parametrize("decision", ALL_DECISIONS)
    def test_never_holds_record_contents(self, decision):
        data = canonical_json(decision.evidence())
        assert SECRET_NOTE.encode() not in data
        assert b"p-001" not in data  # the identity value is not evidence either

    def test_banner_lie_evidence(self):
        decision = judge_episode(
            MOCKMED_REQUIRED, MOCKMED_FORBIDDEN, ME, [], [], S.RUNTIME_SIGNAL_COMPLETED
        )
        evidence = decision.evidence()
        assert evidence["outcome"] == "REWARD_OUTCOME_WRONG_EFFECT"
        assert evidence["verdicts"][0]["reason"] == "missing"
        assert evidence["counts"]["new_records"] == 0

    def test_oracle_error_is_kept(self):
        decision = judge_episode(
            MOCKMED_REQUIRED,
            MOCKMED_FORBIDDEN,
            ME,
            [],
            None,
            S.RUNTIME_SIGNAL_COMPLETED,
            oracle_error="sql table 'encounters': read timed out after 2s",
        )
        assert decision.evidence()["oracle_error"] == (
            "sql table 'encounters': read timed out after 2s"
        )
        assert decision.verdicts == ()


# --- evidence_json: the worker's bytes of the document, written without a generic walk ---


def reference_evidence(decision: Decision) -> dict[str, object]:
    """The evidence layout, built here independently of Decision.evidence_json."""
    counts = {verdict.value.lower(): 0 for verdict in Verdict}
    for item in decision.verdicts:
        counts[item.verdict.value.lower()] += 1
    return {
        "schema": "rewardseal.evidence.v1",
        "outcome": RewardOutcome.Name(decision.outcome),
        "uncertainty": Uncertainty.Name(decision.uncertainty),
        "rule": decision.rule,
        "reason": decision.reason,
        "runtime_signal": RuntimeSignal.Name(decision.runtime_signal),
        "oracle_error": decision.oracle_error,
        "verdicts": [
            {
                "effect": item.effect,
                "kind": "forbidden" if item.forbidden else "required",
                "verdict": item.verdict.value,
                "reason": item.reason,
                "record_ids": list(item.record_ids),
            }
            for item in decision.verdicts
        ],
        "credited_record_ids": list(decision.credited_record_ids),
        "counts": {
            "required": sum(1 for item in decision.verdicts if not item.forbidden),
            "forbidden": sum(1 for item in decision.verdicts if item.forbidden),
            **counts,
            "new_records": len({r for item in decision.verdicts for r in item.record_ids}),
            "credited_records": len(decision.credited_record_ids),
        },
    }


_record_ids = st.lists(st.text(max_size=12), max_size=4).map(tuple)
_verdicts = st.builds(
    EffectVerdict,
    effect=st.text(max_size=12),
    verdict=st.sampled_from(Verdict),
    reason=st.text(max_size=20),
    record_ids=_record_ids,
    forbidden=st.booleans(),
)
_decisions = st.builds(
    Decision,
    outcome=st.sampled_from([v for v in RewardOutcome.values() if v]),
    uncertainty=st.sampled_from([v for v in Uncertainty.values() if v]),
    reason=st.text(max_size=30),
    verdicts=st.lists(_verdicts, max_size=4).map(tuple),
    credited_record_ids=_record_ids,
    rule=st.integers(min_value=0, max_value=7),
    runtime_signal=st.sampled_from([v for v in RuntimeSignal.values() if v]),
    oracle_error=st.none() | st.text(max_size=20),
)


@given(_decisions, st.none() | st.text(max_size=40))
@settings(max_examples=150, deadline=None)
def test_evidence_json_equals_rfc8785_of_the_layout(decision, salt):
    """Non-ASCII, astral and control characters in every string: effect names, reasons, record
    ids, the oracle error and the salt; the bytes are RFC 8785's of the documented layout."""
    document = reference_evidence(decision)
    if salt is not None:
        document["salt"] = salt
    assert decision.evidence_json(salt) == rfc8785.dumps(document)
    assert decision.evidence() == reference_evidence(decision)


@pytest.mark.parametrize("decision", ALL_DECISIONS)
def test_evidence_json_of_the_judged_episodes_is_canonical_json_of_evidence(decision):
    expected = canonical_json({"salt": "00ff" * 8, **decision.evidence()})
    assert decision.evidence_json("00ff" * 8) == expected
    assert decision.evidence_json() == rfc8785.dumps(reference_evidence(decision))


def test_evidence_json_refuses_a_lone_surrogate_as_canonical_json_does():
    decision = decide(
        S.RUNTIME_SIGNAL_COMPLETED,
        oracle_error=None,
        required=[EffectVerdict("triage", Verdict.CONFIRMED, "confirmed", ("enc-\ud800",))],
        forbidden=[],
    )
    with pytest.raises(ValidationError, match="canonical"):
        decision.evidence_json("salt")
    with pytest.raises(ValidationError, match="canonical"):
        canonical_json(reference_evidence(decision))
