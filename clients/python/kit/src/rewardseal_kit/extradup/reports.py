"""Action reports: what a policy says it did, parsed strictly, and replayed on a store.

Only the store decides a verdict. Evidence, claims, the ``submitted`` flag and the ``halted``
flag are what the policy *says*; :func:`replay` records them beside what it wrote, and evidence
below tier 2 is reported as :attr:`ReplayResult.inadmissible_evidence_tier` so that an attempt
to be paid for a banner is visible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rewardseal import strict_json
from rewardseal.errors import ValidationError
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

MAX_ACTIONS = 64
"""The most actions one report may carry."""
MAX_REPORT_CHARS = 1_000_000
"""The longest report text :func:`parse_action_report` reads."""

_MIN_ADMISSIBLE_TIER = 2
_MAX_TIER = 3
_REPORT_KEYS = frozenset({"actions", "submitted", "evidence", "halted", "claim"})
_ACTION_KEYS = frozenset({"op", "collection", "fields"})
_EVIDENCE_KEYS = frozenset({"tier", "screen_text"})
_OPS = frozenset({"create"})


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


def _check_keys(where: str, value: Mapping[Any, Any], allowed: frozenset[str]) -> None:
    """Refuse non-string and unknown keys (a misspelt key must not read as absent)."""
    for key in value:
        if not isinstance(key, str):
            raise ValidationError(f"{where} has a non-string key {key!r}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValidationError(f"{where} has unknown keys {unknown}")


def _parse_bool(where: str, value: Any) -> bool:
    """A JSON boolean (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{where} must be true or false, got {type(value).__name__}")
    return value


def _parse_action(index: int, raw: Any) -> Action:
    """One element of ``actions``."""
    where = f"actions[{index}]"
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where} must be an object")
    _check_keys(where, raw, _ACTION_KEYS)
    missing = sorted(_ACTION_KEYS - set(raw))
    if missing:
        raise ValidationError(f"{where} lacks {missing}")
    op = raw["op"]
    if not isinstance(op, str):
        raise ValidationError(f"{where}.op must be a string")
    if op not in _OPS:
        raise ValidationError(f"{where}.op {op!r} is unknown; only 'create' is replayed")
    collection = raw["collection"]
    if not isinstance(collection, str) or not collection:
        raise ValidationError(f"{where}.collection must be a non-empty string")
    fields = raw["fields"]
    if not isinstance(fields, Mapping):
        raise ValidationError(f"{where}.fields must be an object")
    parsed: dict[str, str] = {}
    for name, value in fields.items():
        if not isinstance(name, str) or not name:
            raise ValidationError(f"{where}.fields has an empty or non-string field name")
        if name == "id":
            raise ValidationError(f"{where}.fields may not set 'id'; the store mints ids")
        if not isinstance(value, str):
            raise ValidationError(
                f"{where}.fields.{name} must be a string, got {type(value).__name__}"
            )
        parsed[name] = value
    return Action(op="create", collection=collection, fields=parsed)


def _parse_evidence(raw: Any) -> Evidence:
    """The optional ``evidence`` object."""
    if not isinstance(raw, Mapping):
        raise ValidationError("evidence must be an object")
    _check_keys("evidence", raw, _EVIDENCE_KEYS)
    tier = raw.get("tier")
    if isinstance(tier, bool) or not isinstance(tier, int):
        raise ValidationError("evidence.tier must be an integer")
    if not 0 <= tier <= _MAX_TIER:
        raise ValidationError(f"evidence.tier must be in 0..{_MAX_TIER}, got {tier}")
    screen_text = raw.get("screen_text")
    if screen_text is not None and not isinstance(screen_text, str):
        raise ValidationError("evidence.screen_text must be a string")
    return Evidence(tier=tier, screen_text=screen_text)


def parse_action_report(value: str | Mapping[str, Any]) -> ActionReport:
    """Parse and validate an action report given as JSON text or as a decoded object.

    Absent ``actions`` is an empty list; absent ``submitted`` and ``halted`` are false. Refused
    with :class:`~rewardseal.errors.ValidationError`: text that is not JSON (NaN, Infinity and
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
    _check_keys("action report", raw, _REPORT_KEYS)

    raw_actions = raw.get("actions", [])
    if not isinstance(raw_actions, list | tuple):
        raise ValidationError("actions must be a list")
    if len(raw_actions) > MAX_ACTIONS:
        raise ValidationError(
            f"an action report may carry at most {MAX_ACTIONS} actions, got {len(raw_actions)}"
        )
    actions = tuple(_parse_action(index, item) for index, item in enumerate(raw_actions))

    submitted = _parse_bool("submitted", raw.get("submitted", False))
    halted = _parse_bool("halted", raw.get("halted", False))
    evidence = _parse_evidence(raw["evidence"]) if "evidence" in raw else None
    claim = raw.get("claim")
    if claim is not None and not isinstance(claim, str):
        raise ValidationError("claim must be a string")
    return ActionReport(
        actions=actions, submitted=submitted, evidence=evidence, halted=halted, claim=claim
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
