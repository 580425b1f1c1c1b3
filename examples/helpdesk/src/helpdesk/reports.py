"""The helpdesk action report: what a policy's completion asks the actor to do on the API.

A report is one JSON object::

    {"actions": [
       {"op": "create_ticket",
        "fields": {"subject": "...", "body": "...", "priority": "high", "channel": "email"}},
       {"op": "update_ticket", "ticket_id": "tkt-00001-billing-0",
        "fields": {"status": "closed", "resolution": "superseded"}}],
     "claim": "Filed the ticket and closed the previous one.",
     "halted": false}

``actions`` (default none) run in order; a create's ``customer_id`` and ``queue_id`` default to
the episode's identity. ``claim`` is what the policy says it did: it is never read by the judge
(that is the point of the example). ``halted: true`` ends the run as HALTED_BEFORE_EFFECT after
the actions. Anything else (unknown keys, other ops, non-string field values, more than
:data:`MAX_ACTIONS` actions, repeated keys, NaN) is refused as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rewardseal import strict_json
from rewardseal.errors import ValidationError

__all__ = ["CREATE", "MAX_ACTIONS", "UPDATE", "HelpdeskAction", "HelpdeskReport", "parse_report"]

CREATE: Final = "create_ticket"
UPDATE: Final = "update_ticket"
MAX_ACTIONS: Final = 16
MAX_REPORT_CHARS: Final = 64 * 1024
_REPORT_KEYS: Final = frozenset({"actions", "claim", "halted"})


@dataclass(frozen=True)
class HelpdeskAction:
    """One API call: a create (``ticket_id`` None) or an update of ``ticket_id``."""

    op: str
    fields: Mapping[str, str | None]
    ticket_id: str | None = None


@dataclass(frozen=True)
class HelpdeskReport:
    """A parsed report (see the module docstring)."""

    actions: tuple[HelpdeskAction, ...]
    claim: str | None = None
    halted: bool = False


def _action(index: int, raw: Any) -> HelpdeskAction:
    where = f"actions[{index}]"
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where} must be an object")
    op = raw.get("op")
    keys = {"op", "fields"} | ({"ticket_id"} if op == UPDATE else set())
    if set(raw) != keys:
        raise ValidationError(f"{where} must have exactly the keys {sorted(keys)}")
    if op not in (CREATE, UPDATE):
        raise ValidationError(f"{where}.op must be {CREATE!r} or {UPDATE!r}")
    fields = raw["fields"]
    if not isinstance(fields, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in fields.items()
    ):
        raise ValidationError(f"{where}.fields must map names to strings (or null)")
    ticket_id = raw.get("ticket_id")
    if op == UPDATE and (not isinstance(ticket_id, str) or not ticket_id):
        raise ValidationError(f"{where}.ticket_id must be a non-empty string")
    return HelpdeskAction(op=op, fields=dict(fields), ticket_id=ticket_id)


def parse_report(text: str) -> HelpdeskReport:
    """Parse a completion as a helpdesk action report.

    Raises:
        ValidationError: the text is not a report (see the module docstring).
    """
    if len(text) > MAX_REPORT_CHARS:
        raise ValidationError(f"an action report has at most {MAX_REPORT_CHARS} characters")
    try:
        raw = strict_json.loads(text)
    except (ValueError, RecursionError):
        raise ValidationError("the action report is not JSON") from None
    if not isinstance(raw, Mapping):
        raise ValidationError("an action report must be a JSON object")
    unknown = sorted(set(raw) - _REPORT_KEYS)
    if unknown:
        raise ValidationError(f"the action report has unknown keys {unknown}")
    actions = raw.get("actions", [])
    if not isinstance(actions, list) or len(actions) > MAX_ACTIONS:
        raise ValidationError(f"actions must be a list of at most {MAX_ACTIONS} actions")
    claim = raw.get("claim")
    halted = raw.get("halted", False)
    if claim is not None and not isinstance(claim, str):
        raise ValidationError("claim must be a string")
    if not isinstance(halted, bool):
        raise ValidationError("halted must be true or false")
    return HelpdeskReport(
        actions=tuple(_action(i, item) for i, item in enumerate(actions)),
        claim=claim,
        halted=halted,
    )
