"""What each console page shows, read through the control store (blocking: run in a thread).

Nothing here decides a rule of its own: a certificate's state is core's
:func:`~rewardseal.core.certificates.certificate_state` (revocation from the store's join), a key's
activity is the store's :meth:`~rewardseal_control.store.keys.IssuerKeyStore.active_key`, the
receipt counts are the index's summary. A certificate expires on a schedule of policy updates,
never of wall-clock time, so its state is shown at a reference update: the one the operator
asks for, else the newest update the receipt index holds for its contract, else (no receipts
yet) the update it was issued at.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from rewardseal.core.certificates import certificate_state, state_name
from rewardseal.core.integrity.decisions import DecisionEntry
from rewardseal.core.integrity.gate import RunGate, run_gate
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationEntry, RevocationList
from rewardseal.v1.control_service_pb2 import RegisteredContract
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal_control.console.chart import Chart, timeline_chart
from rewardseal_control.store import (
    MAX_PAGE_SIZE,
    ControlStore,
    ReceiptSummary,
    RevocationHead,
    StoredCertificate,
)
from rewardseal_control.store.audit_log import AuditEntry
from rewardseal_control.store.integrity_audits import StoredAudit
from rewardseal_control.store.receipts import ContractActivity

__all__ = [
    "AuditAndHistory",
    "CertificateRow",
    "ContractDetail",
    "ContractRow",
    "KeyRow",
    "RevocationStatus",
    "audit_log",
    "certificate_detail",
    "certificates",
    "contract_detail",
    "contracts",
    "enum_label",
    "integrity_audit",
    "integrity_audits",
    "keys",
    "revocation_status",
]

LIST_SIZE: Final = 100
"""Rows per console page."""


def enum_label(enum: object, value: int, prefix: str) -> str:
    """``REWARD_OUTCOME_WRONG_EFFECT`` -> ``wrong effect`` (the number when unknown)."""
    try:
        name = str(enum.Name(value))  # type: ignore[attr-defined]
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).replace("_", " ").lower()


def outcome_label(outcome: int) -> str:
    """A reward outcome as the console words it."""
    return enum_label(RewardOutcome, outcome, "REWARD_OUTCOME_")


@dataclass(frozen=True)
class RevocationStatus:
    """The newest signed revocation list: its version, lifetime and size."""

    version: int
    issued_at: datetime
    expires_at: datetime
    entries: Sequence[RevocationEntry]
    expired: bool


def revocation_status(head: RevocationHead | None, now: datetime) -> RevocationStatus | None:
    """The list a follower would fetch now (None before the first is published)."""
    if head is None:
        return None
    listed = RevocationList.FromString(head.envelope.payload)
    return RevocationStatus(
        version=head.version,
        issued_at=head.issued_at,
        expires_at=head.expires_at,
        entries=list(listed.entries),
        expired=head.expires_at <= now,
    )


@dataclass(frozen=True)
class CertificateRow:
    """One certificate with its state at a reference policy update."""

    stored: StoredCertificate
    state: str
    """``current``, ``expired``, ``revoked`` or ``not yet valid``."""
    reference_update: int
    reference_source: str
    """Why that update: ``asked``, ``newest receipt`` or ``issue update (no receipts yet)``."""

    @property
    def certificate_id(self) -> str:
        """The certificate's id."""
        return self.stored.certificate.certificate_id

    @property
    def first_update(self) -> int:
        """The first policy update it covers."""
        return self.stored.certificate.issued_at_policy_update

    @property
    def last_update(self) -> int:
        """The last policy update it covers (one below its expiry)."""
        certificate = self.stored.certificate
        return certificate.issued_at_policy_update + certificate.expiry_policy_updates - 1

    @property
    def scope(self) -> str:
        """Its calibration scope, worded."""
        return enum_label(
            CalibrationScope, self.stored.certificate.calibration_scope, "CALIBRATION_SCOPE_"
        )

    @property
    def issuer(self) -> str:
        """Who issued it (worker or organization), worded."""
        return enum_label(CertificateIssuer, self.stored.certificate.issuer, "CERTIFICATE_ISSUER_")


def _certificate_row(
    stored: StoredCertificate,
    activity: Mapping[str, ContractActivity],
    asked_update: int | None,
) -> CertificateRow:
    certificate = stored.certificate
    if asked_update is not None:
        update, source = asked_update, "asked"
    elif certificate.reward_contract_digest in activity:
        update = activity[certificate.reward_contract_digest].newest_policy_update
        source = "newest receipt"
    else:
        update, source = certificate.issued_at_policy_update, "issue update (no receipts yet)"
    state = certificate_state(certificate, update, revoked=stored.revoked)
    return CertificateRow(
        stored=stored,
        state=state_name(state).replace("_", " ").lower(),
        reference_update=update,
        reference_source=source,
    )


def certificates(
    store: ControlStore, *, page_token: str = "", asked_update: int | None = None
) -> tuple[list[CertificateRow], str]:
    """One page of certificates, oldest issue first, each with its state; the next token."""
    page = store.certificates.list_certificates(None, LIST_SIZE, page_token)
    activity = store.receipts.activity()
    return [_certificate_row(s, activity, asked_update) for s in page.items], page.next_page_token


def certificate_detail(
    store: ControlStore, certificate_id: str, *, asked_update: int | None = None
) -> tuple[CertificateRow, RegisteredContract]:
    """One certificate with its state, and the contract it certifies."""
    stored = store.certificates.get_certificate(certificate_id)
    row = _certificate_row(stored, store.receipts.activity(), asked_update)
    contract = store.contracts.get_contract(stored.certificate.reward_contract_digest)
    return row, contract


@dataclass(frozen=True)
class ContractRow:
    """A registered contract with its receipt and certificate counts."""

    registered: RegisteredContract
    receipts: int
    newest_update: int | None
    certificates: int

    @property
    def digest(self) -> str:
        """The contract digest (its address)."""
        return self.registered.reward_contract_digest


def contracts(store: ControlStore, *, page_token: str = "") -> tuple[list[ContractRow], str]:
    """One page of contracts, oldest registration first; the next token."""
    page = store.contracts.list_contracts(LIST_SIZE, page_token)
    activity = store.receipts.activity()
    issued = Counter(
        stored.certificate.reward_contract_digest for stored in _every_certificate(store)
    )
    rows = []
    for registered in page.items:
        digest = registered.reward_contract_digest
        held = activity.get(digest)
        rows.append(
            ContractRow(
                registered=registered,
                receipts=held.total if held else 0,
                newest_update=held.newest_policy_update if held else None,
                certificates=issued[digest],
            )
        )
    return rows, page.next_page_token


def _every_certificate(store: ControlStore) -> list[StoredCertificate]:
    """Every recorded certificate (all pages; a control plane holds few)."""
    found: list[StoredCertificate] = []
    token = ""
    while True:
        page = store.certificates.list_certificates(None, MAX_PAGE_SIZE, token)
        found.extend(page.items)
        token = page.next_page_token
        if not token:
            return found


@dataclass(frozen=True)
class ContractDetail:
    """A contract's page: the contract, its receipt index summary and chart, its certificates."""

    registered: RegisteredContract
    summary: ReceiptSummary
    outcomes: Sequence[tuple[str, int]]
    chart: Chart | None
    certificates: Sequence[CertificateRow]


def contract_detail(store: ControlStore, digest: str) -> ContractDetail:
    """Everything the contract page shows (one contract's receipts and certificates)."""
    registered = store.contracts.get_contract(digest)
    summary = store.receipts.receipt_summary(digest)
    buckets = store.receipts.timeline(digest)
    activity = store.receipts.activity()
    held = [s for s in _every_certificate(store) if s.certificate.reward_contract_digest == digest]
    return ContractDetail(
        registered=registered,
        summary=summary,
        outcomes=[(outcome_label(o), count) for o, count in summary.counts.items()],
        chart=timeline_chart(buckets, outcome_label) if buckets else None,
        certificates=[_certificate_row(s, activity, None) for s in held],
    )


@dataclass(frozen=True)
class KeyRow:
    """A registered issuer key and whether it is active now."""

    key: IssuerKey
    role: str
    active: bool


def keys(store: ControlStore, now: datetime, *, page_token: str = "") -> tuple[list[KeyRow], str]:
    """One page of issuer keys, oldest registration first, with whether each is active now."""
    page = store.keys.list_issuer_keys(
        IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED, LIST_SIZE, page_token
    )
    rows = [
        KeyRow(
            key=key,
            role=enum_label(IssuerKeyRole, key.role, "ISSUER_KEY_ROLE_"),
            active=store.keys.active_key(key.key_id, key.role, now) is not None,
        )
        for key in page.items
    ]
    return rows, page.next_page_token


def audit_log(
    store: ControlStore, *, before: int | None = None
) -> list[tuple[AuditEntry, Mapping[str, object]]]:
    """One page of the audit log, newest first, each entry with its details parsed."""
    return [(e, json.loads(e.details)) for e in store.audit_log.latest(LIST_SIZE, before=before)]


def integrity_audits(store: ControlStore, *, page_token: str = "") -> tuple[list[StoredAudit], str]:
    """One page of reward-integrity audits (oldest first) with each one's decision in force."""
    page = store.integrity_audits.list_audits("", "", LIST_SIZE, page_token)
    return page.items, page.next_page_token


@dataclass(frozen=True)
class AuditAndHistory:
    """One reward-integrity audit, its whole decision history, and its run's gate (R-I-10: what
    the run may do, which one audit's decision alone does not say)."""

    audit: StoredAudit
    history: Sequence[DecisionEntry]
    run_gate: RunGate


def integrity_audit(store: ControlStore, audit_id: str) -> AuditAndHistory:
    """An audit, its decision history (oldest entry first) and the gate of its run."""
    audit = store.integrity_audits.get(audit_id)
    return AuditAndHistory(
        audit=audit,
        history=store.integrity_decisions.history(audit_id),
        run_gate=run_gate(store.integrity_audits.standings(audit.run_id)),
    )
