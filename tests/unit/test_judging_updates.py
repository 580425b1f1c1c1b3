"""Update effects: a required or forbidden change of a record that existed at the baseline.

A status change on another record (the customer's previous ticket closed) is no new record: the
judge reads which baseline records of the subject changed, how, and credits each change once.
"""

from __future__ import annotations

import copy

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import (
    Verdict,
    change_token,
    changed_fields,
    judge_episode,
    judge_forbidden,
    judge_required,
    judge_snapshots,
    parse_effects,
)
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal

IDENTITY = {"customer_id": "c-1", "queue_id": "q-1"}
SELECT = {"customer_id": {"identity": "customer_id"}, "queue_id": {"identity": "queue_id"}}
CLOSE = {
    "name": "previous_ticket_closed",
    "collection": "tickets",
    "change": "update",
    "select": SELECT,
    "before": {"status": "open"},
    "expect": {"status": "closed", "resolution": "superseded"},
    "changed_records": 1,
    "allowed_fields": ["status", "resolution", "updated_at"],
}
TOUCHED = {
    "name": "closed_ticket_touched",
    "collection": "tickets",
    "change": "update",
    "select": SELECT,
    "before": {"status": "closed"},
}
COMPLETED = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED


def spec(doc):
    (parsed,) = parse_effects({"effects": [doc]})
    return parsed


def ticket(rid, status, **fields):
    return {"id": rid, "customer_id": "c-1", "queue_id": "q-1", "status": status, **fields}


BASELINE = [
    ticket("t1", "open", subject="printer", updated_at="09:00"),
    ticket("t2", "closed", subject="login", resolution="fixed", updated_at="08:00"),
]


def closed(record, **extra):
    return {
        **record,
        "status": "closed",
        "resolution": "superseded",
        "updated_at": "10:00",
        **extra,
    }


def test_parses_an_update_effect():
    parsed = spec(CLOSE)
    assert parsed.updates
    assert parsed.before == {"status": "open"}
    assert parsed.changed_records == 1
    assert parsed.new_records is None
    assert not spec({"name": "made", "collection": "tickets", "select": SELECT}).updates


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"change": "rename"}, "change must be one of"),
        ({"change": ["update"]}, "change must be one of"),
        ({"new_records": 1}, "do not apply to change 'update'"),
        ({"expect": {"priority": "low"}}, "not in allowed_fields"),
        ({"before": {"status": None}}, "before.status must be"),
        ({"changed_records": 0}, "changed_records must be an integer"),
    ],
)
def test_refuses_a_malformed_update_effect(change, message):
    with pytest.raises(ValidationError, match=message):
        spec({**CLOSE, **change})


def test_refuses_update_keys_on_a_create_effect():
    create = {"name": "made", "collection": "tickets", "select": SELECT}
    for key, value in (("before", {"status": "open"}), ("changed_records", 1)):
        with pytest.raises(ValidationError, match="do not apply to change 'create'"):
            spec({**create, key: value})


def test_the_requested_change_is_confirmed_and_credited_by_its_token():
    current = [closed(BASELINE[0]), BASELINE[1]]
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset())
    assert verdict.verdict is Verdict.CONFIRMED
    assert verdict.record_ids == (change_token(BASELINE[0]),)
    assert verdict.record_ids[0].startswith("t1@")


def test_nothing_changed_is_missing():
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, BASELINE, frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "missing")


def test_without_a_baseline_an_update_is_indeterminate():
    current = [closed(BASELINE[0])]
    assert judge_required(spec(CLOSE), IDENTITY, None, current, frozenset()).verdict is (
        Verdict.INDETERMINATE
    )
    assert judge_forbidden(spec(TOUCHED), IDENTITY, None, current, frozenset()).verdict is (
        Verdict.INDETERMINATE
    )


def test_a_change_of_another_field_too_is_an_extra_field():
    current = [closed(BASELINE[0], priority="urgent"), BASELINE[1]]
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "extra_field: priority")


def test_an_unchanged_field_outside_allowed_fields_is_no_extra_field():
    # subject and customer_id are not allowed to change, and did not: nothing extra.
    current = [closed(BASELINE[0])]
    assert changed_fields(BASELINE[0], current[0]) == {"status", "resolution", "updated_at"}
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset())
    assert verdict.verdict is Verdict.CONFIRMED


def test_a_change_to_the_wrong_value_is_a_wrong_field():
    current = [{**closed(BASELINE[0]), "resolution": "fixed"}]
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "wrong_field: resolution")


def test_two_changed_records_where_one_is_asked_is_a_duplicate():
    second = ticket("t3", "open", subject="vpn")
    baseline = [*BASELINE, second]
    current = [closed(BASELINE[0]), BASELINE[1], closed(second)]
    verdict = judge_required(spec(CLOSE), IDENTITY, baseline, current, frozenset())
    assert verdict.verdict is Verdict.REFUTED
    assert verdict.reason == "duplicate: 2 new matching records, expected 1"


def test_a_record_that_was_not_open_is_not_the_effects():
    # Closing ticket t2 again (it was closed) is not closing the open ticket.
    current = [BASELINE[0], {**BASELINE[1], "resolution": "superseded", "updated_at": "10:00"}]
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "missing")


def test_another_subjects_change_is_not_the_subjects():
    other = {**ticket("t9", "open"), "queue_id": "q-2"}
    baseline = [*BASELINE, other]
    current = [*BASELINE, closed(other)]
    verdict = judge_required(spec(CLOSE), IDENTITY, baseline, current, frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "missing")


def test_a_vanished_record_is_no_change_for_a_required_effect():
    verdict = judge_required(spec(CLOSE), IDENTITY, BASELINE, [BASELINE[1]], frozenset())
    assert (verdict.verdict, verdict.reason) == (Verdict.REFUTED, "missing")


def test_a_credited_change_never_pays_twice_but_a_later_change_can():
    current = [closed(BASELINE[0]), BASELINE[1]]
    token = change_token(BASELINE[0])
    again = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset({token}))
    assert (again.verdict, again.reason) == (Verdict.REFUTED, "missing")
    # Reopened since, with another version: closing it again is another change.
    reopened = {**BASELINE[0], "updated_at": "11:00"}
    later = judge_required(
        spec(CLOSE), IDENTITY, [reopened, BASELINE[1]], [closed(reopened)], frozenset({token})
    )
    assert later.verdict is Verdict.CONFIRMED
    # A plain record id credited (the ticket an earlier episode created) does not block it.
    plain = judge_required(spec(CLOSE), IDENTITY, BASELINE, current, frozenset({"t1"}))
    assert plain.verdict is Verdict.CONFIRMED


def test_padding_with_null_columns_is_no_change():
    current = [closed(BASELINE[0]), {**BASELINE[1], "priority": None}]
    verdict = judge_forbidden(spec(TOUCHED), IDENTITY, BASELINE, current, frozenset())
    assert verdict.verdict is Verdict.REFUTED


def test_touching_a_closed_record_is_the_forbidden_effect():
    current = [closed(BASELINE[0]), {**BASELINE[1], "updated_at": "10:00"}]
    verdict = judge_forbidden(spec(TOUCHED), IDENTITY, BASELINE, current, frozenset())
    assert verdict.verdict is Verdict.CONFIRMED
    assert verdict.record_ids == (change_token(BASELINE[1]),)


def test_deleting_a_closed_record_is_the_forbidden_effect_without_expect():
    current = [closed(BASELINE[0])]
    verdict = judge_forbidden(spec(TOUCHED), IDENTITY, BASELINE, current, frozenset())
    assert verdict.verdict is Verdict.CONFIRMED
    narrowed = spec({**TOUCHED, "expect": {"status": "open"}})
    assert judge_forbidden(narrowed, IDENTITY, BASELINE, current, frozenset()).verdict is (
        Verdict.REFUTED
    )


def test_the_episode_with_create_and_update_effects_pays_only_when_both_hold():
    create = spec(
        {
            "name": "ticket_created",
            "collection": "tickets",
            "select": SELECT,
            "expect": {"status": "open"},
            "new_records": 1,
        }
    )
    new = ticket("t4", "open")
    good = [closed(BASELINE[0]), BASELINE[1], new]
    decision = judge_episode(
        [create, spec(CLOSE)], [spec(TOUCHED)], IDENTITY, BASELINE, good, COMPLETED
    )
    assert decision.outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert decision.credited_record_ids == tuple(sorted(("t4", change_token(BASELINE[0]))))
    only_created = [*BASELINE, new]
    decision = judge_episode(
        [create, spec(CLOSE)], [spec(TOUCHED)], IDENTITY, BASELINE, only_created, COMPLETED
    )
    assert decision.outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    assert "previous_ticket_closed" in decision.reason


def test_the_snapshot_judge_refuses_an_update_effect():
    with pytest.raises(ValidationError, match="update effect"):
        judge_snapshots(spec(CLOSE), IDENTITY, BASELINE, BASELINE)


def test_the_effect_document_is_not_changed_by_parsing():
    doc = copy.deepcopy(CLOSE)
    spec(doc)
    assert doc == CLOSE
