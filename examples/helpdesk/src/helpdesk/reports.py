"""The helpdesk action report: what a policy's completion asks the actor to do on the API.

A report is one JSON object::

    {"actions": [
       {"op": "create_ticket",
        "fields": {"subject": "...", "body": "...", "priority": "high", "channel": "email"}},
       {"op": "update_ticket", "ticket_id": "tkt-00001-billing-0",
        "fields": {"status": "closed", "resolution": "superseded"}}],
     "claim": "Filed the ticket and closed the previous one.",
     "halted": false}

The rule is the JSON Schema shipped beside this module (``helpdesk/schemas/``
:data:`REPORT_SCHEMA`), applied with :func:`rewardseal.core.json_schemas.schema_problems` as the
MockMed action report is: ``actions`` (default none) run in order; a create's ``customer_id``
and ``queue_id`` default to the episode's identity; ``claim`` is what the policy says it did and
is never read by the judge (that is the point of the example); ``halted: true`` ends the run as
HALTED_BEFORE_EFFECT after the actions. Anything else (unknown keys, other ops, non-string field
values, too many actions, and, in the text, repeated keys or NaN) is refused as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rewardseal.core import strict_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.json_schemas import load_schema, schema_problems

__all__ = [
    "CREATE",
    "MAX_ACTIONS",
    "REPORT_SCHEMA",
    "UPDATE",
    "HelpdeskAction",
    "HelpdeskReport",
    "parse_report",
]

REPORT_SCHEMA: Final = "action-report.schema.json"
_PACKAGE: Final = "helpdesk"
CREATE: Final = "create_ticket"
UPDATE: Final = "update_ticket"
MAX_ACTIONS: Final[int] = load_schema(REPORT_SCHEMA, _PACKAGE)["properties"]["actions"]["maxItems"]
MAX_REPORT_CHARS: Final = 64 * 1024


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


def parse_report(text: str) -> HelpdeskReport:
    """Parse a completion as a helpdesk action report.

    Raises:
        ValidationError: the text is not a report; the message names every place and rule it
            breaks, never a value.
    """
    if len(text) > MAX_REPORT_CHARS:
        raise ValidationError(f"an action report has at most {MAX_REPORT_CHARS} characters")
    try:
        raw: Any = strict_json.loads(text)
    except (ValueError, RecursionError):
        raise ValidationError("the action report is not JSON") from None
    problems = schema_problems(raw, REPORT_SCHEMA, root="action report", package=_PACKAGE)
    if problems:
        raise ValidationError("; ".join(problems))
    return HelpdeskReport(
        actions=tuple(
            HelpdeskAction(op=a["op"], fields=dict(a["fields"]), ticket_id=a.get("ticket_id"))
            for a in raw.get("actions", [])
        ),
        claim=raw.get("claim"),
        halted=raw.get("halted", False),
    )
