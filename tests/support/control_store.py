"""Readers and writers of the control store that only tests use (production never calls them).

The service reads what it serves through the aggregates of
:class:`~rewardseal_control.store.ControlStore`; tests also look at single receipts, single
revocations, old revocation lists and the audit log, and append audit rows by hand. Those
helpers live here, over the store's engine and the same tables, checks and conversions the
store uses, so they read exactly what the store wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, ValidationError
from rewardseal.core.validation import validate_id
from rewardseal_control.store import (
    ControlStore,
    RevocationHead,
    StoredReceipt,
    audit_log,
    inputs,
    tables,
)
from rewardseal_control.store.audit_log import MAX_TARGET_LENGTH
from rewardseal_control.store.pagination import Page
from rewardseal_control.store.receipts import read_receipt
from rewardseal_control.store.revocations import read_head


@dataclass(frozen=True)
class RevocationRecord:
    """One revoked certificate; ``list_version`` is the first signed list that carried it."""

    certificate_id: str
    reason: str
    revoked_at: datetime
    list_version: int


@dataclass(frozen=True)
class AuditEntry:
    """One row of the append-only audit log."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


def get_receipt(store: ControlStore, receipt_id: str) -> StoredReceipt:
    """A recorded receipt; ValidationError for a malformed id, NotFound if not recorded."""
    validate_id(receipt_id, "receipt_id")
    stored = store.store_engine.read(lambda conn: read_receipt(conn, receipt_id))
    if stored is None:
        raise NotFound(f"receipt {receipt_id} is not recorded")
    return stored


def get_revocation_list(store: ControlStore, version: int) -> RevocationHead:
    """The signed list of one version (every version ever issued is kept); else NotFound."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValidationError("version must be a positive integer")
    head = store.store_engine.read(lambda conn: read_head(conn, version))
    if head is None:
        raise NotFound(f"revocation list version {version} does not exist")
    return head


def revocation(store: ControlStore, certificate_id: str) -> RevocationRecord | None:
    """The revocation of a certificate, or None if it is not revoked."""
    validate_id(certificate_id, "certificate_id")
    revocations = tables.revocations
    statement = select(revocations).where(revocations.c.certificate_id == certificate_id)
    row = store.store_engine.read(lambda conn: conn.execute(statement).one_or_none())
    if row is None:
        return None
    return RevocationRecord(
        certificate_id=row.certificate_id,
        reason=row.reason,
        revoked_at=row.revoked_at,
        list_version=int(row.list_version),
    )


def audit(
    store: ControlStore,
    actor: str,
    action: str,
    target: str,
    reason: str = "",
    details: Mapping[str, Any] | None = None,
    *,
    at: datetime | None = None,
) -> AuditEntry:
    """Append one audit row in its own transaction, checked as the store checks its own."""
    actor = audit_log.check_actor(actor)
    audit_log.check_action(
        action, "action must be a dotted lowercase name (e.g. certificate.revoke)"
    )
    target = inputs.text(target, "target", max_length=MAX_TARGET_LENGTH)
    reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
    document = dict(details or {})
    audit_log.details_json(document)
    now = inputs.moment(at)

    def work(conn: Connection) -> int:
        return audit_log.write_audit(
            conn,
            actor=actor,
            action=action,
            target=target,
            reason=reason,
            details=document,
            at=now,
        )

    entry_id = store.store_engine.write(work)
    return AuditEntry(
        id=entry_id,
        at=now,
        actor=actor,
        action=action,
        target=target,
        reason=reason,
        details=MappingProxyType(json.loads(audit_log.details_json(document))),
    )


def list_audit(
    store: ControlStore, *, action: str | None = None, page_size: int = 0, page_token: str = ""
) -> Page[AuditEntry]:
    """The audit log in the order written (of one action, when given), its details parsed:
    the store's own reader (``store.audit_log``), as ListAuditLog serves it."""
    page = store.audit_log.list_entries(action or "", page_size, page_token)
    return Page(
        [
            AuditEntry(
                id=entry.id,
                at=entry.at,
                actor=entry.actor,
                action=entry.action,
                target=entry.target,
                reason=entry.reason,
                details=MappingProxyType(json.loads(entry.details)),
            )
            for entry in page.items
        ],
        page.next_page_token,
    )
