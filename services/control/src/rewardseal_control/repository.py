"""The control plane's repository (SPEC section 9): one class, :class:`ControlStore`.

Deviations from the team notes (``control_interfaces.md``, "Repository"), all additive:

* ``revoke(certificate_id, reason, actor, *, sign, ttl, at)`` returns ``(RevocationHead,
  created)``, not a bare version: the new signed list must be made in the same transaction as
  the revocation, so the service passes ``sign`` (its organization key, as a
  :data:`RevocationSigner`) and gets the stored head back (``head.version`` is the version).
  ``publish_revocation_list(sign=..., ttl=..., at=...)`` re-signs the current entries under a
  new version (first list at start-up; periodic re-sign before expiry).
* ``register_issuer_key`` returns ``(IssuerKey, created)``; the certificate method is
  ``record_certificate(certificate, actor, reason) -> (StoredCertificate, created)``.
* ``list_*`` return :class:`Page` (a NamedTuple ``(items, next_page_token)``: it unpacks as the
  notes' ``(items, next_token)``).
* ``receipts.contract_digest`` and ``receipts.issuer_key_id`` are foreign keys (the notes say
  "indexed"): ``record_receipts`` refuses, per item, a receipt whose contract is not registered
  (NotFound) or whose issuer key is not registered (SignatureError, ``signature_invalid``).

Rules that hold for every method:

* one method, one transaction (SQLite writers: ``BEGIN IMMEDIATE``; PostgreSQL: row locks and
  ``INSERT ... ON CONFLICT DO NOTHING`` with a re-run when a concurrent writer won a row);
* every admin action (register/retire issuer key, record certificate, revoke) writes its
  audit row in the same transaction as its change: who (``actor``: a role or credential name,
  never a token), what, when, on what, why;
* inputs are validated here too (ids, digests, key ids, ranges, text without NUL), so nothing
  malformed reaches the database; only :mod:`rewardseal.errors` classes leave this module;
* signature verification and certificate/list signing are the service's job: this module
  stores what it is given and hands the service what it needs (:meth:`ControlStore.active_key`,
  :meth:`ControlStore.worker_trust`, :meth:`ControlStore.trust_set`);
* page tokens are opaque (base64url of JSON naming the listing, a fingerprint of its filters
  and the last row's sort key); a malformed token, or one from another listing or other
  filters, is refused with ValidationError. ``page_size`` 0 means 50; larger than 500 means 500.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, Generic, NamedTuple, TypeAlias, TypeVar, cast

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import (
    ColumnElement,
    Insert,
    Select,
    Table,
    and_,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Row

from rewardseal.contract import UNSCORED_OUTCOMES, certificate_digest, contract_digest
from rewardseal.contract import normalize_contract as _normalize_contract
from rewardseal.errors import (
    DuplicateEpisode,
    NotFound,
    RewardSealError,
    SignatureError,
    Unavailable,
    ValidationError,
    preview,
)
from rewardseal.receipts import is_unscored
from rewardseal.signing import (
    RECEIPT_PAYLOAD_TYPE,
    REVOCATION_LIST_PAYLOAD_TYPE,
    TrustSet,
    key_id_for,
)
from rewardseal.sqlstore import LostRace, StoreEngine, chunks
from rewardseal.v1.certificate_pb2 import (
    IssuerKey,
    RevocationEntry,
    RevocationList,
    RewardCertificate,
)
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2 import RegisteredContract
from rewardseal.v1.enums_pb2 import IssuerKeyRole, RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.validation import (
    check_policy_update_field,
    parse_strict,
    validate_certificate,
    validate_contract,
    validate_digest,
    validate_id,
    validate_key_id,
    validate_receipt,
)
from rewardseal_control import db
from rewardseal_control.models import (
    ROLE_ORGANIZATION,
    ROLE_WORKER,
    AuditLog,
    Base,
    Certificate,
    Contract,
    IssuerKeyRow,
    Receipt,
    Revocation,
    RevocationListHead,
)

__all__ = [
    "DEFAULT_LIST_TTL",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "AuditEntry",
    "ControlStore",
    "Page",
    "ReceiptFilter",
    "ReceiptSummary",
    "RecordResult",
    "RevocationHead",
    "RevocationRecord",
    "RevocationSigner",
    "StoredCertificate",
    "StoredReceipt",
]

_T = TypeVar("_T")

DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 500
DEFAULT_LIST_TTL: Final = timedelta(hours=24)
"""How long a signed revocation list is valid unless the service says otherwise."""

MAX_REASON_LENGTH: Final = 1024
MAX_DISPLAY_NAME_LENGTH: Final = 200
MAX_TARGET_LENGTH: Final = 256
MAX_CONTRACT_VERSION_LENGTH: Final = 128
_MAX_TOKEN_LENGTH: Final = 2048

ACTOR_PATTERN: Final = re.compile(r"^[A-Za-z][A-Za-z0-9._:@-]{0,127}\Z")
"""A role or credential name (``admin``, ``admin:alice``); the service never passes a token."""
ACTION_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_.]{0,63}\Z")
_TOKEN_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]+\Z")

ACTION_REGISTER_KEY: Final = "issuer_key.register"
ACTION_RETIRE_KEY: Final = "issuer_key.retire"
ACTION_ISSUE_CERTIFICATE: Final = "certificate.issue"
ACTION_REVOKE_CERTIFICATE: Final = "certificate.revoke"

_REVOCATION_LOCK_KEY: Final = 0x7273_7276_6C73  # pg_advisory_xact_lock: one list writer

_ROLE_NAMES: Final[Mapping[IssuerKeyRole.ValueType, str]] = MappingProxyType(
    {
        IssuerKeyRole.ISSUER_KEY_ROLE_WORKER: ROLE_WORKER,
        IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION: ROLE_ORGANIZATION,
    }
)
_ROLE_VALUES: Final[Mapping[str, IssuerKeyRole.ValueType]] = MappingProxyType(
    {name: value for value, name in _ROLE_NAMES.items()}
)

RevocationSigner = Callable[[RevocationList], SignedEnvelope]
"""Signs an unsigned RevocationList (the service's organization key; it may set
``issuer_key_id``) into a SignedEnvelope of type ``REVOCATION_LIST_PAYLOAD_TYPE``."""

_AnyRow: TypeAlias = "Row[*tuple[Any, ...]]"

_tables = Base.metadata.tables
_contracts: Table = _tables[Contract.__tablename__]
_keys: Table = _tables[IssuerKeyRow.__tablename__]
_certificates: Table = _tables[Certificate.__tablename__]
_revocations: Table = _tables[Revocation.__tablename__]
_heads: Table = _tables[RevocationListHead.__tablename__]
_receipts: Table = _tables[Receipt.__tablename__]
_audit: Table = _tables[AuditLog.__tablename__]


# ---------------------------------------------------------------------- values


class Page(NamedTuple, Generic[_T]):
    """One page of a listing; ``next_page_token`` is empty on the last page."""

    items: list[_T]
    next_page_token: str


@dataclass(frozen=True)
class StoredCertificate:
    """A recorded certificate, its digest and its revocation (if any)."""

    certificate: RewardCertificate
    digest: str
    revoked_at: datetime | None = None
    revocation_reason: str | None = None

    @property
    def revoked(self) -> bool:
        """True once the certificate is revoked."""
        return self.revoked_at is not None


@dataclass(frozen=True)
class RevocationRecord:
    """One revoked certificate; ``list_version`` is the first signed list that carried it."""

    certificate_id: str
    reason: str
    revoked_at: datetime
    list_version: int


@dataclass(frozen=True)
class RevocationHead:
    """A signed revocation list as stored (the head is the highest version)."""

    version: int
    envelope: SignedEnvelope
    issued_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class RecordResult:
    """What happened to one forwarded receipt (same order as the request).

    ``recorded`` is True when the receipt is stored, now or before (``duplicate``); otherwise
    ``error`` says why it was refused. ``receipt_id`` is empty when the payload did not parse.
    """

    receipt_id: str
    recorded: bool
    duplicate: bool = False
    error: RewardSealError | None = None


@dataclass(frozen=True)
class StoredReceipt:
    """A receipt of the index: the signed envelope, its parsed payload, when it was recorded."""

    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope
    recorded_at: datetime


@dataclass(frozen=True, kw_only=True)
class ReceiptFilter:
    """Filters of :meth:`ControlStore.list_receipts`; None (or outcome 0) means "any"."""

    contract_digest: str | None = None
    reward_outcome: int | None = None
    certified: bool | None = None
    min_policy_update: int | None = None
    max_policy_update: int | None = None


@dataclass(frozen=True)
class ReceiptSummary:
    """Per-contract counts of the receipt index."""

    contract_digest: str
    total: int
    counts: Mapping[int, int]
    """RewardOutcome number -> receipts with that outcome (outcomes with none are absent)."""
    certified: int
    unscored: int

    @property
    def certified_share(self) -> float:
        """Certified receipts / all receipts (0.0 when there are none)."""
        return self.certified / self.total if self.total else 0.0

    @property
    def unscored_share(self) -> float:
        """Unscored receipts (RECONCILIATION_REQUIRED, FAILED_PLATFORM) / all (0.0 if none)."""
        return self.unscored / self.total if self.total else 0.0


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


# ---------------------------------------------------------------------- input checks


def _moment(at: datetime | None) -> datetime:
    """``at`` in UTC, or now; a naive time is refused (it names no instant)."""
    if at is None:
        return datetime.now(UTC)
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise ValidationError("times must be timezone-aware datetimes (UTC)")
    return at.astimezone(UTC)


def _text(value: str, name: str, *, max_length: int, required: bool = False) -> str:
    """A human-readable text field: bounded, no control characters but tab and newline."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string")
    if required and not value.strip():
        raise ValidationError(f"{name} is required")
    if len(value) > max_length:
        raise ValidationError(f"{name} is longer than {max_length} characters")
    if any((ord(ch) < 32 and ch not in "\t\n") or ord(ch) == 127 for ch in value):
        raise ValidationError(f"{name} contains control characters")
    return value


def _actor(actor: str) -> str:
    if not isinstance(actor, str) or not ACTOR_PATTERN.match(actor):
        raise ValidationError(
            "actor must be a role or credential name (a letter, then up to 127 of "
            "A-Z a-z 0-9 . _ : @ -), never a token"
        )
    return actor


def _role_name(role: int) -> str:
    try:
        return _ROLE_NAMES[cast(IssuerKeyRole.ValueType, role)]
    except KeyError:
        raise ValidationError(
            f"issuer key role must be WORKER or ORGANIZATION, got {role}"
        ) from None


def _page_size(page_size: int) -> int:
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise ValidationError("page_size must be an integer")
    if page_size < 0:
        raise ValidationError(f"page_size must not be negative, got {page_size}")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _datetime(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


def _no_unknown_fields(message: Any) -> None:
    """Refuse a message carrying fields this schema does not know (they would be stored)."""
    parse_strict(type(message), message.SerializeToString(deterministic=True))


# ---------------------------------------------------------------------- page tokens

_KeyPart = type[str] | type[int] | type[datetime]


def _fingerprint(**query: object) -> str:
    """A short digest of a listing's filters, bound into its page tokens."""
    text = json.dumps(query, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _encode_token(kind: str, query: str, last: Sequence[str | int | datetime]) -> str:
    values = [v.isoformat() if isinstance(v, datetime) else v for v in last]
    body = json.dumps({"a": values, "k": kind, "q": query}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).rstrip(b"=").decode("ascii")


def _malformed_token() -> ValidationError:
    return ValidationError("page_token is malformed; pass the next_page_token of a previous page")


def _decode_token(
    token: str, kind: str, query: str, shape: Sequence[_KeyPart]
) -> tuple[Any, ...] | None:
    """The sort key after which the page starts; None for the first page."""
    if not isinstance(token, str):
        raise _malformed_token()
    if not token:
        return None
    if len(token) > _MAX_TOKEN_LENGTH or not _TOKEN_PATTERN.match(token):
        raise _malformed_token()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise _malformed_token() from None
    if (
        not isinstance(document, dict)
        or set(document) != {"a", "k", "q"}
        or not isinstance(document["a"], list)
        or len(document["a"]) != len(shape)
    ):
        raise _malformed_token()
    if document["k"] != kind or document["q"] != query:
        raise ValidationError("page_token belongs to another listing or to other filters")
    values: list[Any] = []
    for value, expected in zip(document["a"], shape, strict=True):
        if expected is datetime:
            if not isinstance(value, str) or len(value) > 64:
                raise _malformed_token()
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise _malformed_token() from None
            if moment.tzinfo is None:
                raise _malformed_token()
            values.append(moment.astimezone(UTC))
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise _malformed_token()
            values.append(value)
        else:
            if not isinstance(value, str) or len(value) > 256:
                raise _malformed_token()
            values.append(value)
    return tuple(values)


def _after(columns: Sequence[ColumnElement[Any]], values: Sequence[Any]) -> ColumnElement[bool]:
    """Rows whose ``columns`` sort after ``values`` (lexicographic row comparison)."""
    first, *rest = columns
    head, *tail = values
    greater = cast(ColumnElement[bool], first > head)
    if not rest:
        return greater
    return or_(greater, and_(first == head, _after(rest, tail)))


def _page(
    conn: Connection,
    statement: Select[Any],
    order: Sequence[ColumnElement[Any]],
    *,
    kind: str,
    query: str,
    shape: Sequence[_KeyPart],
    page_size: int,
    page_token: str,
) -> tuple[list[_AnyRow], str]:
    """Run a keyset-paginated listing: the page's rows and the next token ("" at the end)."""
    size = _page_size(page_size)
    after = _decode_token(page_token, kind, query, shape)
    if after is not None:
        statement = statement.where(_after(order, after))
    rows = list(conn.execute(statement.order_by(*order).limit(size + 1)))
    if len(rows) <= size:
        return rows, ""
    rows = rows[:size]
    last = rows[-1]
    key = [last._mapping[column] for column in order]
    return rows, _encode_token(kind, query, key)


# ---------------------------------------------------------------------- row conversions


def _registered_contract(row: _AnyRow) -> RegisteredContract:
    return RegisteredContract(
        reward_contract_digest=row.digest,
        contract=RewardContract.FromString(bytes(row.body)),
        registered_at=_timestamp(row.registered_at),
    )


def _issuer_key(row: _AnyRow) -> IssuerKey:
    key = IssuerKey(
        key_id=row.key_id,
        public_key=bytes(row.public_key),
        role=_ROLE_VALUES[row.role],
        not_before=_timestamp(row.not_before),
        retired=row.retired_at is not None,
        display_name=row.display_name,
    )
    if row.not_after is not None:
        key.not_after.CopyFrom(_timestamp(row.not_after))
    return key


def _stored_certificate(row: _AnyRow) -> StoredCertificate:
    return StoredCertificate(
        certificate=RewardCertificate.FromString(bytes(row.body)),
        digest=row.digest,
        revoked_at=row.revoked_at,
        revocation_reason=row.revocation_reason,
    )


def _head(row: _AnyRow) -> RevocationHead:
    return RevocationHead(
        version=int(row.version),
        envelope=SignedEnvelope.FromString(bytes(row.envelope)),
        issued_at=row.issued_at,
        expires_at=row.expires_at,
    )


def _stored_receipt(row: _AnyRow) -> StoredReceipt:
    envelope = SignedEnvelope.FromString(bytes(row.envelope))
    return StoredReceipt(
        receipt=RewardEvidenceReceipt.FromString(envelope.payload),
        envelope=envelope,
        recorded_at=row.recorded_at,
    )


def _audit_entry(row: _AnyRow) -> AuditEntry:
    return AuditEntry(
        id=int(row.id),
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        reason=row.reason,
        details=MappingProxyType(json.loads(row.details)),
    )


# ---------------------------------------------------------------------- statements

_CONTRACT_COLUMNS = (_contracts.c.digest, _contracts.c.body, _contracts.c.registered_at)
_KEY_COLUMNS = (
    _keys.c.key_id,
    _keys.c.public_key,
    _keys.c.role,
    _keys.c.display_name,
    _keys.c.not_before,
    _keys.c.not_after,
    _keys.c.retired_at,
    _keys.c.registered_at,
)
_CERTIFICATE_SELECT = select(
    _certificates.c.certificate_id,
    _certificates.c.contract_digest,
    _certificates.c.digest,
    _certificates.c.body,
    _certificates.c.issued_at,
    _revocations.c.revoked_at,
    _revocations.c.reason.label("revocation_reason"),
).select_from(
    _certificates.outerjoin(
        _revocations, _revocations.c.certificate_id == _certificates.c.certificate_id
    )
)
_HEAD_COLUMNS = (_heads.c.version, _heads.c.envelope, _heads.c.issued_at, _heads.c.expires_at)
_RECEIPT_SELECT = select(
    _receipts.c.receipt_id,
    _receipts.c.policy_update,
    _receipts.c.envelope,
    _receipts.c.recorded_at,
)
_AUDIT_COLUMNS = (
    _audit.c.id,
    _audit.c.at,
    _audit.c.actor,
    _audit.c.action,
    _audit.c.target,
    _audit.c.reason,
    _audit.c.details,
)


def _active_clause(at: datetime) -> ColumnElement[bool]:
    """Keys whose validity window holds ``at`` and that were not retired by then."""
    return and_(
        _keys.c.not_before <= at,
        or_(_keys.c.not_after.is_(None), _keys.c.not_after > at),
        or_(_keys.c.retired_at.is_(None), _keys.c.retired_at > at),
    )


# ---------------------------------------------------------------------- the store


class ControlStore:
    """The control plane's durable state on SQLite (default) or PostgreSQL.

    Thread-safe: one instance may be used from many threads (a connection pool backs it).
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        """Open the control store at ``url``.

        ``migrate``: bring the schema to the newest revision first (Alembic, one transaction,
        serialized against other replicas). With ``migrate=False`` the schema must already be
        at the newest revision, else :class:`Unavailable`.

        Raises:
            ValidationError: the URL is not usable.
            Unavailable: the database cannot be reached, or its schema is not current.
        """
        if migrate:
            db.upgrade(url)
        self._db: StoreEngine = db.make_store_engine(url)
        try:
            if not migrate:
                self._check_schema()
        except BaseException:
            self._db.dispose()
            raise
        self._insert_contract = self._db.insert_ignore(_contracts).returning(_contracts.c.digest)
        self._insert_key = self._db.insert_ignore(_keys).returning(_keys.c.key_id)
        self._insert_certificate = self._db.insert_ignore(_certificates).returning(
            _certificates.c.certificate_id
        )
        self._insert_receipts = self._db.insert_ignore(_receipts).returning(_receipts.c.receipt_id)
        self._insert_audit: Insert = insert(_audit).returning(_audit.c.id)

    def _check_schema(self) -> None:
        from alembic.runtime.migration import MigrationContext

        def work(conn: Connection) -> str | None:
            return MigrationContext.configure(conn).get_current_revision()

        current = self._db.read(work, snapshot=True)
        head = db.head_revision()
        if current != head:
            raise Unavailable(
                f"control store schema is at revision {current!r}, this build needs {head!r}: "
                "run the migrations (rewardseal-control migrate)"
            )

    # ------------------------------------------------------------------ plumbing

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def store_engine(self) -> StoreEngine:
        """The underlying engine (diagnostics and tests)."""
        return self._db

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self._db.ping()

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._db.dispose()

    def __enter__(self) -> ControlStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_audit(
        self,
        conn: Connection,
        *,
        actor: str,
        action: str,
        target: str,
        reason: str,
        details: Mapping[str, Any],
        at: datetime,
    ) -> int:
        """Append one audit row inside the caller's transaction; its id."""
        row = {
            "at": at,
            "actor": actor,
            "action": action,
            "target": target,
            "reason": reason,
            "details": _details_json(details),
        }
        return int(conn.execute(self._insert_audit, row).scalar_one())

    # ------------------------------------------------------------------ contracts

    def register_contract(
        self, contract: RewardContract, claimed_digest: str | None, *, at: datetime | None = None
    ) -> tuple[str, bool]:
        """Register a contract (R-C-1); ``(digest, created)``.

        The digest is recomputed here; ``claimed_digest`` (the caller's) must equal it (None
        skips the comparison: for callers that hold no claim). Registering the same contract
        again is a no-op (``created`` False): contracts are immutable, a change is a new digest.
        The normalized contract is stored.

        Raises:
            ValidationError: the contract breaks a rule, carries unknown fields, or its digest
                is not ``claimed_digest``.
        """
        if not isinstance(contract, RewardContract):
            raise ValidationError("contract must be a RewardContract")
        validate_contract(contract)
        _no_unknown_fields(contract)
        _text(
            contract.contract_version,
            "contract_version",
            max_length=MAX_CONTRACT_VERSION_LENGTH,
            required=True,
        )
        digest = contract_digest(contract)
        if claimed_digest is not None:
            validate_digest(claimed_digest, "reward_contract_digest")
            if claimed_digest != digest:
                raise ValidationError(
                    f"reward_contract_digest {claimed_digest} does not match the contract: "
                    f"its digest is {digest}"
                )
        row = {
            "digest": digest,
            "contract_id": contract.contract_id,
            "contract_version": contract.contract_version,
            "body": _normalize_contract(contract).SerializeToString(deterministic=True),
            "registered_at": _moment(at),
        }

        def work(conn: Connection) -> bool:
            return conn.execute(self._insert_contract, row).first() is not None

        return digest, self._db.write(work)

    def get_contract(self, digest: str) -> RegisteredContract:
        """The registered contract with ``digest``.

        Raises:
            ValidationError: ``digest`` is not a digest.
            NotFound: no contract has that digest.
        """
        validate_digest(digest, "reward_contract_digest")
        statement = select(*_CONTRACT_COLUMNS).where(_contracts.c.digest == digest)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"reward contract {digest} is not registered")
        return _registered_contract(row)

    def list_contracts(self, page_size: int = 0, page_token: str = "") -> Page[RegisteredContract]:
        """Registered contracts, oldest registration first."""
        order = (_contracts.c.registered_at, _contracts.c.digest)

        def work(conn: Connection) -> tuple[list[_AnyRow], str]:
            return _page(
                conn,
                select(*_CONTRACT_COLUMNS),
                order,
                kind="contracts",
                query=_fingerprint(),
                shape=(datetime, str),
                page_size=page_size,
                page_token=page_token,
            )

        rows, token = self._db.read(work)
        return Page([_registered_contract(row) for row in rows], token)

    # ------------------------------------------------------------------ issuer keys

    def register_issuer_key(
        self, key: IssuerKey, actor: str, reason: str = "", *, at: datetime | None = None
    ) -> tuple[IssuerKey, bool]:
        """Register a worker or organization public key (R-C-2, admin); ``(key, created)``.

        ``key.key_id`` may be empty (it is computed); if given it must be the key id of
        ``key.public_key``. ``not_before`` defaults to now; ``not_after`` (exclusive) is
        optional. Registering the same key again with the same role (and, where given, the
        same window) is a no-op (``created`` False). Audited as ``issuer_key.register``.

        Raises:
            ValidationError: bad key, role, window or text; the key is retired, or already
                registered with another role or window.
        """
        actor = _actor(actor)
        reason = _text(reason, "reason", max_length=MAX_REASON_LENGTH)
        now = _moment(at)
        if not isinstance(key, IssuerKey):
            raise ValidationError("key must be an IssuerKey")
        _no_unknown_fields(key)
        role = _role_name(key.role)
        public_key = bytes(key.public_key)
        try:
            key_id = key_id_for(public_key)
        except SignatureError as exc:
            raise ValidationError(f"public_key: {exc.message}") from None
        if key.key_id and key.key_id != key_id:
            raise ValidationError(
                "key_id does not name public_key (it must be 'ed25519:sha256:' and the hex "
                "SHA-256 of the raw key)"
            )
        if key.retired:
            raise ValidationError("a key cannot be registered as retired")
        display_name = _text(key.display_name, "display_name", max_length=MAX_DISPLAY_NAME_LENGTH)
        given_not_before = _datetime(key.not_before) if key.HasField("not_before") else None
        not_before = given_not_before or now
        not_after = _datetime(key.not_after) if key.HasField("not_after") else None
        if not_after is not None and not_after <= not_before:
            raise ValidationError("not_after must be later than not_before")
        row = {
            "key_id": key_id,
            "public_key": public_key,
            "role": role,
            "display_name": display_name,
            "not_before": not_before,
            "not_after": not_after,
            "retired_at": None,
            "registered_at": now,
        }
        by_id = select(*_KEY_COLUMNS).where(_keys.c.key_id == key_id)

        def work(conn: Connection) -> tuple[IssuerKey, bool]:
            existing = conn.execute(by_id).one_or_none()
            if existing is None:
                if conn.execute(self._insert_key, row).first() is None:
                    raise LostRace("issuer key registered concurrently")
                stored = conn.execute(by_id).one()
                created = True
            else:
                if existing.retired_at is not None:
                    raise ValidationError(
                        f"issuer key {key_id} is retired; a retired key is never registered "
                        "again (register a new key)"
                    )
                if (
                    existing.role != role
                    or (given_not_before is not None and existing.not_before != not_before)
                    or (key.HasField("not_after") and existing.not_after != not_after)
                ):
                    raise ValidationError(
                        f"issuer key {key_id} is already registered with another role or "
                        "validity window; retire it and register a new key"
                    )
                stored = existing
                created = False
            self._write_audit(
                conn,
                actor=actor,
                action=ACTION_REGISTER_KEY,
                target=key_id,
                reason=reason,
                details={"role": role, "created": created},
                at=now,
            )
            return _issuer_key(stored), created

        return self._db.write(work)

    def get_issuer_key(self, key_id: str) -> IssuerKey:
        """A registered key (retired or not).

        Raises:
            ValidationError: ``key_id`` is malformed.
            NotFound: no such key is registered.
        """
        validate_key_id(key_id, "key_id")
        statement = select(*_KEY_COLUMNS).where(_keys.c.key_id == key_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"issuer key {key_id} is not registered")
        return _issuer_key(row)

    def list_issuer_keys(
        self,
        role: int = IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[IssuerKey]:
        """Registered keys (retired ones included), oldest registration first.

        ``role`` UNSPECIFIED lists every role.
        """
        statement = select(*_KEY_COLUMNS)
        role_name = None
        if role != IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED:
            role_name = _role_name(role)
            statement = statement.where(_keys.c.role == role_name)
        order = (_keys.c.registered_at, _keys.c.key_id)

        def work(conn: Connection) -> tuple[list[_AnyRow], str]:
            return _page(
                conn,
                statement,
                order,
                kind="issuer_keys",
                query=_fingerprint(role=role_name),
                shape=(datetime, str),
                page_size=page_size,
                page_token=page_token,
            )

        rows, token = self._db.read(work)
        return Page([_issuer_key(row) for row in rows], token)

    def retire_issuer_key(
        self, key_id: str, actor: str, reason: str, *, at: datetime | None = None
    ) -> IssuerKey:
        """Retire a key (admin) from ``at`` (default now) on; audited as ``issuer_key.retire``.

        A retired key is never active again. Retiring a retired key changes nothing (the
        first retirement time stays) but is audited.

        Raises:
            ValidationError: malformed key id, actor or reason (a reason is required).
            NotFound: no such key is registered.
        """
        validate_key_id(key_id, "key_id")
        actor = _actor(actor)
        reason = _text(reason, "reason", max_length=MAX_REASON_LENGTH, required=True)
        now = _moment(at)
        by_id = select(*_KEY_COLUMNS).where(_keys.c.key_id == key_id)

        def work(conn: Connection) -> IssuerKey:
            existing = conn.execute(by_id.with_for_update()).one_or_none()
            if existing is None:
                raise NotFound(f"issuer key {key_id} is not registered")
            already = existing.retired_at is not None
            if not already:
                conn.execute(update(_keys).where(_keys.c.key_id == key_id).values(retired_at=now))
            self._write_audit(
                conn,
                actor=actor,
                action=ACTION_RETIRE_KEY,
                target=key_id,
                reason=reason,
                details={"role": existing.role, "already_retired": already},
                at=now,
            )
            return _issuer_key(conn.execute(by_id).one())

        return self._db.write(work)

    def active_key(self, key_id: str, role: int, at: datetime | None = None) -> IssuerKey | None:
        """The key if, at ``at`` (default now), it is registered with ``role``, inside its
        validity window (``not_before <= at < not_after``) and not retired; else None.

        Raises:
            ValidationError: malformed key id or a role other than WORKER / ORGANIZATION.
        """
        validate_key_id(key_id, "key_id")
        role_name = _role_name(role)
        moment = _moment(at)
        statement = select(*_KEY_COLUMNS).where(
            _keys.c.key_id == key_id, _keys.c.role == role_name, _active_clause(moment)
        )
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        return None if row is None else _issuer_key(row)

    def trust_set(self, role: int, at: datetime | None = None) -> TrustSet:
        """Every key of ``role`` active at ``at`` (default now), as a TrustSet for verifying."""
        role_name = _role_name(role)
        moment = _moment(at)
        statement = select(_keys.c.public_key).where(
            _keys.c.role == role_name, _active_clause(moment)
        )
        keys = self._db.read(lambda conn: [bytes(k) for k in conn.execute(statement).scalars()])
        return TrustSet(keys)

    def worker_trust(self, at: datetime | None = None) -> TrustSet:
        """The active WORKER keys at ``at`` (default now): what receipts are verified against."""
        return self.trust_set(IssuerKeyRole.ISSUER_KEY_ROLE_WORKER, at)

    # ------------------------------------------------------------------ certificates

    def record_certificate(
        self,
        certificate: RewardCertificate,
        actor: str,
        reason: str = "",
        *,
        at: datetime | None = None,
    ) -> tuple[StoredCertificate, bool]:
        """Store a signed certificate (admin: issued by the service); ``(stored, created)``.

        Checks its shape (``validate_certificate``), that its contract and issuer key are
        registered, and that its id is not taken by another certificate. Recording the same
        certificate again is a no-op (``created`` False). Audited as ``certificate.issue``.
        Whether the issuer key may issue it (active, role, R-MSG-5) is the service's check.

        Raises:
            ValidationError: a malformed certificate, an unregistered issuer key, or an id
                that names another certificate.
            NotFound: its contract is not registered.
        """
        actor = _actor(actor)
        reason = _text(reason, "reason", max_length=MAX_REASON_LENGTH)
        now = _moment(at)
        if not isinstance(certificate, RewardCertificate):
            raise ValidationError("certificate must be a RewardCertificate")
        validate_certificate(certificate)
        _no_unknown_fields(certificate)
        digest = certificate_digest(certificate)
        certificate_id = certificate.certificate_id
        row = {
            "certificate_id": certificate_id,
            "contract_digest": certificate.reward_contract_digest,
            "digest": digest,
            "body": certificate.SerializeToString(deterministic=True),
            "scope": certificate.calibration_scope,
            "issuer": certificate.issuer,
            "issuer_key_id": certificate.issuer_key_id,
            "issued_at_policy_update": certificate.issued_at_policy_update,
            "expiry_policy_updates": certificate.expiry_policy_updates,
            "epsilon": certificate.epsilon,
            "issued_at": _datetime(certificate.issued_at),
        }
        by_id = _CERTIFICATE_SELECT.where(_certificates.c.certificate_id == certificate_id)

        def work(conn: Connection) -> tuple[StoredCertificate, bool]:
            existing = conn.execute(by_id).one_or_none()
            if existing is not None:
                if existing.digest != digest:
                    raise ValidationError(
                        f"certificate_id {certificate_id} already names another certificate"
                    )
                created = False
                stored = existing
            else:
                self._require_contract(conn, certificate.reward_contract_digest)
                key_known = conn.execute(
                    select(_keys.c.key_id).where(_keys.c.key_id == certificate.issuer_key_id)
                ).first()
                if key_known is None:
                    raise ValidationError(
                        f"issuer key {certificate.issuer_key_id} is not registered"
                    )
                if conn.execute(self._insert_certificate, row).first() is None:
                    raise LostRace("certificate recorded concurrently")
                created = True
                stored = conn.execute(by_id).one()
            self._write_audit(
                conn,
                actor=actor,
                action=ACTION_ISSUE_CERTIFICATE,
                target=certificate_id,
                reason=reason,
                details={
                    "reward_contract_digest": certificate.reward_contract_digest,
                    "certificate_digest": digest,
                    "issuer_key_id": certificate.issuer_key_id,
                    "calibration_scope": certificate.calibration_scope,
                    "issuer": certificate.issuer,
                    "created": created,
                },
                at=now,
            )
            return _stored_certificate(stored), created

        return self._db.write(work)

    @staticmethod
    def _require_contract(conn: Connection, digest: str) -> None:
        found = conn.execute(select(_contracts.c.digest).where(_contracts.c.digest == digest))
        if found.first() is None:
            raise NotFound(f"reward contract {digest} is not registered")

    def get_certificate(self, certificate_id: str) -> StoredCertificate:
        """A recorded certificate with its digest and revocation.

        Raises:
            ValidationError: malformed id.
            NotFound: no such certificate.
        """
        validate_id(certificate_id, "certificate_id")
        statement = _CERTIFICATE_SELECT.where(_certificates.c.certificate_id == certificate_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"certificate {certificate_id} is not known")
        return _stored_certificate(row)

    def list_certificates(
        self, contract_digest: str | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[StoredCertificate]:
        """Recorded certificates (of one contract, when given), oldest ``issued_at`` first."""
        statement = _CERTIFICATE_SELECT
        if contract_digest is not None:
            validate_digest(contract_digest, "reward_contract_digest")
            statement = statement.where(_certificates.c.contract_digest == contract_digest)
        order = (_certificates.c.issued_at, _certificates.c.certificate_id)

        def work(conn: Connection) -> tuple[list[_AnyRow], str]:
            return _page(
                conn,
                statement,
                order,
                kind="certificates",
                query=_fingerprint(contract=contract_digest),
                shape=(datetime, str),
                page_size=page_size,
                page_token=page_token,
            )

        rows, token = self._db.read(work, snapshot=True)
        return Page([_stored_certificate(row) for row in rows], token)

    # ------------------------------------------------------------------ revocation

    def revoke(
        self,
        certificate_id: str,
        reason: str,
        actor: str,
        *,
        sign: RevocationSigner,
        ttl: timedelta = DEFAULT_LIST_TTL,
        at: datetime | None = None,
    ) -> tuple[RevocationHead, bool]:
        """Revoke a certificate (R-C-4, admin) and publish the next signed list, atomically.

        The new list (version = head + 1, issued ``at``, expiring ``at + ttl``, every revoked
        certificate sorted by id) is signed by ``sign`` inside the transaction and stored as the
        new head; ``(head, True)``. Revoking a revoked certificate changes nothing and returns
        ``(current head, False)``. Audited as ``certificate.revoke`` either way.

        Raises:
            ValidationError: malformed id, actor, reason (required) or ttl; ``sign`` returned
                something that is not the list it was given.
            NotFound: no such certificate.
        """
        validate_id(certificate_id, "certificate_id")
        reason = _text(reason, "reason", max_length=MAX_REASON_LENGTH, required=True)
        actor = _actor(actor)
        now = _moment(at)
        _check_ttl(ttl)

        def work(conn: Connection) -> tuple[RevocationHead, bool]:
            self._db.advisory_lock(conn, _REVOCATION_LOCK_KEY)
            known = conn.execute(
                select(_certificates.c.certificate_id).where(
                    _certificates.c.certificate_id == certificate_id
                )
            ).first()
            if known is None:
                raise NotFound(f"certificate {certificate_id} is not known")
            already = conn.execute(
                select(_revocations.c.list_version).where(
                    _revocations.c.certificate_id == certificate_id
                )
            ).first()
            head = self._read_head(conn)
            created = already is None or head is None
            if created:
                version = (head.version if head is not None else 0) + 1
                if already is None:
                    conn.execute(
                        insert(_revocations).values(
                            certificate_id=certificate_id,
                            reason=reason,
                            revoked_at=now,
                            list_version=version,
                        )
                    )
                head = self._publish(conn, sign, ttl, now, version)
            assert head is not None
            self._write_audit(
                conn,
                actor=actor,
                action=ACTION_REVOKE_CERTIFICATE,
                target=certificate_id,
                reason=reason,
                details={"list_version": head.version, "already_revoked": already is not None},
                at=now,
            )
            return head, created

        return self._db.write(work)

    def publish_revocation_list(
        self,
        *,
        sign: RevocationSigner,
        ttl: timedelta = DEFAULT_LIST_TTL,
        at: datetime | None = None,
    ) -> RevocationHead:
        """Sign the current entries as the next version (head + 1; 1 for the first list).

        For the first list at start-up and for re-signing before the head expires, so that a
        follower never holds a frozen list. Not an admin action (not audited).

        Raises:
            ValidationError: bad ttl; ``sign`` returned something that is not the list.
        """
        now = _moment(at)
        _check_ttl(ttl)

        def work(conn: Connection) -> RevocationHead:
            self._db.advisory_lock(conn, _REVOCATION_LOCK_KEY)
            head = self._read_head(conn)
            version = (head.version if head is not None else 0) + 1
            return self._publish(conn, sign, ttl, now, version)

        return self._db.write(work)

    def _publish(
        self,
        conn: Connection,
        sign: RevocationSigner,
        ttl: timedelta,
        now: datetime,
        version: int,
    ) -> RevocationHead:
        """Build, sign and store list ``version`` from the current revocations."""
        rows = conn.execute(
            select(
                _revocations.c.certificate_id, _revocations.c.reason, _revocations.c.revoked_at
            ).order_by(_revocations.c.certificate_id)
        ).all()
        expires_at = now + ttl
        unsigned = RevocationList(
            version=version,
            issued_at=_timestamp(now),
            expires_at=_timestamp(expires_at),
            entries=[
                RevocationEntry(
                    certificate_id=row.certificate_id,
                    reason=row.reason,
                    revoked_at=_timestamp(row.revoked_at),
                )
                for row in rows
            ],
        )
        envelope = sign(RevocationList.FromString(unsigned.SerializeToString()))
        _check_signed_list(envelope, unsigned)
        conn.execute(
            insert(_heads).values(
                version=version,
                envelope=envelope.SerializeToString(deterministic=True),
                issued_at=now,
                expires_at=expires_at,
            )
        )
        return RevocationHead(
            version=version, envelope=envelope, issued_at=now, expires_at=expires_at
        )

    @staticmethod
    def _read_head(conn: Connection) -> RevocationHead | None:
        row = conn.execute(
            select(*_HEAD_COLUMNS).order_by(_heads.c.version.desc()).limit(1)
        ).one_or_none()
        return None if row is None else _head(row)

    def revocation_head(self) -> RevocationHead | None:
        """The newest signed revocation list; None before the first is published."""
        return self._db.read(self._read_head)

    def get_revocation_list(self, version: int) -> RevocationHead:
        """The signed list of one version (every version ever issued is kept).

        Raises:
            NotFound: no list has that version.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValidationError("version must be a positive integer")
        statement = select(*_HEAD_COLUMNS).where(_heads.c.version == version)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"revocation list version {version} does not exist")
        return _head(row)

    def revocation(self, certificate_id: str) -> RevocationRecord | None:
        """The revocation of a certificate, or None if it is not revoked."""
        validate_id(certificate_id, "certificate_id")
        statement = select(_revocations).where(_revocations.c.certificate_id == certificate_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            return None
        return RevocationRecord(
            certificate_id=row.certificate_id,
            reason=row.reason,
            revoked_at=row.revoked_at,
            list_version=int(row.list_version),
        )

    # ------------------------------------------------------------------ receipts

    def record_receipts(
        self, envelopes: Sequence[SignedEnvelope], *, at: datetime | None = None
    ) -> list[RecordResult]:
        """Store forwarded receipt envelopes in ONE transaction; one result per item, in order.

        The caller (the service) has verified each envelope's signature against
        :meth:`worker_trust`. Here each payload is parsed strictly (no unknown fields) and
        validated again, and its privacy-safe columns are stored with the envelope. Per item,
        the first rule that fires wins:

        1. bad payload type, unparsable payload, a rule broken, envelope flags that disagree
           with the payload -> ValidationError;
        2. the receipt id is stored already: same payload -> ``recorded, duplicate``;
           another payload -> ValidationError;
        3. the episode has another receipt -> DuplicateEpisode (metadata ``receipt_id``);
        4. the contract is not registered -> NotFound;
        5. the issuer key is not registered -> SignatureError (``signature_invalid``);
        6. otherwise stored -> ``recorded``.

        A refused item never fails the others. Durable before return.
        """
        now = _moment(at)
        results: list[RecordResult | None] = [None] * len(envelopes)
        parsed: list[tuple[int, RewardEvidenceReceipt, dict[str, Any]]] = []
        for index, envelope in enumerate(envelopes):
            try:
                receipt, row = _receipt_row(envelope, now)
            except RewardSealError as exc:
                results[index] = RecordResult(receipt_id="", recorded=False, error=exc)
                continue
            parsed.append((index, receipt, row))
        # The signed bytes of each item: what "the same receipt" means for idempotency.
        payloads = {index: bytes(envelopes[index].payload) for index, _, _ in parsed}
        if not parsed:
            return [r for r in results if r is not None]
        digests = sorted({receipt.reward_contract_digest for _, receipt, _ in parsed})
        key_ids = sorted({receipt.issuer_key_id for _, receipt, _ in parsed})

        def work(conn: Connection) -> list[RecordResult]:
            # One statement per chunk of items reads what exists under their receipt ids OR
            # their episode ids, so an item's two lookups see one state of the table.
            payload_by_id: dict[str, bytes] = {}
            receipt_by_episode: dict[str, str] = {}
            for batch in chunks(parsed):
                found = conn.execute(
                    select(
                        _receipts.c.receipt_id, _receipts.c.episode_id, _receipts.c.envelope
                    ).where(
                        or_(
                            _receipts.c.receipt_id.in_([r.receipt_id for _, r, _ in batch]),
                            _receipts.c.episode_id.in_([r.episode_id for _, r, _ in batch]),
                        )
                    )
                )
                for receipt_id, episode_id, stored in found:
                    payload_by_id[receipt_id] = SignedEnvelope.FromString(bytes(stored)).payload
                    receipt_by_episode[episode_id] = receipt_id
            contracts: set[str] = set()
            for chunk in chunks(digests):
                contracts.update(
                    conn.execute(
                        select(_contracts.c.digest).where(_contracts.c.digest.in_(chunk))
                    ).scalars()
                )
            keys: set[str] = set()
            for chunk in chunks(key_ids):
                keys.update(
                    conn.execute(select(_keys.c.key_id).where(_keys.c.key_id.in_(chunk))).scalars()
                )
            decided = list(results)
            rows: list[dict[str, Any]] = []
            for index, receipt, row in parsed:
                receipt_id = receipt.receipt_id
                previous = payload_by_id.get(receipt_id)
                error: RewardSealError | None = None
                if previous is not None:
                    if previous == payloads[index]:
                        decided[index] = RecordResult(receipt_id, recorded=True, duplicate=True)
                        continue
                    error = ValidationError(
                        f"receipt {receipt_id} is already recorded with other content"
                    )
                elif receipt_by_episode.get(receipt.episode_id) == receipt_id:
                    # Committed concurrently between two reads: read again.
                    raise LostRace("receipt recorded concurrently")
                elif receipt.episode_id in receipt_by_episode:
                    error = DuplicateEpisode(
                        f"episode {receipt.episode_id} already has a receipt",
                        metadata={"receipt_id": receipt_by_episode[receipt.episode_id]},
                    )
                elif receipt.reward_contract_digest not in contracts:
                    error = NotFound(
                        f"reward contract {receipt.reward_contract_digest} is not registered"
                    )
                elif receipt.issuer_key_id not in keys:
                    error = SignatureError(
                        f"issuer key {receipt.issuer_key_id} is not a registered worker key"
                    )
                if error is not None:
                    decided[index] = RecordResult(receipt_id, recorded=False, error=error)
                    continue
                payload_by_id[receipt_id] = payloads[index]
                receipt_by_episode[receipt.episode_id] = receipt_id
                rows.append(row)
                decided[index] = RecordResult(receipt_id, recorded=True)
            if rows:
                inserted = conn.execute(self._insert_receipts, rows).scalars().all()
                if len(inserted) != len(rows):
                    raise LostRace("receipt recorded concurrently")
            return [r for r in decided if r is not None]

        return self._db.write(work)

    def get_receipt(self, receipt_id: str) -> StoredReceipt:
        """A recorded receipt.

        Raises:
            ValidationError: malformed id.
            NotFound: no such receipt.
        """
        validate_id(receipt_id, "receipt_id")
        statement = _RECEIPT_SELECT.where(_receipts.c.receipt_id == receipt_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"receipt {receipt_id} is not recorded")
        return _stored_receipt(row)

    def list_receipts(
        self, filters: ReceiptFilter | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[StoredReceipt]:
        """Recorded receipts matching ``filters``, by policy update then receipt id.

        Raises:
            ValidationError: a malformed filter (digest, outcome, update range) or page token.
        """
        filters = filters or ReceiptFilter()
        conditions, query = _receipt_conditions(filters)
        statement = _RECEIPT_SELECT.where(*conditions)
        order = (_receipts.c.policy_update, _receipts.c.receipt_id)

        def work(conn: Connection) -> tuple[list[_AnyRow], str]:
            return _page(
                conn,
                statement,
                order,
                kind="receipts",
                query=query,
                shape=(int, str),
                page_size=page_size,
                page_token=page_token,
            )

        rows, token = self._db.read(work)
        return Page([_stored_receipt(row) for row in rows], token)

    def receipt_summary(self, contract_digest: str) -> ReceiptSummary:
        """Counts by outcome, certified and unscored receipts of one registered contract.

        Raises:
            ValidationError: malformed digest.
            NotFound: the contract is not registered.
        """
        validate_digest(contract_digest, "reward_contract_digest")
        statement = (
            select(_receipts.c.reward_outcome, _receipts.c.certified, func.count())
            .where(_receipts.c.contract_digest == contract_digest)
            .group_by(_receipts.c.reward_outcome, _receipts.c.certified)
        )

        def work(conn: Connection) -> list[_AnyRow]:
            self._require_contract(conn, contract_digest)
            return list(conn.execute(statement))

        rows = self._db.read(work, snapshot=True)
        counts: dict[int, int] = {}
        certified = unscored = 0
        for outcome, is_certified, count in rows:
            counts[int(outcome)] = counts.get(int(outcome), 0) + int(count)
            if is_certified:
                certified += int(count)
            if outcome in UNSCORED_OUTCOMES:
                unscored += int(count)
        return ReceiptSummary(
            contract_digest=contract_digest,
            total=sum(counts.values()),
            counts=MappingProxyType(dict(sorted(counts.items()))),
            certified=certified,
            unscored=unscored,
        )

    # ------------------------------------------------------------------ audit

    def audit(
        self,
        actor: str,
        action: str,
        target: str,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
        *,
        at: datetime | None = None,
    ) -> AuditEntry:
        """Append one audit row in its own transaction (for actions outside this module's
        admin methods, e.g. a refused admin call); the entry written.

        ``details`` must be a JSON object of plain values; never put a token or record
        contents in it.
        """
        actor = _actor(actor)
        if not isinstance(action, str) or not ACTION_PATTERN.match(action):
            raise ValidationError(
                "action must be a dotted lowercase name (e.g. certificate.revoke)"
            )
        target = _text(target, "target", max_length=MAX_TARGET_LENGTH)
        reason = _text(reason, "reason", max_length=MAX_REASON_LENGTH)
        document = dict(details or {})
        _details_json(document)
        now = _moment(at)

        def work(conn: Connection) -> int:
            return self._write_audit(
                conn,
                actor=actor,
                action=action,
                target=target,
                reason=reason,
                details=document,
                at=now,
            )

        entry_id = self._db.write(work)
        return AuditEntry(
            id=entry_id,
            at=now,
            actor=actor,
            action=action,
            target=target,
            reason=reason,
            details=MappingProxyType(json.loads(_details_json(document))),
        )

    def list_audit(
        self, *, action: str | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[AuditEntry]:
        """The audit log in the order written (of one action, when given)."""
        statement = select(*_AUDIT_COLUMNS)
        if action is not None:
            if not isinstance(action, str) or not ACTION_PATTERN.match(action):
                raise ValidationError("action must be a dotted lowercase name")
            statement = statement.where(_audit.c.action == action)
        order = (_audit.c.id,)

        def work(conn: Connection) -> tuple[list[_AnyRow], str]:
            return _page(
                conn,
                statement,
                order,
                kind="audit",
                query=_fingerprint(action=action),
                shape=(int,),
                page_size=page_size,
                page_token=page_token,
            )

        rows, token = self._db.read(work)
        return Page([_audit_entry(row) for row in rows], token)


# ---------------------------------------------------------------------- helpers


def _check_ttl(ttl: timedelta) -> None:
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ValidationError("the revocation list ttl must be a positive timedelta")


def _check_signed_list(envelope: SignedEnvelope, unsigned: RevocationList) -> None:
    """The signer must return an envelope over the very list it was given."""
    if not isinstance(envelope, SignedEnvelope):
        raise ValidationError("the revocation list signer must return a SignedEnvelope")
    if envelope.payload_type != REVOCATION_LIST_PAYLOAD_TYPE:
        raise ValidationError("the signed revocation list has the wrong payload type")
    if not envelope.signatures:
        raise ValidationError("the revocation list envelope carries no signature")
    try:
        signed = parse_strict(RevocationList, envelope.payload)
    except ValidationError as exc:
        raise ValidationError(f"the signed revocation list does not parse: {exc}") from None
    signed.ClearField("issuer_key_id")
    if signed != unsigned:
        raise ValidationError("the signer signed another revocation list than it was given")


def _details_json(details: Mapping[str, Any]) -> str:
    if not isinstance(details, Mapping) or not all(isinstance(k, str) for k in details):
        raise ValidationError("audit details must be a JSON object")
    try:
        return json.dumps(dict(details), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"audit details are not plain JSON: {exc}") from None


def _receipt_row(
    envelope: SignedEnvelope, now: datetime
) -> tuple[RewardEvidenceReceipt, dict[str, Any]]:
    """Parse, check and flatten one forwarded envelope into its privacy-safe row."""
    if not isinstance(envelope, SignedEnvelope):
        raise ValidationError("each receipt must be a SignedEnvelope")
    if envelope.payload_type != RECEIPT_PAYLOAD_TYPE:
        raise ValidationError(
            f"payload type {preview(envelope.payload_type)} is not a receipt "
            f"({RECEIPT_PAYLOAD_TYPE})"
        )
    if not envelope.signatures:
        raise SignatureError("the receipt envelope carries no signature")
    try:
        _no_unknown_fields(envelope)
    except ValidationError:
        raise ValidationError(
            "the receipt envelope carries fields this schema does not know"
        ) from None
    receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
    validate_receipt(receipt)
    if envelope.execute_seal or envelope.production_seal or envelope.flow_governed_policy:
        raise ValidationError("a reward receipt envelope never claims a seal or a governed policy")
    if envelope.unscored != is_unscored(receipt):
        raise ValidationError("the envelope's unscored flag disagrees with the receipt")
    return receipt, {
        "receipt_id": receipt.receipt_id,
        "episode_id": receipt.episode_id,
        "contract_digest": receipt.reward_contract_digest,
        "policy_checkpoint_id": receipt.policy_checkpoint_id,
        "policy_update": receipt.policy_update,
        "oracle_tier": receipt.oracle_tier,
        "reward_outcome": receipt.reward_outcome,
        "scalar_reward": receipt.scalar_reward if receipt.HasField("scalar_reward") else None,
        "certified": receipt.certified,
        "development_only": receipt.development_only,
        "certificate_id": receipt.certificate_id or None,
        "certificate_state": receipt.certificate_state,
        "calibration_scope": receipt.calibration_scope,
        "issuer_key_id": receipt.issuer_key_id,
        "issued_at": _datetime(receipt.issued_at),
        "envelope": envelope.SerializeToString(deterministic=True),
        "recorded_at": now,
    }


def _receipt_conditions(filters: ReceiptFilter) -> tuple[list[ColumnElement[bool]], str]:
    """WHERE clauses of a receipt filter and the fingerprint bound into its page tokens."""
    if not isinstance(filters, ReceiptFilter):
        raise ValidationError("filters must be a ReceiptFilter")
    conditions: list[ColumnElement[bool]] = []
    if filters.contract_digest is not None:
        validate_digest(filters.contract_digest, "reward_contract_digest")
        conditions.append(_receipts.c.contract_digest == filters.contract_digest)
    outcome = filters.reward_outcome or None
    if outcome is not None:
        if outcome not in RewardOutcome.values():
            raise ValidationError(f"reward_outcome {outcome} is not a known outcome")
        conditions.append(_receipts.c.reward_outcome == outcome)
    if filters.certified is not None:
        if not isinstance(filters.certified, bool):
            raise ValidationError("certified must be a boolean")
        conditions.append(_receipts.c.certified == filters.certified)
    low, high = filters.min_policy_update, filters.max_policy_update
    for value, name in ((low, "min_policy_update"), (high, "max_policy_update")):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationError(f"{name} must be an integer")
            check_policy_update_field(value, name)
    if low is not None and high is not None and low > high:
        raise ValidationError("min_policy_update must not exceed max_policy_update")
    if low is not None:
        conditions.append(_receipts.c.policy_update >= low)
    if high is not None:
        conditions.append(_receipts.c.policy_update <= high)
    query = _fingerprint(
        contract=filters.contract_digest,
        outcome=outcome,
        certified=filters.certified,
        low=low,
        high=high,
    )
    return conditions, query
