"""The gate of a run: the decision in force for each boundary, and for the run (R-I-10).

One pure function, :func:`run_gate`, answers what a monitored run may do from its audits (in the
order they were started, each with the decision in force on it). Control (its console and CLI
views) and every trainer-side gate (:class:`~rewardseal.trainers.integrity.monitor.IntegrityMonitor`
and the TRL and verl gates on top of it) call it, so they cannot disagree. The rules:

1. **A stop is final.** If any audit of the run has ``stop`` in force, the run's answer is
   ``stop`` (the earliest boundary's stop), whatever was audited, reviewed or retried after it.
2. **Per boundary, a reviewed decision supersedes an automatic one.** Of a boundary's decided
   audits (the first one and the admin's retries of it), the latest reviewed decision (by the
   time it was made) is in force; without one, the newest audit's automatic decision. An audit
   that ended without a decision (``failed``, ``cancelled``) decides nothing while another
   audit of the boundary is decided; alone, it holds the boundary at ``pause``. A boundary whose
   audits are all still queued or running is *pending*: it decides nothing yet.
3. **A halted boundary holds the run.** The run's answer is the earliest boundary whose
   decision in force is ``pause`` or ``fork``: a later boundary's ``continue`` never clears it
   (only a review or a retry of that boundary does). Otherwise it is ``continue`` (named after
   the latest decided boundary), or no answer at all while nothing is decided.

Never simply the newest audit of the run: a newer audit cannot clear an older boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from rewardseal.core.integrity.decisions import Action, DecisionEntry

__all__ = [
    "UNDECIDED_STATES",
    "AuditStateName",
    "AuditStanding",
    "BoundaryDecision",
    "RunGate",
    "run_gate",
]

UNDECIDED_STATES: Final = frozenset({"failed", "cancelled"})
"""Audit states that ended without a decision: alone, they hold a boundary at ``pause``."""

AuditStateName = Literal["queued", "running", "done", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class AuditStanding:
    """One audit of a run as the gate reads it: ``decision`` is the entry in force on it (the
    last of its history), None unless the audit is ``done``."""

    audit_id: str
    boundary: int
    state: AuditStateName
    decision: DecisionEntry | None = None


@dataclass(frozen=True, slots=True)
class BoundaryDecision:
    """The decision in force for one boundary: ``audit_id`` is the audit it comes from;
    ``decision`` is None when that audit ended without one (``state`` says how: the boundary
    is then at ``pause``)."""

    boundary: int
    action: Action
    audit_id: str
    state: AuditStateName
    decision: DecisionEntry | None


@dataclass(frozen=True, slots=True)
class RunGate:
    """What the run may do: ``deciding`` is the boundary decision that answers (None while no
    boundary is decided); ``boundaries`` every decided boundary in boundary order; ``pending``
    the boundaries whose audits are all still queued or running."""

    deciding: BoundaryDecision | None
    boundaries: tuple[BoundaryDecision, ...]
    pending: tuple[int, ...]

    @property
    def action(self) -> Action | None:
        """The run's action (None while nothing is decided: the run may go on)."""
        return None if self.deciding is None else self.deciding.action

    @property
    def proceeds(self) -> bool:
        """True when training may go on (``continue``, or nothing decided yet)."""
        return self.action in (None, "continue")


def _moment(entry: DecisionEntry) -> datetime:
    return datetime.fromisoformat(entry.at.replace("Z", "+00:00"))


def _boundary_decision(boundary: int, audits: list[AuditStanding]) -> BoundaryDecision | None:
    """Rules 1 and 2 over one boundary's audits (in the order they were started)."""
    decided = [(a, a.decision) for a in audits if a.state == "done" and a.decision is not None]
    stopped = next(((a, e) for a, e in decided if e.action == "stop"), None)
    reviewed = [(i, a, e) for i, (a, e) in enumerate(decided) if e.kind == "reviewed"]
    if stopped is not None:
        audit, entry = stopped  # rule 1: a stop is final
    elif reviewed:
        # The latest review wins; two at the same instant: the later-started audit's.
        _, audit, entry = max(reviewed, key=lambda found: (_moment(found[2]), found[0]))
    elif decided:
        audit, entry = decided[-1]
    else:
        ended = [a for a in audits if a.state in UNDECIDED_STATES]
        if not ended or len(ended) < len(audits):
            return None  # something is still queued or running: pending
        last = ended[-1]
        return BoundaryDecision(boundary, "pause", last.audit_id, last.state, None)
    return BoundaryDecision(boundary, entry.action, audit.audit_id, "done", entry)


def run_gate(audits: Iterable[AuditStanding]) -> RunGate:
    """The run's gate from its audits, in the order they were started (see the module
    docstring for the three rules)."""
    by_boundary: dict[int, list[AuditStanding]] = {}
    for audit in audits:
        by_boundary.setdefault(audit.boundary, []).append(audit)
    decided: list[BoundaryDecision] = []
    pending: list[int] = []
    for boundary in sorted(by_boundary):
        found = _boundary_decision(boundary, by_boundary[boundary])
        if found is None:
            pending.append(boundary)
        else:
            decided.append(found)
    stops = [b for b in decided if b.action == "stop"]
    halted = [b for b in decided if b.action != "continue"]
    answers = stops or halted or decided[-1:]
    deciding = answers[0] if answers else None
    return RunGate(deciding, tuple(decided), tuple(pending))
