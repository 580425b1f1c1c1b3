"""The run's gate as one pure rule (docs/spec.md R-I-10): the decision in force for each
boundary, a reviewed decision over an automatic one, a stop final, an earlier halted boundary
never cleared by a later continue, and never simply the newest audit of the run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rewardseal.core.integrity import AuditStanding, DecisionEntry, run_gate
from rewardseal.core.integrity.decisions import Action
from rewardseal.core.integrity.fields import rfc3339

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _entry(action: Action, *, reviewed: bool = False, minute: int = 0) -> DecisionEntry:
    at = rfc3339(T0 + timedelta(minutes=minute))
    if not reviewed:
        return DecisionEntry(0, "automatic", "fail", action, ("x",), at)
    review = "create_review_proposal" if action == "pause" else action
    return DecisionEntry(
        1,
        "reviewed",
        "fail",
        action,
        ("x",),
        at,
        review_action=review,
        supersedes=0,  # type: ignore[arg-type]
    )


def _done(audit_id: str, boundary: int, entry: DecisionEntry) -> AuditStanding:
    return AuditStanding(audit_id, boundary, "done", entry)


def test_no_audit_decides_nothing_and_the_run_may_go_on() -> None:
    gate = run_gate([])
    assert gate.deciding is None
    assert gate.action is None
    assert gate.proceeds
    pending = run_gate([AuditStanding("a1", 1, "running")])
    assert (pending.deciding, pending.pending) == (None, (1,))


def test_the_newest_audit_never_clears_an_earlier_boundarys_pause() -> None:
    audits = [
        _done("a1", 1, _entry("continue")),
        _done("a2", 2, _entry("pause")),
        _done("a3", 3, _entry("continue")),
    ]
    gate = run_gate(audits)
    assert (gate.action, gate.deciding.boundary if gate.deciding else None) == ("pause", 2)
    assert not gate.proceeds
    assert [b.action for b in gate.boundaries] == ["continue", "pause", "continue"]


def test_a_reviewed_decision_supersedes_the_automatic_one_of_a_retry() -> None:
    reviewed = _done("a1", 1, _entry("continue", reviewed=True, minute=1))
    retried = _done("a1-retry", 1, _entry("pause", minute=2))
    gate = run_gate([reviewed, retried])
    assert (gate.action, gate.deciding.audit_id if gate.deciding else None) == ("continue", "a1")
    # Without a review the newest audit of the boundary (the admin's retry) is in force.
    gate = run_gate([_done("a1", 1, _entry("pause")), _done("a1-retry", 1, _entry("continue"))])
    assert gate.action == "continue"
    # Of two reviews, the later one; at the same instant, the later-started audit's.
    later = _done("a1-retry", 1, _entry("pause", reviewed=True, minute=5))
    assert run_gate([reviewed, later]).action == "pause"
    tie = _done("a1-retry", 1, _entry("fork", reviewed=True, minute=1))
    assert run_gate([reviewed, tie]).action == "fork"


def test_a_stop_is_final_whatever_comes_after() -> None:
    stopped = _done("a2", 2, _entry("stop", reviewed=True, minute=1))
    after = [
        _done("a2-retry", 2, _entry("continue", reviewed=True, minute=9)),
        _done("a3", 3, _entry("continue", minute=3)),
        _done("a1", 1, _entry("continue", reviewed=True, minute=8)),
    ]
    gate = run_gate([stopped, *after])
    assert (gate.action, gate.deciding.audit_id if gate.deciding else None) == ("stop", "a2")
    # A stop beats an earlier boundary's pause too: the run ends.
    assert run_gate([_done("a1", 1, _entry("pause")), stopped]).action == "stop"


def test_an_audit_that_ended_without_a_decision_holds_its_boundary_until_one_is_made() -> None:
    failed = AuditStanding("a1", 1, "failed")
    gate = run_gate([failed, _done("a2", 2, _entry("continue"))])
    assert gate.deciding is not None
    assert (gate.action, gate.deciding.audit_id, gate.deciding.state) == ("pause", "a1", "failed")
    assert gate.deciding.decision is None
    # The admin's retry is queued: the boundary is pending, not paused; once decided, it counts.
    queued = AuditStanding("a1-retry", 1, "queued")
    assert run_gate([failed, queued]).pending == (1,)
    assert run_gate([failed, _done("a1-retry", 1, _entry("continue"))]).action == "continue"
    # A failed retry decides nothing over the boundary's decided audit.
    cancelled = AuditStanding("a1-retry", 1, "cancelled")
    assert run_gate([_done("a1", 1, _entry("continue")), cancelled]).action == "continue"
