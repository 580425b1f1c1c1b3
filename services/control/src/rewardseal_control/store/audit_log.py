"""The append-only audit log of admin actions (docs/spec.md §9).

Every admin action (register or retire an issuer key, record a certificate, revoke) writes
its row with :func:`write_audit` inside the transaction of its change, so the log never says
an action happened that did not, nor misses one that did: who (``actor``: a role or
credential name, never a token), what (``action``), on what (``target``), why (``reason``),
when, and plain-JSON ``details``. Nothing here updates or deletes a row.
:class:`AuditLogStore` reads it back, oldest first, a page at a time (``store.audit_log``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Insert, insert, select
from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal_control.store import tables
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_server.sqlstore import StoreEngine, as_utc

__all__ = [
    "AuditEntry",
    "AuditLogStore",
    "ACTION_ACCEPT_CERTIFICATE",
    "ACTION_ISSUE_CERTIFICATE",
    "ACTION_PATTERN",
    "ACTION_REGISTER_KEY",
    "ACTION_RETIRE_KEY",
    "ACTION_REVOKE_CERTIFICATE",
    "ACTION_REVOKE_CHECKER",
    "ACTION_REVOKE_CONTRACT",
    "ACTOR_PATTERN",
    "MAX_TARGET_LENGTH",
    "check_action",
    "check_actor",
    "details_json",
    "write_audit",
]

ACTOR_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9._:@-]{0,127}\Z")
"""A role or credential name (``admin``, ``admin:alice``); the service never passes a token."""
ACTION_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_.]{0,63}\Z")
MAX_TARGET_LENGTH: Final = 256

ACTION_REGISTER_KEY: Final = "issuer_key.register"
ACTION_RETIRE_KEY: Final = "issuer_key.retire"
ACTION_ISSUE_CERTIFICATE: Final = "certificate.issue"
ACTION_ACCEPT_CERTIFICATE: Final = "certificate.accept"
"""A worker key's own bundle certificate accepted among control's certificates (R-C-11)."""
ACTION_REVOKE_CERTIFICATE: Final = "certificate.revoke"
ACTION_REVOKE_CONTRACT: Final = "certificate.revoke_contract"
"""Every certificate of a contract revoked in one entry (R-C-13)."""
ACTION_REVOKE_CHECKER: Final = "certificate.revoke_checker"
"""Every certificate of a checker configuration revoked in one entry (R-C-13)."""

_INSERT: Final[Insert] = insert(tables.audit).returning(tables.audit.c.id)


def check_actor(actor: str) -> str:
    """``actor`` if it is a role or credential name, else ValidationError."""
    if not isinstance(actor, str) or not ACTOR_PATTERN.match(actor):
        raise ValidationError(
            "actor must be a role or credential name (a letter, then up to 127 of "
            "A-Z a-z 0-9 . _ : @ -), never a token"
        )
    return actor


def check_action(action: str, message: str) -> str:
    """``action`` if it is a dotted lowercase name, else ValidationError(``message``)."""
    if not isinstance(action, str) or not ACTION_PATTERN.match(action):
        raise ValidationError(message)
    return action


def details_json(details: Mapping[str, Any]) -> str:
    """``details`` as canonical JSON (sorted keys, no NaN), or ValidationError."""
    if not isinstance(details, Mapping) or not all(isinstance(k, str) for k in details):
        raise ValidationError("audit details must be a JSON object")
    try:
        return json.dumps(dict(details), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"audit details are not plain JSON: {exc}") from None


def write_audit(
    conn: Connection,
    *,
    actor: str,
    action: str,
    target: str,
    reason: str,
    details: Mapping[str, Any],
    at: datetime,
) -> int:
    """Append one audit row inside the caller's transaction; its id.

    The caller has checked ``actor``, ``target`` and ``reason``; ``details`` must be a JSON
    object of plain values (never a token or record contents).
    """
    row = {
        "at": at,
        "actor": actor,
        "action": action,
        "target": target,
        "reason": reason,
        "details": details_json(details),
    }
    return int(conn.execute(_INSERT, row).scalar_one())


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log as written."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    reason: str
    details: str
    """The JSON object written with it (sorted keys)."""


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=int(row.id),
        at=as_utc(row.at),
        actor=row.actor,
        action=row.action,
        target=row.target,
        reason=row.reason,
        details=row.details,
    )


_LISTING: Final = Listing(kind="audit_log", order=(tables.audit.c.id,), shape=(int,))


class AuditLogStore:
    """Reads the audit log (``store.audit_log``); writes happen in each action's transaction."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def list_entries(
        self, action: str = "", page_size: int = 0, page_token: str = ""
    ) -> Page[AuditEntry]:
        """Entries oldest first (by id: the order the actions committed), only ``action``'s
        when one is given.

        Raises:
            ValidationError: a malformed action name, page size or page token.
        """
        statement = select(tables.audit)
        if action:
            check_action(action, "action must be a dotted lowercase name, e.g. certificate.issue")
            statement = statement.where(tables.audit.c.action == action)
        rows, token = _LISTING.read(
            self._db,
            statement,
            query=fingerprint(action=action),
            page_size=page_size,
            page_token=page_token,
        )
        return Page([_entry(row) for row in rows], token)

    def latest(self, limit: int, *, before: int | None = None) -> list[AuditEntry]:
        """Up to ``limit`` entries (1..500), newest first (the operator console); with
        ``before``, those older than entry ``before`` (the next page starts below the last id
        shown).

        Raises:
            ValidationError: ``limit`` or ``before`` out of range.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
            raise ValidationError("limit must be an integer from 1 to 500")
        audit = tables.audit
        statement = select(audit).order_by(audit.c.id.desc()).limit(limit)
        if before is not None:
            if isinstance(before, bool) or not isinstance(before, int) or before < 1:
                raise ValidationError("before must be a positive entry id")
            statement = statement.where(audit.c.id < before)
        rows = self._db.read(lambda conn: list(conn.execute(statement)), snapshot=True)
        return [_entry(row) for row in rows]
