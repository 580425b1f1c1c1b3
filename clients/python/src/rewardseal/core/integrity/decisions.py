"""Integrity decisions as plain types (R-I-7) and reviewed supersession (R-I-8).

A :class:`Decision` is an audit's automatic outcome and action; a :class:`DecisionEntry` is one
entry of an audit's decision history, which is append-only: a review (:class:`Review`,
:func:`review_decision`) appends an entry that supersedes the current one and never edits it.
The gate (:mod:`.gate`) and the wire (:mod:`.messages`) read these; the decision table that
makes a :class:`Decision` from an audit's metrics (R-I-7) is the control plane's
(:func:`rewardseal_server.integrity_audit.deciding.decide`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, get_args

from rewardseal.core.errors import DecisionSuperseded, ReviewRefused, ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject

__all__ = [
    "ACTIONS",
    "OUTCOMES",
    "REVIEW_ACTIONS",
    "Action",
    "Decision",
    "DecisionEntry",
    "DecisionOutcome",
    "Review",
    "ReviewAction",
    "current_entry",
    "initial_entry",
    "review_decision",
]

DecisionOutcome = Literal["pass", "warn", "fail", "incomplete_evidence"]
Action = Literal["continue", "pause", "stop", "fork"]
ReviewAction = Literal["continue", "stop", "fork", "create_review_proposal"]
OUTCOMES: Final[tuple[str, ...]] = get_args(DecisionOutcome)
ACTIONS: Final[tuple[str, ...]] = get_args(Action)
REVIEW_ACTIONS: Final[tuple[str, ...]] = get_args(ReviewAction)
MAX_REASON_CHARS: Final = 2000


@dataclass(frozen=True, slots=True)
class Decision:
    """The automatic decision of one audit."""

    outcome: DecisionOutcome
    action: Action
    reasons: tuple[str, ...]
    report_only: bool

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {
            "outcome": self.outcome,
            "action": self.action,
            "reasons": list(self.reasons),
            "report_only": self.report_only,
        }

    @classmethod
    def from_json(cls, doc: object) -> Decision:
        """Read a stored decision."""
        data = fields.mapping(doc, "decision")
        fields.no_unknown_keys(data, ("outcome", "action", "reasons", "report_only"), "decision")
        outcome, action = data.get("outcome"), data.get("action")
        reasons = fields.sequence(data, "reasons", "decision")
        if outcome not in OUTCOMES or action not in ("continue", "pause"):
            raise ValidationError("decision: unknown outcome or action")
        if not all(isinstance(reason, str) for reason in reasons):
            raise ValidationError("decision.reasons must be strings")
        return cls(outcome, action, tuple(reasons), fields.boolean(data, "report_only", "decision"))


_ENTRY_KEYS: Final = (
    "sequence",
    "kind",
    "outcome",
    "action",
    "reasons",
    "review_action",
    "review_reason",
    "checkpoint",
    "reviewer",
    "supersedes",
    "at",
)


@dataclass(frozen=True, slots=True)
class DecisionEntry:
    """One entry of an audit's append-only decision history.

    Entry 0 is the automatic decision; each review appends one with ``supersedes`` naming the
    entry it replaced. ``action`` is the run's effective action after this entry; ``outcome``
    stays the audit's outcome (a review changes what happens, not what was measured).
    """

    sequence: int
    kind: Literal["automatic", "reviewed"]
    outcome: DecisionOutcome
    action: Action
    reasons: tuple[str, ...]
    at: str
    review_action: ReviewAction | None = None
    review_reason: str | None = None
    checkpoint: str | None = None
    reviewer: str | None = None
    supersedes: int | None = None

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        doc: JsonObject = {key: getattr(self, key) for key in _ENTRY_KEYS}
        doc["reasons"] = list(self.reasons)
        return doc

    @classmethod
    def from_json(cls, doc: object) -> DecisionEntry:
        """Read a stored entry."""
        where = "decision_entry"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(data, _ENTRY_KEYS, where)
        kind, outcome, action = data.get("kind"), data.get("outcome"), data.get("action")
        review_action = data.get("review_action")
        if (
            kind not in ("automatic", "reviewed")
            or outcome not in OUTCOMES
            or action not in ACTIONS
            or (review_action is not None and review_action not in REVIEW_ACTIONS)
        ):
            raise ValidationError(f"{where}: unknown kind, outcome or action")
        supersedes = data.get("supersedes")
        return cls(
            sequence=fields.integer(data, "sequence", where),
            kind=kind,
            outcome=outcome,
            action=action,
            reasons=tuple(str(r) for r in fields.sequence(data, "reasons", where)),
            at=fields.string(data, "at", where),
            review_action=review_action,
            review_reason=fields.optional_string(data, "review_reason", where),
            checkpoint=fields.optional_string(data, "checkpoint", where),
            reviewer=fields.optional_string(data, "reviewer", where),
            supersedes=None if supersedes is None else fields.integer(data, "supersedes", where),
        )


@dataclass(frozen=True, slots=True)
class Review:
    """A person's review of the current decision (``supersedes`` is its sequence)."""

    action: str
    reason: str
    supersedes: int
    checkpoint: str | None = None
    reviewer: str | None = None

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {
            "action": self.action,
            "reason": self.reason,
            "supersedes": self.supersedes,
            "checkpoint": self.checkpoint,
            "reviewer": self.reviewer,
        }

    @classmethod
    def from_json(cls, doc: object) -> Review:
        """Read a review request (validated by :func:`review_decision`, not here)."""
        where = "review"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(
            data, ("action", "reason", "supersedes", "checkpoint", "reviewer"), where
        )
        return cls(
            action=fields.string(data, "action", where),
            reason=fields.string(data, "reason", where, allow_empty=True),
            supersedes=fields.integer(data, "supersedes", where),
            checkpoint=fields.optional_string(data, "checkpoint", where),
            reviewer=fields.optional_string(data, "reviewer", where),
        )


def initial_entry(decision: Decision, at: datetime) -> DecisionEntry:
    """Entry 0 of a history: the audit's automatic decision, stamped ``at`` (injected)."""
    return DecisionEntry(
        0,
        "automatic",
        decision.outcome,
        decision.action,
        decision.reasons,
        fields.rfc3339(at, "at"),
    )


def current_entry(history: Sequence[DecisionEntry]) -> DecisionEntry:
    """The entry in force: the last one of a well-formed history.

    Raises:
        ValidationError: the history is empty or its sequences are not 0, 1, 2, ... with each
            review superseding its predecessor.
    """
    if not history:
        raise ValidationError("a decision history has at least the automatic decision")
    for index, entry in enumerate(history):
        expected = None if index == 0 else index - 1
        if entry.sequence != index or entry.supersedes != expected:
            raise ValidationError(f"decision history entry {index} is out of sequence")
    return history[-1]


def review_decision(
    history: Sequence[DecisionEntry], review: Review, at: datetime
) -> DecisionEntry:
    """The entry a valid review appends to ``history`` (the caller stores it; nothing is edited).

    ``continue``, ``stop`` and ``fork`` set the run's action; ``create_review_proposal`` opens a
    review and leaves the action as it was (a pause stays a pause).

    Raises:
        ReviewRefused: no reason, an unknown action, a fork without a checkpoint, or a
            checkpoint on another action.
        DecisionSuperseded: ``review.supersedes`` is not the current entry, or the run stopped.
        ValidationError: ``history`` is malformed or ``at`` is naive.
    """
    reason = review.reason.strip()
    if not reason:
        raise ReviewRefused("a review needs a reason")
    if len(reason) > MAX_REASON_CHARS:
        raise ReviewRefused(f"a review reason is at most {MAX_REASON_CHARS} characters")
    if review.action not in REVIEW_ACTIONS:
        raise ReviewRefused(
            f"review action must be one of {', '.join(REVIEW_ACTIONS)}",
            metadata={"action": str(review.action)[:64]},
        )
    if review.action == "fork" and not review.checkpoint:
        raise ReviewRefused("a fork needs the checkpoint it starts from")
    if review.action != "fork" and review.checkpoint is not None:
        raise ReviewRefused("only a fork names a checkpoint")
    current = current_entry(history)
    if review.supersedes != current.sequence:
        raise DecisionSuperseded(
            f"the review names decision {review.supersedes}; the current one is {current.sequence}",
            metadata={"current": str(current.sequence)},
        )
    if current.action == "stop":
        raise DecisionSuperseded("the run was stopped; a stop is final")
    action: Action = current.action
    if review.action in ("continue", "stop", "fork"):
        action = review.action  # type: ignore[assignment]
    return DecisionEntry(
        sequence=current.sequence + 1,
        kind="reviewed",
        outcome=current.outcome,
        action=action,
        reasons=current.reasons,
        at=fields.rfc3339(at, "at"),
        review_action=review.action,  # type: ignore[arg-type]
        review_reason=reason,
        checkpoint=review.checkpoint,
        reviewer=review.reviewer,
        supersedes=current.sequence,
    )
