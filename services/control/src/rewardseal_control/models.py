"""The control plane's tables (docs/spec.md R-C-6): SQLAlchemy 2 ORM models.

Privacy-safe columns only: ids, digests, enum values, scalars, times and signed bytes that hold
no record contents. Times are UTC and read back timezone-aware (:class:`UTCDateTime`). Enum
columns hold the protobuf enum numbers, except ``issuer_keys.role`` (``"worker"`` or
``"organization"``, readable in the database).

The schema is created by the Alembic migrations in ``migrations/versions``, never by
``create_all``; a test checks that these models and the migrations agree.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rewardseal_server.sqlstore import UTCDateTime

__all__ = [
    "DIGEST_LENGTH",
    "ID_LENGTH",
    "KEY_ID_LENGTH",
    "ROLE_ORGANIZATION",
    "ROLE_WORKER",
    "AuditLog",
    "Base",
    "Certificate",
    "Contract",
    "Enrollment",
    "IMMUTABLE_TABLES",
    "IntegrityAudit",
    "IntegrityBundle",
    "IntegrityDecision",
    "IntegrityOpenRow",
    "IntegrityRevision",
    "IntegrityRevisionRef",
    "IntegrityShard",
    "IntegrityShardRow",
    "IssuerKeyBinding",
    "IssuerKeyCertificate",
    "IssuerKeyRow",
    "Receipt",
    "Revocation",
    "RevocationListHead",
    "RevocationScope",
]

ID_LENGTH = 128
"""R-MSG-10 ids are at most 128 characters."""
DIGEST_LENGTH = 71
"""``"sha256:"`` and 64 hex digits."""
KEY_ID_LENGTH = 79
"""``"ed25519:sha256:"`` and 64 hex digits."""
ROLE_WORKER = "worker"
ROLE_ORGANIZATION = "organization"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names are fixed here so that migrations can name them on every backend."""

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
_AUDIT_ID = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base of the control plane's models."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Contract(Base):
    """A registered reward contract (R-C-1). Immutable: a change is a new digest."""

    __tablename__ = "contracts"

    digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH), primary_key=True)
    contract_id: Mapped[str] = mapped_column(String(ID_LENGTH), index=True)
    contract_version: Mapped[str] = mapped_column(Text)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    """Deterministic protobuf bytes of the normalized contract."""
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index(None, "registered_at", "digest"),)


class IssuerKeyRow(Base):
    """A worker or organization public key with its validity window (R-C-2)."""

    __tablename__ = "issuer_keys"

    key_id: Mapped[str] = mapped_column(String(KEY_ID_LENGTH), primary_key=True)
    public_key: Mapped[bytes] = mapped_column(LargeBinary)
    role: Mapped[str] = mapped_column(String(16))
    display_name: Mapped[str] = mapped_column(Text)
    not_before: Mapped[datetime] = mapped_column(UTCDateTime)
    not_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Exclusive end of the window; None: open-ended."""
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    admitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """When an admin or an enrollment credential admitted the key for the receipt index
    (R-C-10); None: registered only (its receipts are refused ``key_not_admitted``)."""

    __table_args__ = (
        CheckConstraint(f"role IN ('{ROLE_WORKER}', '{ROLE_ORGANIZATION}')", name="role"),
        CheckConstraint("length(public_key) = 32", name="public_key_size"),
        Index(None, "registered_at", "key_id"),
        Index(None, "role", "registered_at", "key_id"),
    )


class Certificate(Base):
    """A signed certificate (R-MSG-4), as issued; ``body`` is its deterministic proto bytes."""

    __tablename__ = "certificates"

    certificate_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    contract_digest: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("contracts.digest")
    )
    digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH), unique=True)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    scope: Mapped[int] = mapped_column(Integer)
    """CalibrationScope number."""
    issuer: Mapped[int] = mapped_column(Integer)
    """CertificateIssuer number."""
    issuer_key_id: Mapped[str] = mapped_column(
        String(KEY_ID_LENGTH), ForeignKey("issuer_keys.key_id")
    )
    issued_at_policy_update: Mapped[int] = mapped_column(BigInteger)
    expiry_policy_updates: Mapped[int] = mapped_column(BigInteger)
    epsilon: Mapped[float] = mapped_column(Double)
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index(None, "contract_digest", "issued_at", "certificate_id"),
        Index(None, "issued_at", "certificate_id"),
    )


class Revocation(Base):
    """A revoked certificate (R-C-4); ``list_version`` is the first list that carried it."""

    __tablename__ = "revocations"

    certificate_id: Mapped[str] = mapped_column(
        String(ID_LENGTH), ForeignKey("certificates.certificate_id"), primary_key=True
    )
    reason: Mapped[str] = mapped_column(Text)
    revoked_at: Mapped[datetime] = mapped_column(UTCDateTime)
    list_version: Mapped[int] = mapped_column(BigInteger)


class RevocationScope(Base):
    """A revoked contract or checker configuration (R-C-13): every certificate of it, issued
    before or after, is revoked. ``kind`` is ``"contract"`` or ``"checker"``; ``digest`` the
    contract digest or the checker configuration digest; ``list_version`` the first list that
    carried it. Permanent, like every revocation."""

    __tablename__ = "revocation_scopes"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    revoked_at: Mapped[datetime] = mapped_column(UTCDateTime)
    list_version: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (CheckConstraint("kind IN ('contract', 'checker')", name="kind"),)


class RevocationListHead(Base):
    """Every signed revocation list ever issued (append-only); the head is max(version)."""

    __tablename__ = "revocation_list_heads"

    version: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    envelope: Mapped[bytes] = mapped_column(LargeBinary)
    """A serialized SignedEnvelope over a RevocationList."""
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Receipt(Base):
    """The privacy-safe index of one forwarded receipt (R-C-5).

    The columns repeat fields of the signed receipt for filtering; ``envelope`` is the signed
    envelope itself (ids, digests, tier, outcome, scalar, certificate state: no record
    contents, no evidence).
    """

    __tablename__ = "receipts"

    receipt_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    episode_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    contract_digest: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("contracts.digest")
    )
    policy_checkpoint_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    policy_update: Mapped[int] = mapped_column(BigInteger)
    oracle_tier: Mapped[int] = mapped_column(Integer)
    reward_outcome: Mapped[int] = mapped_column(Integer)
    """RewardOutcome number."""
    scalar_reward: Mapped[float | None] = mapped_column(Double)
    """None when the outcome is unscored (never 0.0 in its place)."""
    certified: Mapped[bool] = mapped_column(Boolean)
    development_only: Mapped[bool] = mapped_column(Boolean)
    certificate_id: Mapped[str | None] = mapped_column(String(ID_LENGTH), index=True)
    certificate_state: Mapped[int] = mapped_column(Integer)
    """CertificateState number."""
    calibration_scope: Mapped[int] = mapped_column(Integer)
    """CalibrationScope number (0 when the state is ABSENT)."""
    issuer_key_id: Mapped[str] = mapped_column(
        String(KEY_ID_LENGTH), ForeignKey("issuer_keys.key_id")
    )
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    envelope: Mapped[bytes] = mapped_column(LargeBinary)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index(None, "contract_digest", "policy_update", "receipt_id"),
        Index(None, "policy_update", "receipt_id"),
        Index(None, "contract_digest", "reward_outcome"),
        Index(None, "contract_digest", "certified"),
        # One receipt per episode of a contract: the same episode id under two contracts is
        # two receipts (R-C-5).
        UniqueConstraint("contract_digest", "episode_id"),
    )


class IssuerKeyBinding(Base):
    """A contract an admitted WORKER key may sign receipts for (R-C-10)."""

    __tablename__ = "issuer_key_bindings"

    key_id: Mapped[str] = mapped_column(
        String(KEY_ID_LENGTH), ForeignKey("issuer_keys.key_id"), primary_key=True
    )
    contract_digest: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("contracts.digest"), primary_key=True
    )
    bound_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IssuerKeyCertificate(Base):
    """The bundle certificate a WORKER key registered with (R-C-5): receipts of that key may
    name it beside the certificates control issued for the contract."""

    __tablename__ = "issuer_key_certificates"

    key_id: Mapped[str] = mapped_column(
        String(KEY_ID_LENGTH), ForeignKey("issuer_keys.key_id"), primary_key=True
    )
    certificate_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    contract_digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH))
    certificate_digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH))
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    body: Mapped[bytes | None] = mapped_column(LargeBinary)
    """The certificate's deterministic proto bytes (an admin's approval may accept it, R-C-11);
    None for one registered before schema 0005."""


class Enrollment(Base):
    """A one-time enrollment credential (R-C-11): only its hash is kept; single use, expiring."""

    __tablename__ = "enrollments"

    enrollment_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    credential_hash: Mapped[str] = mapped_column(String(DIGEST_LENGTH), unique=True)
    contract_digests: Mapped[str] = mapped_column(Text)
    """The JSON list of contract digests a key enrolled with it is bound to."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    used_by_key_id: Mapped[str | None] = mapped_column(
        String(KEY_ID_LENGTH), ForeignKey("issuer_keys.key_id")
    )
    accepts_bundle_certificate: Mapped[bool] = mapped_column(Boolean, server_default=false())
    """The enrolled key's bundle certificate is accepted: listed among control's certificates
    (R-C-11)."""


class AuditLog(Base):
    """Append-only log of every admin action: who (a role or credential name, never a token),
    what, when, on what, and why."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(_AUDIT_ID, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(ID_LENGTH))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    details: Mapped[str] = mapped_column(Text)
    """JSON object (sorted keys)."""

    __table_args__ = (Index(None, "action", "id"),)


# ---------------------------------------------------------------------------------------------
# Reward integrity (docs/spec.md §12). Revisions, their references, sealed shards and their rows,
# bundles and decisions are immutable once written: the store never updates or deletes them and
# the migration adds triggers that refuse an UPDATE or DELETE in the database itself
# (IMMUTABLE_TABLES). Audits are the one mutable record: their state machine (queued, running,
# done, failed, cancelled). Open rows are a boundary's capture before its seal, removed by it.

RUN_ID_LENGTH = 200
"""A training run's id (free text chosen by the trainer side)."""


class IntegrityRevision(Base):
    """A reward-system, retention-protocol or integrity-profile revision (R-I-1, R-I-4, R-I-7);
    ``content`` is its scrubbed, normalized JSON (the id is its digest)."""

    __tablename__ = "integrity_revisions"

    revision_id: Mapped[str] = mapped_column(String(DIGEST_LENGTH), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(64))
    builtin: Mapped[bool] = mapped_column(Boolean)
    independent: Mapped[bool | None] = mapped_column(Boolean)
    """Reward systems: the primary sentinel is independent of the optimizer (R-I-2)."""
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint("kind IN ('system', 'protocol', 'profile')", name="kind"),
        Index(None, "kind", "created_at", "revision_id"),
    )


class IntegrityRevisionRef(Base):
    """What a reward-system revision names (contract digests, implementation fingerprints), so
    listings filter on an index instead of reading every document."""

    __tablename__ = "integrity_revision_refs"

    revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id"), primary_key=True
    )
    ref: Mapped[str] = mapped_column(String(16), primary_key=True)
    value: Mapped[str] = mapped_column(String(256), primary_key=True)

    __table_args__ = (Index(None, "ref", "value"),)


class IntegrityOpenRow(Base):
    """One captured row of a boundary not sealed yet (R-I-3); removed when the boundary seals."""

    __tablename__ = "integrity_open_rows"

    run_id: Mapped[str] = mapped_column(String(RUN_ID_LENGTH), primary_key=True)
    boundary: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    record_id: Mapped[str] = mapped_column(String(ID_LENGTH * 2), primary_key=True)
    candidate: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    system_revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id")
    )
    protocol_revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id")
    )
    body: Mapped[str] = mapped_column(Text)
    """The row's JSON (rewardseal.core.integrity.signals.SignalRow.to_json)."""
    appended_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IntegrityShard(Base):
    """A sealed signal shard: the manifest of one boundary's retained rows (R-I-3)."""

    __tablename__ = "integrity_shards"

    shard_id: Mapped[str] = mapped_column(String(DIGEST_LENGTH), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LENGTH))
    boundary: Mapped[int] = mapped_column(BigInteger)
    system_revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id")
    )
    protocol_revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id")
    )
    captured: Mapped[int] = mapped_column(BigInteger)
    exact: Mapped[bool] = mapped_column(Boolean)
    core_rows: Mapped[int] = mapped_column(BigInteger)
    diagnostic_rows: Mapped[int] = mapped_column(BigInteger)
    manifest: Mapped[str] = mapped_column(Text)
    """The manifest's JSON; its digest is ``shard_id``."""
    sealed_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("run_id", "boundary"),)


class IntegrityShardRow(Base):
    """One retained row of a sealed shard, in manifest order."""

    __tablename__ = "integrity_shard_rows"

    shard_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_shards.shard_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    body: Mapped[str] = mapped_column(Text)
    """The retained row's JSON (rewardseal.core.integrity.retention.RetainedRow.to_json)."""


class IntegrityAudit(Base):
    """An audit of one sealed shard under a profile, and where its run stands."""

    __tablename__ = "integrity_audits"

    audit_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(RUN_ID_LENGTH))
    boundary: Mapped[int] = mapped_column(BigInteger)
    shard_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_shards.shard_id")
    )
    system_revision_id: Mapped[str] = mapped_column(String(DIGEST_LENGTH))
    protocol_revision_id: Mapped[str] = mapped_column(String(DIGEST_LENGTH))
    profile_revision_id: Mapped[str] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_revisions.revision_id")
    )
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    error: Mapped[str] = mapped_column(Text)
    claim: Mapped[str | None] = mapped_column(String(64))
    """The runner holding the audit while it runs (a random token per claim)."""
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """A running audit whose lease has passed is taken up again (its runner died)."""
    evidence_digest: Mapped[str | None] = mapped_column(String(DIGEST_LENGTH))
    bundle_id: Mapped[str | None] = mapped_column(
        String(DIGEST_LENGTH), ForeignKey("integrity_bundles.bundle_id")
    )
    bundle_reused: Mapped[bool] = mapped_column(Boolean)
    retry_of: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    retry_reason: Mapped[str] = mapped_column(Text)
    cancel_reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'cancelled')", name="state"
        ),
        Index(None, "state", "created_at", "audit_id"),
        Index(None, "run_id", "created_at", "audit_id"),
        Index(None, "created_at", "audit_id"),
    )


class IntegrityBundle(Base):
    """A signed audit bundle (R-I-8): content-addressed, signed by the organization key."""

    __tablename__ = "integrity_bundles"

    bundle_id: Mapped[str] = mapped_column(String(DIGEST_LENGTH), primary_key=True)
    evidence_digest: Mapped[str] = mapped_column(String(DIGEST_LENGTH), index=True)
    envelope: Mapped[bytes] = mapped_column(LargeBinary)
    """A serialized SignedEnvelope over the bundle's canonical JSON."""
    signer_key_id: Mapped[str] = mapped_column(String(KEY_ID_LENGTH))
    outcome: Mapped[str] = mapped_column(String(32))
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IntegrityDecision(Base):
    """One entry of an audit's append-only decision history (R-I-8)."""

    __tablename__ = "integrity_decisions"

    audit_id: Mapped[str] = mapped_column(
        String(ID_LENGTH), ForeignKey("integrity_audits.audit_id"), primary_key=True
    )
    sequence: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    body: Mapped[str] = mapped_column(Text)
    """The entry's JSON (rewardseal.core.integrity.decisions.DecisionEntry.to_json)."""
    at: Mapped[datetime] = mapped_column(UTCDateTime)


IMMUTABLE_TABLES = (
    IntegrityRevision.__tablename__,
    IntegrityRevisionRef.__tablename__,
    IntegrityShard.__tablename__,
    IntegrityShardRow.__tablename__,
    IntegrityBundle.__tablename__,
    IntegrityDecision.__tablename__,
)
"""Tables whose rows are never updated or deleted (database triggers refuse it)."""
