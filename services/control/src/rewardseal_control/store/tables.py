"""The Core ``Table`` handles of the control schema (:mod:`rewardseal_control.models`).

The aggregates read and write through SQLAlchemy Core, not the ORM: one statement per step
keeps each transaction's locking visible. Several aggregates look into each other's tables
(a certificate needs its contract and issuer key; a receipt needs both too), so the handles
live here, once.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy import Table
from sqlalchemy.engine import Row

from rewardseal_control.models import (
    AuditLog,
    Base,
    Certificate,
    Contract,
    Enrollment,
    IntegrityAudit,
    IntegrityBundle,
    IntegrityDecision,
    IntegrityOpenRow,
    IntegrityRevision,
    IntegrityRevisionRef,
    IntegrityShard,
    IntegrityShardRow,
    IssuerKeyBinding,
    IssuerKeyCertificate,
    IssuerKeyRow,
    Receipt,
    Revocation,
    RevocationListHead,
    RevocationScope,
)

__all__ = [
    "AnyRow",
    "audit",
    "certificates",
    "contracts",
    "enrollments",
    "heads",
    "integrity_audits",
    "integrity_bundles",
    "integrity_decisions",
    "integrity_open_rows",
    "integrity_revision_refs",
    "integrity_revisions",
    "integrity_shard_rows",
    "integrity_shards",
    "key_bindings",
    "key_certificates",
    "keys",
    "receipts",
    "revocation_scopes",
    "revocations",
]

AnyRow: TypeAlias = "Row[*tuple[Any, ...]]"
"""A row as a statement returns it (columns read by name)."""

_tables = Base.metadata.tables
contracts: Table = _tables[Contract.__tablename__]
keys: Table = _tables[IssuerKeyRow.__tablename__]
key_bindings: Table = _tables[IssuerKeyBinding.__tablename__]
key_certificates: Table = _tables[IssuerKeyCertificate.__tablename__]
enrollments: Table = _tables[Enrollment.__tablename__]
certificates: Table = _tables[Certificate.__tablename__]
revocations: Table = _tables[Revocation.__tablename__]
heads: Table = _tables[RevocationListHead.__tablename__]
revocation_scopes: Table = _tables[RevocationScope.__tablename__]
receipts: Table = _tables[Receipt.__tablename__]
audit: Table = _tables[AuditLog.__tablename__]
integrity_revisions: Table = _tables[IntegrityRevision.__tablename__]
integrity_revision_refs: Table = _tables[IntegrityRevisionRef.__tablename__]
integrity_open_rows: Table = _tables[IntegrityOpenRow.__tablename__]
integrity_shards: Table = _tables[IntegrityShard.__tablename__]
integrity_shard_rows: Table = _tables[IntegrityShardRow.__tablename__]
integrity_audits: Table = _tables[IntegrityAudit.__tablename__]
integrity_bundles: Table = _tables[IntegrityBundle.__tablename__]
integrity_decisions: Table = _tables[IntegrityDecision.__tablename__]
