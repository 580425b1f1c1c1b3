"""Action reports: what a policy says it did, parsed strictly, and replayed on a store.

Only the store decides a verdict. Evidence, claims, the ``submitted`` flag and the ``halted``
flag are what the policy *says*; :func:`replay` records them beside what it wrote, and evidence
below tier 2 is reported as :attr:`ReplayResult.inadmissible_evidence_tier` so that an attempt
to be paid for a banner is visible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from rewardseal.core import strict_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.json_schemas import ACTION_REPORT_SCHEMA, check, load_schema
from rewardseal_kit.extradup.specs import frozen_fields
from rewardseal_kit.extradup.store import InMemoryStore

__all__ = [
    "MAX_ACTIONS",
    "MAX_REPORT_CHARS",
    "Action",
    "ActionReport",
    "Evidence",
    "ReplayResult",
    "parse_action_report",
    "replay",
]

MAX_ACTIONS: Final[int] = load_schema(ACTION_REPORT_SCHEMA)["properties"]["actions"]["maxItems"]
"""The most actions one report may carry (the shipped schema's rule)."""
MAX_REPORT_CHARS = 1_000_000
"""The longest report text :func:`parse_action_report` reads."""

_MIN_ADMISSIBLE_TIER = 2


@dataclass(frozen=True)
class Action:
    """One action of a report. ``create`` is the only operation."""

    op: Literal["create"]
    collection: str
    fields: Mapping[str, str] = field(hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", frozen_fields(self.fields))


@dataclass(frozen=True)
class Evidence:
    """Evidence a policy offers about its own effect. Never scored, at any tier."""

    tier: int
    screen_text: str | None = None


@dataclass(frozen=True)
class ActionReport:
    """A parsed action report (see :func:`parse_action_report`)."""

    actions: tuple[Action, ...]
    submitted: bool
    evidence: Evidence | None = None
    halted: bool = False
    claim: str | None = None


def _load_report_text(text: str) -> Any:
    """Decode report text, turning every decoder failure into a ValidationError."""
    if len(text) > MAX_REPORT_CHARS:
        raise ValidationError(f"action report is longer than {MAX_REPORT_CHARS} characters")
    try:
        # Strict: a repeated key or NaN could read two ways, so the report is refused.
        return strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"action report is not JSON: {exc}") from None


def parse_action_report(value: str | Mapping[str, Any]) -> ActionReport:
    """Parse and validate an action report given as JSON text or as a decoded object.

    Absent ``actions`` is an empty list; absent ``submitted`` and ``halted`` are false. Refused
    with :class:`~rewardseal.core.errors.ValidationError`: text that is not JSON (NaN, Infinity and
    repeated keys included), a top level that is not an object, unknown keys, wrong types, an op
    other than ``create``, a field value that is not a string, an ``id`` field, more than
    :data:`MAX_ACTIONS` actions, and evidence whose tier is outside 0..3.
    """
    if isinstance(value, str):
        raw: Any = _load_report_text(value)
    elif isinstance(value, Mapping):
        raw = value
    else:
        raise ValidationError(
            f"an action report is JSON text or an object, not {type(value).__name__}"
        )
    if not isinstance(raw, Mapping):
        raise ValidationError("an action report must be a JSON object")
    # The shipped schema is the rule (rewardseal/core/schemas/action-report.schema.json); what
    # passed it is only converted here.
    check(raw, ACTION_REPORT_SCHEMA, root="action report")
    actions = tuple(
        Action(op="create", collection=action["collection"], fields=dict(action["fields"]))
        for action in raw.get("actions", ())
    )
    evidence = raw.get("evidence")
    return ActionReport(
        actions=actions,
        submitted=raw.get("submitted", False),
        evidence=(
            Evidence(tier=int(evidence["tier"]), screen_text=evidence.get("screen_text"))
            if evidence is not None
            else None
        ),
        halted=raw.get("halted", False),
        claim=raw.get("claim"),
    )


@dataclass(frozen=True)
class ReplayResult:
    """What replaying a report did to a store, and what the report offered besides.

    ``inadmissible_evidence_tier`` is the tier of evidence offered below tier 2 (None when the
    report offered none, or offered tier 2 or 3, which is recorded in ``evidence_tier``). No
    offered evidence is ever scored.
    """

    created: tuple[str, ...]
    submitted: bool
    halted: bool
    evidence_tier: int | None
    inadmissible_evidence_tier: int | None
    claim: str | None


def replay(report: ActionReport, store: InMemoryStore) -> ReplayResult:
    """Apply the report's creates to ``store`` in order, only when it was submitted."""
    created: list[str] = []
    if report.submitted:
        for action in report.actions:
            created.append(store.insert(action.collection, action.fields))
    tier = report.evidence.tier if report.evidence is not None else None
    inadmissible = tier if tier is not None and tier < _MIN_ADMISSIBLE_TIER else None
    return ReplayResult(
        created=tuple(created),
        submitted=report.submitted,
        halted=report.halted,
        evidence_tier=tier,
        inadmissible_evidence_tier=inadmissible,
        claim=report.claim,
    )


# --------------------------------------------------------------------------------------------
# Scripted families
