"""Decisions (R-I-7) over whole audits, and reviewed supersession (R-I-8)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from support.integrity_builders import agreeing_rows, audit, row, sealed, system

from rewardseal.core.errors import DecisionSuperseded, ReviewRefused, ValidationError
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    DecisionEntry,
    RetainedRow,
    Review,
    current_entry,
    initial_entry,
    parse_reward_system,
    review_decision,
)
from rewardseal.core.integrity.profiles import METRIC_NAMES
from rewardseal_server.integrity_audit import audit_boundary
from rewardseal_server.integrity_audit.deciding import threshold_reasons

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HUMAN = BUILTIN_PROFILES["human_aligned_integrity"]


def test_100_agreeing_records_pass_and_continue() -> None:
    report = audit(agreeing_rows(100))
    assert report.decision.outcome == "pass"
    assert report.decision.action == "continue"
    assert report.decision.reasons == ()
    assert report.metrics is not None
    assert report.metrics.pass_agreement == 1.0
    assert report.gating_eligible


def test_an_inverted_sentinel_fails_with_every_failing_metric_as_a_reason() -> None:
    report = audit(agreeing_rows(100, inverted=True))
    assert report.decision.outcome == "fail"
    assert report.decision.action == "pause"
    assert report.metrics is not None
    expected = []
    for metric in METRIC_NAMES:
        threshold, value = HUMAN.threshold(metric), report.metrics.value(metric)
        if threshold is None or value is None:
            continue
        if threshold.minimum is not None and value < threshold.minimum:
            expected.append(f"{metric}_below_minimum")
        if threshold.maximum is not None and value > threshold.maximum:
            expected.append(f"{metric}_above_maximum")
    assert list(report.decision.reasons) == expected
    assert {
        "pass_agreement_below_minimum",
        "optimizer_only_rate_above_maximum",
        "sentinel_only_rate_above_maximum",
        "top_tail_disagreement_above_maximum",
    } <= set(expected)
    assert threshold_reasons(report.metrics, HUMAN) == expected


def test_50_records_are_at_most_a_warning() -> None:
    report = audit(agreeing_rows(50))
    assert report.decision.outcome == "warn"
    assert report.decision.action == "continue"
    assert report.decision.reasons == ("evidence_below_pass_minimum",)
    failing = audit(agreeing_rows(50, inverted=True))
    assert failing.decision.outcome == "fail"  # a warning caps a pass, never hides a fail


def test_10_records_are_incomplete_evidence_with_no_metrics() -> None:
    report = audit(agreeing_rows(10))
    assert report.decision.outcome == "incomplete_evidence"
    assert report.decision.action == "pause"
    assert report.decision.reasons == ("evidence_below_minimum",)
    assert report.metrics is None
    assert report.intervals == {}


def test_records_not_rows_count_as_evidence() -> None:
    rows = [
        row(n, candidate=c, optimizer=1.0, sentinel="accepted") for n in range(15) for c in range(8)
    ]
    report = audit(rows)
    assert report.core_rows == 120
    assert report.decision.outcome == "incomplete_evidence"


def test_an_edited_shard_row_is_incomplete_evidence() -> None:
    reward_system = system()
    retention, _ = sealed(agreeing_rows(100), reward_system)
    rows = list(retention.rows)
    rows[5] = RetainedRow(dataclasses.replace(rows[5].row, optimizer_mapped=0.5), "core")
    report = audit(agreeing_rows(100), reward_system=reward_system, stored=rows)
    assert report.decision.outcome == "incomplete_evidence"
    assert report.decision.reasons == ("shard_unverifiable",)
    assert report.metrics is None


def test_a_stale_runtime_is_incomplete_evidence() -> None:
    stale_rows = [dataclasses.replace(r, runtime_identity="python3.12") for r in agreeing_rows(100)]
    assert audit(stale_rows).decision.reasons == ("runtime_stale",)
    assert audit(agreeing_rows(100), runtime_current=False).decision.reasons == ("runtime_stale",)
    # A system that pins no runtime fingerprint accepts any runtime identity.
    unpinned = system(runtime=None)
    assert audit(stale_rows, reward_system=unpinned).decision.outcome == "pass"


def test_rows_mapped_other_than_the_revision_says_are_incomplete_evidence() -> None:
    rows = [dataclasses.replace(r, optimizer_mapped=0.9) for r in agreeing_rows(100)]
    report = audit(rows)
    assert report.decision.reasons == ("optimizer_mapping_mismatch",)


def test_a_correlated_sentinel_is_audited_for_inspection_only() -> None:
    doc = system().to_json()
    doc["auditors"][0] = {
        "role": "primary_sentinel",
        "kind": "external",
        "fingerprints": {"implementation": "screen-reward-v1"},
    }
    correlated = parse_reward_system(doc)
    report = audit(agreeing_rows(100, inverted=True), reward_system=correlated)
    assert report.decision.outcome == "fail"
    assert report.decision.action == "continue"  # it cannot gate
    assert report.decision.report_only
    assert report.decision.reasons[-1] == "report_only"
    assert "primary_sentinel_correlated" in report.binding_blockers


def test_exploratory_reports_without_pausing() -> None:
    report = audit(agreeing_rows(100, inverted=True), profile=BUILTIN_PROFILES["exploratory"])
    assert (report.decision.outcome, report.decision.action) == ("fail", "continue")


def test_strict_profile_warns_when_an_interval_reaches_past_a_threshold() -> None:
    rows = agreeing_rows(200)
    # 2 optimizer-only rows in 200 (1%): the point is at the strict maximum, the interval above.
    rows[0] = row(0, optimizer=1.0, sentinel="refused")
    rows[2] = row(2, optimizer=1.0, sentinel="refused")
    report = audit(rows, profile=BUILTIN_PROFILES["strict_integrity"])
    assert report.decision.outcome == "warn"
    assert "optimizer_only_rate_interval_crosses_threshold" in report.decision.reasons


def test_the_same_evidence_decides_the_same_way_twice() -> None:
    assert audit(agreeing_rows(120)) == audit(agreeing_rows(120))
    assert audit(agreeing_rows(120)).evidence_digest == audit(agreeing_rows(120)).evidence_digest


def test_a_shard_sealed_under_another_revision_is_incomplete_evidence() -> None:
    reward_system = system()
    retention, manifest = sealed(agreeing_rows(100), reward_system)
    other = system(threshold=0.6)
    report = audit_boundary(
        manifest,
        retention.rows,
        system=other,
        protocol=BUILTIN_PROTOCOLS["exhaustive"],
        profile=HUMAN,
        resamples=100,
    )
    assert report.decision.reasons == ("shard_revision_mismatch",)


# ---------------------------------------------------------------------------------------------
# Reviews: append-only supersession


def paused_history() -> list[DecisionEntry]:
    report = audit(agreeing_rows(100, inverted=True), resamples=100)
    return [initial_entry(report.decision, NOW)]


def test_a_reviewed_continue_supersedes_the_pause_and_both_stay_visible() -> None:
    history = paused_history()
    review = Review("continue", "Reviewed the paired evidence: a labelling bug", supersedes=0)
    entry = review_decision(history, review, NOW + timedelta(minutes=5))
    history.append(entry)
    assert [e.action for e in history] == ["pause", "continue"]
    assert entry.supersedes == 0
    assert entry.outcome == "fail"  # the measurement is not rewritten
    assert entry.at == "2026-03-01T12:05:00.000000Z"
    assert current_entry(history) is entry
    assert DecisionEntry.from_json(entry.to_json()) == entry


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_review_without_a_reason_is_refused(reason: str) -> None:
    with pytest.raises(ReviewRefused, match="reason") as caught:
        review_decision(paused_history(), Review("continue", reason, supersedes=0), NOW)
    assert caught.value.code.name == "INVALID_ARGUMENT"


def test_a_fork_needs_a_checkpoint() -> None:
    with pytest.raises(ReviewRefused, match="checkpoint"):
        review_decision(paused_history(), Review("fork", "roll back", supersedes=0), NOW)
    entry = review_decision(
        paused_history(), Review("fork", "roll back", supersedes=0, checkpoint="ckpt-8"), NOW
    )
    assert (entry.action, entry.checkpoint) == ("fork", "ckpt-8")
    with pytest.raises(ReviewRefused, match="only a fork"):
        review_decision(
            paused_history(), Review("continue", "ok", supersedes=0, checkpoint="ckpt-8"), NOW
        )


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(ReviewRefused, match="action"):
        review_decision(paused_history(), Review("approve", "looks fine", supersedes=0), NOW)


def test_a_review_proposal_leaves_the_pause_in_place() -> None:
    history = paused_history()
    entry = review_decision(history, Review("create_review_proposal", "relabel", 0), NOW)
    assert (entry.review_action, entry.action) == ("create_review_proposal", "pause")


def test_a_review_of_a_superseded_decision_is_refused() -> None:
    history = paused_history()
    history.append(review_decision(history, Review("continue", "checked", 0), NOW))
    with pytest.raises(DecisionSuperseded) as caught:
        review_decision(history, Review("stop", "changed my mind", supersedes=0), NOW)
    assert caught.value.code.name == "FAILED_PRECONDITION"
    history.append(review_decision(history, Review("stop", "changed my mind", 1), NOW))
    with pytest.raises(DecisionSuperseded, match="stopped"):
        review_decision(history, Review("continue", "again", supersedes=2), NOW)


def test_a_malformed_history_or_a_naive_time_is_refused() -> None:
    history = paused_history()
    with pytest.raises(ValidationError):
        current_entry([])
    with pytest.raises(ValidationError, match="sequence"):
        current_entry([*history, dataclasses.replace(history[0], sequence=5)])
    with pytest.raises(ValidationError, match="timezone"):
        review_decision(history, Review("continue", "ok", 0), datetime(2026, 3, 1))
