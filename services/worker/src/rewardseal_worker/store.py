"""The worker's durable store (R-W-3, R-W-7, R-W-8): open episodes, receipts, credits, ledger,
and the outbox of receipts to forward to the control plane (R-C-5).

SQLAlchemy 2 Core over SQLite (the default; WAL, ``synchronous=FULL``, ``busy_timeout``) or
PostgreSQL (``postgresql+psycopg://...``). Every write is one transaction and is durable when the
method returns.

The store is set-based: a scoring batch costs a constant number of statements, whatever its
size (lists of ids are bound as ``IN`` parameters, in chunks of :data:`IN_CHUNK`). The batch
methods are :meth:`WorkerStore.lookup` and :meth:`WorkerStore.credited_for` (the reads before
judging), :meth:`WorkerStore.commit_receipts` and :meth:`WorkerStore.begin_episodes`; the
single-item methods remain for callers that need one row.

Concurrency model, which holds across threads, processes and replicas sharing one PostgreSQL:

* SQLite: every write transaction starts with ``BEGIN IMMEDIATE``, so writers are serialized by
  the database lock (waiting up to ``busy_timeout``) and a read-then-write never fails midway.
  Threads sharing one ``WorkerStore`` queue on an in-process lock first (the write gate of
  :class:`~rewardseal.sqlstore.StoreEngine`).
* PostgreSQL (READ COMMITTED): ``commit_receipts`` first locks (``SELECT ... ORDER BY ... FOR
  UPDATE``, creating missing rows) the policy-ledger row of every contract in the batch, in
  sorted order. Everything a receipt commit checks for a contract (existing receipts of its
  episodes, ledger, credited records) is read after that lock is held, so those reads are
  authoritative against every other writer of that contract. ``begin_episodes`` locks the open
  registrations it reads (``FOR UPDATE``).
* Both: rows are inserted with ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` and the number
  of rows inserted is checked against what was decided. A shortfall means a concurrent writer
  the locks do not cover won a row (the same episode id committed under another contract, or an
  open registration inserted between our read and our insert): the whole transaction is rolled
  back and run again, and its reads then see the winner. Nothing is ever stored partially.
  Deadlocks and serialization failures (SQLSTATE 40P01 / 40001) are retried the same way.

The outbox (``WorkerStore(url, outbox=True)``): every receipt :meth:`WorkerStore.commit_receipts`
stores gets an outbox row (its id and envelope) in the same transaction, so no receipt is
stored without its row and no row exists without its receipt. A forwarder reads due rows
(:meth:`WorkerStore.outbox_due`), deletes what control recorded (:meth:`WorkerStore.outbox_done`)
and backs off the rest (:meth:`WorkerStore.outbox_later`): delivery is at least once, and control
is idempotent by receipt id. Scoring never waits on control. The table always exists, so
forwarding can be turned on later; it then forwards receipts committed from then on.

The SQL plumbing (URLs, engine, transactions, error mapping) is :mod:`rewardseal.sqlstore`.
Only :mod:`rewardseal.errors` classes leave this module: a database that cannot be reached
becomes :class:`~rewardseal.errors.Unavailable`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine, Row

from rewardseal.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    RewardSealError,
    ValidationError,
)
from rewardseal.sqlstore import IN_CHUNK, LostRace, StoreEngine, UTCDateTime, as_utc, chunks

__all__ = [
    "IN_CHUNK",
    "OUTBOX_ERROR_MAX",
    "REVOCATION_VERSION",
    "BatchLookup",
    "BeginItem",
    "CommitResult",
    "OpenEpisode",
    "OutboxItem",
    "ReceiptToCommit",
    "StoredReceipt",
    "WorkerStore",
]

Record = dict[str, Any]

_STORE_NAME = "worker store"
_SCHEMA_LOCK_KEY = 0x7265_7761_7264  # pg_advisory_xact_lock key serializing CREATE TABLE
OUTBOX_ERROR_MAX = 500
"""Longest ``last_error`` kept on an outbox row (longer text is cut)."""


metadata = MetaData()

open_episodes = Table(
    "open_episodes",
    metadata,
    Column("contract_digest", String, primary_key=True),
    Column("identity_key", String, primary_key=True),
    Column("episode_id", String, nullable=False, unique=True),
    Column("identity", JSON, nullable=False),
    Column("baseline", JSON(none_as_null=True), nullable=True),
    Column("begun_at", UTCDateTime, nullable=False),
)

receipts = Table(
    "receipts",
    metadata,
    Column("receipt_id", String, primary_key=True),
    Column("episode_id", String, nullable=False, unique=True),
    Column("contract_digest", String, nullable=False),
    Column("policy_update", BigInteger, nullable=False),
    Column("envelope", LargeBinary, nullable=False),
    Column("evidence", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

credited_records = Table(
    "credited_records",
    metadata,
    Column("contract_digest", String, primary_key=True),
    Column("record_id", String, primary_key=True),
    Column("receipt_id", String, ForeignKey("receipts.receipt_id"), nullable=False),
    # The identity the crediting episode was judged for (None when the item carried none).
    Column("identity_key", String, nullable=True),
    Index("ix_credited_records_identity", "contract_digest", "identity_key"),
)

policy_ledger = Table(
    "policy_ledger",
    metadata,
    Column("contract_digest", String, primary_key=True),
    # NULL: the row exists (it serves as the contract's lock) but nothing was committed yet.
    Column("highest_update", BigInteger, nullable=True),
)

# Receipts waiting to be forwarded to the control plane (R-C-5); a row is deleted once control
# has recorded its receipt.
outbox = Table(
    "outbox",
    metadata,
    Column("receipt_id", String, ForeignKey("receipts.receipt_id"), primary_key=True),
    Column("envelope", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # The receipt's place among those its commit stored: orders rows of one commit (they share
    # created_at) as the batch did.
    Column("batch_index", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    # Why the last attempt failed: text the forwarder wrote, never record contents.
    Column("last_error", String, nullable=True),
    Index("ix_outbox_due", "next_attempt_at"),
    Index("ix_outbox_age", "created_at", "batch_index"),
)

# Small facts the worker keeps across restarts, by name (e.g. the highest revocation-list version
# it accepted, so a restart cannot be fed an older list). Values only ever rise.
worker_state = Table(
    "worker_state",
    metadata,
    Column("name", String, primary_key=True),
    Column("int_value", BigInteger, nullable=False),
)

REVOCATION_VERSION = "revocation_list_version"
"""The :data:`worker_state` name of the highest revocation-list version accepted (R-C-4)."""


# ---------------------------------------------------------------------- statements
#
# Built once: SQLAlchemy caches a statement's compiled form, and reusing the same object skips
# building the expression and its cache key on every call. Lists are expanding bind parameters.

_RECEIPT_BY_EPISODE = select(
    receipts.c.receipt_id,
    receipts.c.episode_id,
    receipts.c.contract_digest,
    receipts.c.envelope,
    receipts.c.evidence,
).where(receipts.c.episode_id == bindparam("episode_id"))

_RECEIPT_BY_ID = select(
    receipts.c.receipt_id,
    receipts.c.episode_id,
    receipts.c.contract_digest,
    receipts.c.envelope,
    receipts.c.evidence,
).where(receipts.c.receipt_id == bindparam("receipt_id"))

_RECEIPT_IDS_OF_EPISODES = select(receipts.c.episode_id, receipts.c.receipt_id).where(
    receipts.c.episode_id.in_(bindparam("episode_ids", expanding=True))
)

_EPISODES_OF_RECEIPT_IDS = select(receipts.c.receipt_id, receipts.c.episode_id).where(
    receipts.c.receipt_id.in_(bindparam("receipt_ids", expanding=True))
)

_COUNT_RECEIPTS = select(func.count()).select_from(receipts)

_OPEN_EPISODE = select(
    open_episodes.c.identity_key,
    open_episodes.c.identity,
    open_episodes.c.baseline,
    open_episodes.c.begun_at,
).where(
    open_episodes.c.contract_digest == bindparam("contract_digest"),
    open_episodes.c.episode_id == bindparam("episode_id"),
)

_OPEN_EPISODES = select(
    open_episodes.c.episode_id,
    open_episodes.c.identity_key,
    open_episodes.c.identity,
    open_episodes.c.baseline,
    open_episodes.c.begun_at,
).where(
    open_episodes.c.contract_digest == bindparam("contract_digest"),
    open_episodes.c.episode_id.in_(bindparam("episode_ids", expanding=True)),
)

# The registrations a batch of begins can meet: its episode ids anywhere, and its (contract,
# identity) slots (the contract x identity product, filtered in Python), locked in one order.
_OPEN_FOR_BEGIN = (
    select(
        open_episodes.c.contract_digest,
        open_episodes.c.identity_key,
        open_episodes.c.episode_id,
        open_episodes.c.begun_at,
    )
    .where(
        or_(
            open_episodes.c.episode_id.in_(bindparam("episode_ids", expanding=True)),
            and_(
                open_episodes.c.contract_digest.in_(bindparam("contracts", expanding=True)),
                open_episodes.c.identity_key.in_(bindparam("identity_keys", expanding=True)),
            ),
        )
    )
    .order_by(open_episodes.c.contract_digest, open_episodes.c.identity_key)
    .with_for_update()
)

_CLOSE_OPEN_EPISODES = delete(open_episodes).where(
    open_episodes.c.episode_id.in_(bindparam("episode_ids", expanding=True))
)

_HIGHEST = select(policy_ledger.c.highest_update).where(
    policy_ledger.c.contract_digest == bindparam("contract_digest")
)

# FOR UPDATE is applied after ORDER BY in PostgreSQL: the rows are locked in sorted order.
_LOCK_LEDGERS = (
    select(policy_ledger.c.contract_digest, policy_ledger.c.highest_update)
    .where(policy_ledger.c.contract_digest.in_(bindparam("contracts", expanding=True)))
    .order_by(policy_ledger.c.contract_digest)
    .with_for_update()
)

_RAISE_LEDGER = (
    update(policy_ledger)
    .where(policy_ledger.c.contract_digest == bindparam("b_contract"))
    .values(highest_update=bindparam("b_highest"))
)

_CREDITED_ONE = select(credited_records.c.record_id).where(
    credited_records.c.contract_digest == bindparam("contract_digest"),
    or_(
        credited_records.c.identity_key == bindparam("identity_key"),
        credited_records.c.identity_key.is_(None),
    ),
)

_CREDITED_BY_KEYS_AND_ANONYMOUS = select(
    credited_records.c.identity_key, credited_records.c.record_id
).where(
    credited_records.c.contract_digest == bindparam("contract_digest"),
    or_(
        credited_records.c.identity_key.in_(bindparam("identity_keys", expanding=True)),
        credited_records.c.identity_key.is_(None),
    ),
)

_CREDITED_BY_KEYS = select(credited_records.c.identity_key, credited_records.c.record_id).where(
    credited_records.c.contract_digest == bindparam("contract_digest"),
    credited_records.c.identity_key.in_(bindparam("identity_keys", expanding=True)),
)

# Credited (contract, record) pairs among a batch's records (contract x record product, filtered
# in Python: a batch almost always has one contract).
_TAKEN_RECORDS = select(credited_records.c.contract_digest, credited_records.c.record_id).where(
    credited_records.c.contract_digest.in_(bindparam("contracts", expanding=True)),
    credited_records.c.record_id.in_(bindparam("record_ids", expanding=True)),
)


_INSERT_OUTBOX = insert(outbox)

_OUTBOX_DUE = (
    select(outbox.c.receipt_id, outbox.c.envelope, outbox.c.attempts)
    .where(outbox.c.next_attempt_at <= bindparam("now", type_=UTCDateTime))
    .order_by(outbox.c.created_at, outbox.c.batch_index, outbox.c.receipt_id)
    .limit(bindparam("limit", type_=Integer))
)

_OUTBOX_DONE = delete(outbox).where(
    outbox.c.receipt_id.in_(bindparam("receipt_ids", expanding=True))
)

_OUTBOX_LATER = (
    update(outbox)
    .where(outbox.c.receipt_id.in_(bindparam("receipt_ids", expanding=True)))
    .values(
        attempts=outbox.c.attempts + 1,
        next_attempt_at=bindparam("b_next", type_=UTCDateTime),
        last_error=bindparam("b_error", type_=String),
    )
)

_OUTBOX_SIZE = select(func.count()).select_from(outbox)

_STATE_VALUE = select(worker_state.c.int_value).where(worker_state.c.name == bindparam("name"))
# Raise only: a lower value (an older run, a slower replica) never lowers what is stored.
_STATE_RAISE = (
    update(worker_state)
    .where(worker_state.c.name == bindparam("b_name"))
    .where(worker_state.c.int_value < bindparam("b_value"))
    .values(int_value=bindparam("b_value"))
)

_OUTBOX_OLDEST = select(func.min(outbox.c.created_at))


# ---------------------------------------------------------------------- values


@dataclass(frozen=True)
class StoredReceipt:
    """A committed receipt as kept by the worker."""

    receipt_id: str
    episode_id: str
    contract_digest: str
    envelope: bytes
    """The serialized ``SignedEnvelope`` of the receipt."""
    evidence: bytes
    """Canonical JSON of the evidence document (its digest is on the receipt)."""


@dataclass(frozen=True)
class ReceiptToCommit:
    """One signed receipt to store, with what its commit must record."""

    receipt_id: str
    episode_id: str
    contract_digest: str
    policy_update: int
    identity_key: str | None
    """Canonical identity string (``canonical_json(identity).decode()``), or None if unknown."""
    envelope: bytes
    evidence: bytes
    credited_record_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitResult:
    """What happened to one :class:`ReceiptToCommit`.

    Exactly one of these holds: the receipt was stored (``duplicate_of`` is None, ``regressed``
    and ``jumped`` are False and ``credit_conflicts`` is empty); the episode already had a
    receipt (``duplicate_of`` names it); the policy update went backwards (``regressed``); it
    went further forward than one call may move the ledger (``jumped``); or a record to credit
    is already credited to another receipt (``credit_conflicts`` names them: the caller must
    judge again with the fresh credited set). Only in the first case was anything stored for
    the item.
    """

    receipt_id: str
    duplicate_of: str | None = None
    regressed: bool = False
    credit_conflicts: tuple[str, ...] = ()
    jumped: bool = False

    @property
    def stored(self) -> bool:
        """True when this item's receipt was committed by this call."""
        return (
            self.duplicate_of is None
            and not self.regressed
            and not self.jumped
            and not self.credit_conflicts
        )


@dataclass(frozen=True)
class OpenEpisode:
    """A registered (BeginEpisode) episode that has no receipt yet."""

    identity_key: str
    identity: dict[str, str]
    baseline: list[Record] | None
    begun_at: datetime


@dataclass(frozen=True)
class BatchLookup:
    """What a scoring batch needs to know about its episodes before judging (one read)."""

    receipts: Mapping[str, str]
    """episode_id -> receipt_id, for the episodes that already have a receipt (any contract)."""
    open: Mapping[str, OpenEpisode]
    """episode_id -> registration, for the episodes open on the looked-up contract."""
    highest: int | None
    """The contract's highest committed policy update, or None if none was (R-W-7)."""


@dataclass(frozen=True)
class OutboxItem:
    """A stored receipt waiting to be forwarded to the control plane."""

    receipt_id: str
    envelope: bytes
    """The serialized ``SignedEnvelope`` of the receipt (what control records)."""
    attempts: int
    """How many forwarding attempts failed so far."""


@dataclass(frozen=True, kw_only=True)
class BeginItem:
    """One episode to register: the keyword arguments of :meth:`WorkerStore.begin_episode`."""

    contract_digest: str
    episode_id: str
    identity_key: str
    identity: Mapping[str, str] | None = None
    baseline: list[Record] | None
    begun_at: datetime
    ttl_seconds: float


def _identity_from_key(identity_key: str) -> dict[str, str]:
    """Parse a canonical identity string back into the identity mapping."""
    try:
        value = json.loads(identity_key)
    except ValueError as exc:
        raise ValidationError(f"identity_key is not canonical JSON: {exc}") from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValidationError("identity_key must encode a JSON object of strings")
    return value


def _as_dict(rows: Iterable[Row[str, str]]) -> dict[str, str]:
    """Two-column rows as a mapping of the first column to the second."""
    return {first: second for first, second in rows}


def _open_episode(row: Row[*tuple[Any, ...]]) -> OpenEpisode:
    return OpenEpisode(
        identity_key=row.identity_key,
        identity=dict(row.identity),
        baseline=None if row.baseline is None else list(row.baseline),
        begun_at=row.begun_at,
    )


def _stored_receipt(row: Row[*tuple[Any, ...]] | None) -> StoredReceipt | None:
    if row is None:
        return None
    return StoredReceipt(
        receipt_id=row.receipt_id,
        episode_id=row.episode_id,
        contract_digest=row.contract_digest,
        envelope=bytes(row.envelope),
        evidence=bytes(row.evidence),
    )


class WorkerStore:
    """Durable worker state on SQLite (default) or PostgreSQL, shared safely by many processes.

    Thread-safe: one instance may be used from many threads (a connection pool backs it).
    """

    def __init__(self, url: str, *, outbox: bool = False) -> None:
        """Open the store at a SQLAlchemy URL and create the tables if missing.

        ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://user@host:port/db``
        (``postgresql://`` and ``postgres://`` select psycopg too). ``outbox``: every receipt
        :meth:`commit_receipts` stores also gets an outbox row, in the same transaction, for
        forwarding to the control plane (the outbox table exists either way).

        Raises:
            ValidationError: the URL is not usable.
            Unavailable: the database cannot be reached.
        """
        self._db = StoreEngine(url, what=_STORE_NAME)
        self._outbox = outbox
        # INSERT ... ON CONFLICT DO NOTHING RETURNING <key>: the rows returned are the rows
        # inserted, so a shortfall names exactly what a concurrent writer won.
        self._insert_receipts = self._db.insert_ignore(receipts).returning(receipts.c.episode_id)
        self._insert_credits = self._db.insert_ignore(credited_records).returning(
            credited_records.c.record_id
        )
        self._insert_open = self._db.insert_ignore(open_episodes).returning(
            open_episodes.c.episode_id
        )
        self._insert_ledgers = self._db.insert_ignore(policy_ledger)
        self._insert_state = self._db.insert_ignore(worker_state)
        try:
            self._create_schema()
        except BaseException:
            self._db.dispose()
            raise

    # ------------------------------------------------------------------ plumbing

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def outbox_enabled(self) -> bool:
        """True when :meth:`commit_receipts` writes outbox rows."""
        return self._outbox

    @property
    def engine(self) -> Engine:
        """The underlying engine (for diagnostics and tests)."""
        return self._db.engine

    def _create_schema(self) -> None:
        """Create missing tables, serialized against other processes doing the same."""

        def create(conn: Connection) -> None:
            self._db.advisory_lock(conn, _SCHEMA_LOCK_KEY)
            metadata.create_all(conn, checkfirst=True)

        self._db.write(create)

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self._db.ping()

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._db.dispose()

    # ------------------------------------------------------------------ batch reads

    def lookup(self, contract_digest: str, episode_ids: Sequence[str]) -> BatchLookup:
        """Everything scoring needs to know about a batch before judging, in one read.

        Three queries (more only past :data:`IN_CHUNK` ids) on one connection: the episodes'
        open registrations on ``contract_digest``, their existing receipts, and the contract's
        highest committed policy update. On SQLite they share one read transaction (one
        snapshot). On PostgreSQL (READ COMMITTED, where each statement takes its own snapshot
        even inside a transaction) they run in autocommit, registrations first: a commit that
        lands between the two reads can then only make an episode look registered *and*
        receipted (reported as a duplicate), never neither. Advisory: :meth:`commit_receipts`
        checks again under its lock.
        """
        wanted = list(dict.fromkeys(episode_ids))

        def work(conn: Connection) -> BatchLookup:
            found: dict[str, str] = {}
            registered: dict[str, OpenEpisode] = {}
            for chunk in chunks(wanted):
                rows = conn.execute(
                    _OPEN_EPISODES, {"contract_digest": contract_digest, "episode_ids": chunk}
                )
                registered.update((row.episode_id, _open_episode(row)) for row in rows)
            for chunk in chunks(wanted):
                found.update(
                    _as_dict(conn.execute(_RECEIPT_IDS_OF_EPISODES, {"episode_ids": chunk}))
                )
            highest = conn.execute(_HIGHEST, {"contract_digest": contract_digest}).scalar()
            return BatchLookup(
                receipts=MappingProxyType(found),
                open=MappingProxyType(registered),
                highest=None if highest is None else int(highest),
            )

        return self._db.read(work, snapshot=True)

    def credited_for(
        self, contract_digest: str, identity_keys: Collection[str]
    ) -> dict[str, set[str]]:
        """For each identity key, the ids of the records already credited for the contract.

        The same sets as :meth:`credited_record_ids` per key (records credited by receipts
        committed without an identity key count for every identity), in one query (more only
        past :data:`IN_CHUNK` keys). Keys with no credited record map to an empty set.
        """
        keys = sorted(set(identity_keys))
        if not keys:
            return {}

        def work(conn: Connection) -> dict[str, set[str]]:
            credited: dict[str, set[str]] = {k: set() for k in keys}
            anonymous: set[str] = set()
            for number, chunk in enumerate(chunks(keys)):
                statement = _CREDITED_BY_KEYS_AND_ANONYMOUS if number == 0 else _CREDITED_BY_KEYS
                rows = conn.execute(
                    statement, {"contract_digest": contract_digest, "identity_keys": chunk}
                )
                for identity_key, record_id in rows:
                    if identity_key is None:
                        anonymous.add(record_id)
                    else:
                        credited[identity_key].add(record_id)
            if anonymous:
                for records in credited.values():
                    records |= anonymous
            return credited

        return self._db.read(work, snapshot=len(keys) > IN_CHUNK)

    # ------------------------------------------------------------------ episodes

    def begin_episode(
        self,
        *,
        contract_digest: str,
        episode_id: str,
        identity_key: str,
        identity: Mapping[str, str] | None = None,
        baseline: list[Record] | None,
        begun_at: datetime,
        ttl_seconds: float,
    ) -> None:
        """Register an open episode for ``(contract_digest, identity_key)`` (R-W-1, R-W-3).

        ``begun_at`` is also "now" for the TTL: an open episode whose ``begun_at`` is at least
        ``ttl_seconds`` older is stale and is reclaimed (deleted). Re-beginning the same episode
        id on the same contract and identity is idempotent and keeps the first baseline.
        ``identity`` is the mapping ``identity_key`` encodes; when omitted it is parsed from
        ``identity_key``; when given it must agree with it. One item of
        :meth:`begin_episodes`.

        Raises:
            DuplicateEpisode: the episode already has a receipt (metadata ``receipt_id``).
            IdentityBusy: the identity has another, non-stale open episode.
            IdentityConflict: the episode id is open (non-stale) on another contract or
                identity.
            ValidationError: ``identity_key`` is not a canonical identity string, or
                ``identity`` disagrees with it.
        """
        [error] = self.begin_episodes(
            [
                BeginItem(
                    contract_digest=contract_digest,
                    episode_id=episode_id,
                    identity_key=identity_key,
                    identity=identity,
                    baseline=baseline,
                    begun_at=begun_at,
                    ttl_seconds=ttl_seconds,
                )
            ]
        )
        if error is not None:
            raise error

    def begin_episodes(self, items: Sequence[BeginItem]) -> list[RewardSealError | None]:
        """Register a batch of episodes in ONE transaction; one outcome per item, in order.

        Items are applied in order with the rules of :meth:`begin_episode`; an item's outcome
        is None when it is registered (or already was: an idempotent re-begin), else the error
        :meth:`begin_episode` would raise for it (DuplicateEpisode, IdentityBusy,
        IdentityConflict, ValidationError). A refused item changes nothing and does not fail
        the others; an unreachable database fails the call (Unavailable). Durable before return.
        """
        outcomes: list[RewardSealError | None] = [None] * len(items)
        accepted: list[tuple[int, BeginItem, dict[str, str], datetime]] = []
        for index, entry in enumerate(items):
            try:
                parsed = _identity_from_key(entry.identity_key)
                if entry.identity is not None and dict(entry.identity) != parsed:
                    raise ValidationError("identity does not match identity_key")
            except ValidationError as exc:
                outcomes[index] = exc
                continue
            accepted.append((index, entry, parsed, as_utc(entry.begun_at)))
        if not accepted:
            return outcomes
        episode_ids = list(dict.fromkeys(entry.episode_id for _, entry, _, _ in accepted))
        contracts = sorted({entry.contract_digest for _, entry, _, _ in accepted})
        keys = sorted({entry.identity_key for _, entry, _, _ in accepted})

        def work(conn: Connection) -> list[RewardSealError | None]:
            results = list(outcomes)
            existing: dict[str, str] = {}
            # Registrations as they stand, updated as the items are applied in order.
            by_slot: dict[tuple[str, str], tuple[str, datetime]] = {}
            by_episode: dict[str, tuple[str, str, datetime]] = {}
            for episode_chunk, key_chunk in _pairs_of_chunks(episode_ids, keys):
                rows = conn.execute(
                    _OPEN_FOR_BEGIN,
                    {
                        "episode_ids": episode_chunk,
                        "contracts": contracts,
                        "identity_keys": key_chunk,
                    },
                )
                for contract, key, episode, begun in rows:
                    by_slot[(contract, key)] = (episode, begun)
                    by_episode[episode] = (contract, key, begun)
            # Read after the registrations are locked: a receipt whose commit closed one of
            # them before the lock is visible here.
            for chunk in chunks(episode_ids):
                existing.update(
                    _as_dict(conn.execute(_RECEIPT_IDS_OF_EPISODES, {"episode_ids": chunk}))
                )
            stored_episodes = set(by_episode)
            to_delete: set[str] = set()
            to_insert: dict[str, dict[str, Any]] = {}

            def release(episode: str) -> None:
                contract, key, _ = by_episode.pop(episode)
                del by_slot[(contract, key)]
                to_insert.pop(episode, None)
                if episode in stored_episodes:
                    to_delete.add(episode)

            for index, entry, parsed, now in accepted:
                receipt_id = existing.get(entry.episode_id)
                if receipt_id is not None:
                    results[index] = DuplicateEpisode(
                        f"episode {entry.episode_id!r} already has a receipt",
                        metadata={"receipt_id": receipt_id},
                    )
                    continue
                holder = by_slot.get((entry.contract_digest, entry.identity_key))
                if holder is not None:
                    if holder[0] == entry.episode_id:
                        continue  # idempotent re-begin: keep the first registration
                    if (now - holder[1]).total_seconds() < entry.ttl_seconds:
                        results[index] = IdentityBusy(
                            "the oracle identity already has an open episode for this contract"
                        )
                        continue
                    release(holder[0])
                elsewhere = by_episode.get(entry.episode_id)
                if elsewhere is not None:
                    if (now - elsewhere[2]).total_seconds() < entry.ttl_seconds:
                        results[index] = IdentityConflict(
                            f"episode {entry.episode_id!r} is already open for another identity"
                            " or contract"
                        )
                        continue
                    release(entry.episode_id)
                by_slot[(entry.contract_digest, entry.identity_key)] = (entry.episode_id, now)
                by_episode[entry.episode_id] = (entry.contract_digest, entry.identity_key, now)
                to_insert[entry.episode_id] = {
                    "contract_digest": entry.contract_digest,
                    "identity_key": entry.identity_key,
                    "episode_id": entry.episode_id,
                    "identity": parsed,
                    "baseline": entry.baseline,
                    "begun_at": now,
                }
            for chunk in chunks(sorted(to_delete)):
                conn.execute(_CLOSE_OPEN_EPISODES, {"episode_ids": chunk})
            if to_insert:
                inserted = conn.execute(self._insert_open, list(to_insert.values())).all()
                if len(inserted) != len(to_insert):
                    # A registration for one of these slots or episode ids was inserted (by a
                    # PostgreSQL transaction) after our read: read again, it is visible now.
                    raise LostRace("open episode inserted concurrently")
            return results

        return self._db.write(work)

    def open_episode(self, contract_digest: str, episode_id: str) -> OpenEpisode | None:
        """The open registration of an episode on a contract, or None."""

        def work(conn: Connection) -> OpenEpisode | None:
            row = conn.execute(
                _OPEN_EPISODE, {"contract_digest": contract_digest, "episode_id": episode_id}
            ).one_or_none()
            return None if row is None else _open_episode(row)

        return self._db.read(work)

    # ------------------------------------------------------------------ receipts

    def receipt_by_episode(self, episode_id: str) -> StoredReceipt | None:
        """The receipt of an episode, or None."""
        return self._db.read(
            lambda conn: _stored_receipt(
                conn.execute(_RECEIPT_BY_EPISODE, {"episode_id": episode_id}).one_or_none()
            )
        )

    def receipt_by_id(self, receipt_id: str) -> StoredReceipt | None:
        """A receipt by its id, or None."""
        return self._db.read(
            lambda conn: _stored_receipt(
                conn.execute(_RECEIPT_BY_ID, {"receipt_id": receipt_id}).one_or_none()
            )
        )

    def count_receipts(self) -> int:
        """How many receipts are stored (tests and benchmarks)."""
        return self._db.read(lambda conn: int(conn.execute(_COUNT_RECEIPTS).scalar_one()))

    def highest_policy_update(self, contract_digest: str) -> int | None:
        """The highest policy update committed for a contract, or None if none was (R-W-7)."""

        def work(conn: Connection) -> int | None:
            value = conn.execute(_HIGHEST, {"contract_digest": contract_digest}).scalar()
            return None if value is None else int(value)

        return self._db.read(work)

    def credited_record_ids(self, contract_digest: str, identity_key: str) -> set[str]:
        """Ids of the SoR records already credited to a receipt for this contract and identity.

        Also includes records credited by receipts committed without an identity key (those
        cannot be attributed to an identity, so they are excluded for every identity).
        """
        return self._db.read(
            lambda conn: set(
                conn.execute(
                    _CREDITED_ONE,
                    {"contract_digest": contract_digest, "identity_key": identity_key},
                ).scalars()
            )
        )

    def commit_receipts(
        self, items: Sequence[ReceiptToCommit], *, max_jump: int | None = None
    ) -> list[CommitResult]:
        """Commit a batch of receipts in ONE transaction; one result per item, in order.

        Items are applied in order; per item, the first check that fires wins:

        1. the episode already has a receipt (stored before, or earlier in this batch) ->
           ``duplicate_of`` = that receipt's id;
        2. ``policy_update`` is below the contract's highest committed update (before, or by
           an earlier item of this batch) -> ``regressed``;
        2b. with ``max_jump`` set, ``policy_update`` is more than ``max_jump`` above the
           contract's highest update *as it was before this transaction* -> ``jumped``. On an
           empty ledger the first item stored by this transaction stands in for it: the first
           episode of a contract may start at any update, but one transaction never moves the
           ledger more than ``max_jump`` past where it started, however many items it holds;
        3. a record to credit is already credited for the contract (before, or to an earlier
           item of this batch) -> ``credit_conflicts`` (sorted);
        4. otherwise the receipt is inserted, its records credited, the episode's open
           registration closed and the ledger raised to ``max(highest, policy_update)``; with
           the outbox on, an outbox row is inserted for it (due at once).

        Nothing is stored for an item in cases 1-3. Set-based: after the contracts' ledger rows
        are locked, one query each reads the batch's existing receipts and credited records,
        the items are decided here, and the rows are written with one statement per table.
        Durable before return.

        Raises:
            RewardSealError: a receipt id is already used by another episode (nothing of the
                batch is stored).
        """
        if not items:
            return []
        batch = list(items)
        contracts = sorted({entry.contract_digest for entry in batch})
        episode_ids = list(dict.fromkeys(entry.episode_id for entry in batch))
        record_ids = sorted({r for entry in batch for r in entry.credited_record_ids})

        def work(conn: Connection) -> list[CommitResult]:
            highest = self._lock_ledgers(conn, contracts)
            before = dict(highest)
            # Where each contract's ledger stood when this transaction began (see 2b).
            base = dict(before)
            existing: dict[str, str] = {}
            for chunk in chunks(episode_ids):
                existing.update(
                    _as_dict(conn.execute(_RECEIPT_IDS_OF_EPISODES, {"episode_ids": chunk}))
                )
            taken: set[tuple[str, str]] = set()
            for chunk in chunks(record_ids):
                rows = conn.execute(_TAKEN_RECORDS, {"contracts": contracts, "record_ids": chunk})
                taken.update((contract, record_id) for contract, record_id in rows)
            now = datetime.now(UTC)
            results: list[CommitResult] = []
            receipt_rows: list[dict[str, Any]] = []
            credit_rows: list[dict[str, Any]] = []
            for entry in batch:
                contract = entry.contract_digest
                duplicate_of = existing.get(entry.episode_id)
                if duplicate_of is not None:
                    results.append(CommitResult(entry.receipt_id, duplicate_of=duplicate_of))
                    continue
                current = highest[contract]
                if current is not None and entry.policy_update < current:
                    results.append(CommitResult(entry.receipt_id, regressed=True))
                    continue
                start = base[contract]
                if (
                    max_jump is not None
                    and start is not None
                    and entry.policy_update > start + max_jump
                ):
                    results.append(CommitResult(entry.receipt_id, jumped=True))
                    continue
                wanted = sorted(set(entry.credited_record_ids))
                conflicts = tuple(r for r in wanted if (contract, r) in taken)
                if conflicts:
                    results.append(CommitResult(entry.receipt_id, credit_conflicts=conflicts))
                    continue
                existing[entry.episode_id] = entry.receipt_id
                taken.update((contract, r) for r in wanted)
                if start is None:
                    base[contract] = entry.policy_update
                highest[contract] = (
                    entry.policy_update if current is None else max(current, entry.policy_update)
                )
                receipt_rows.append(
                    {
                        "receipt_id": entry.receipt_id,
                        "episode_id": entry.episode_id,
                        "contract_digest": contract,
                        "policy_update": entry.policy_update,
                        "envelope": entry.envelope,
                        "evidence": entry.evidence,
                        "created_at": now,
                    }
                )
                credit_rows.extend(
                    {
                        "contract_digest": contract,
                        "record_id": record_id,
                        "receipt_id": entry.receipt_id,
                        "identity_key": entry.identity_key,
                    }
                    for record_id in wanted
                )
                results.append(CommitResult(entry.receipt_id))
            if receipt_rows:
                self._write_receipts(conn, receipt_rows)
                if self._outbox:
                    conn.execute(_INSERT_OUTBOX, _outbox_rows(receipt_rows))
            if credit_rows:
                inserted = conn.execute(self._insert_credits, credit_rows).all()
                if len(inserted) != len(credit_rows):
                    # Read free under the contracts' locks: a conflict is a bug. Fail the whole
                    # batch rather than credit a record twice.
                    raise RewardSealError("worker store error (a record was credited twice)")
            closed = [row["episode_id"] for row in receipt_rows]
            for chunk in chunks(closed):
                conn.execute(_CLOSE_OPEN_EPISODES, {"episode_ids": chunk})
            raised = [
                {"b_contract": contract, "b_highest": value}
                for contract, value in highest.items()
                if value != before[contract]
            ]
            if raised:
                conn.execute(_RAISE_LEDGER, raised)
            return results

        return self._db.write(work)

    # ------------------------------------------------------------------ outbox (R-C-5)

    def outbox_due(self, limit: int, now: datetime) -> list[OutboxItem]:
        """Up to ``limit`` outbox rows due at ``now``, oldest first (in commit order).

        Raises:
            ValidationError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ValidationError("limit must be at least 1")
        rows = self._db.read(
            lambda conn: conn.execute(_OUTBOX_DUE, {"now": now, "limit": limit}).all()
        )
        return [OutboxItem(row.receipt_id, bytes(row.envelope), int(row.attempts)) for row in rows]

    def outbox_done(self, receipt_ids: Collection[str]) -> None:
        """Delete the outbox rows of receipts control has recorded (unknown ids are ignored)."""
        ids = sorted(set(receipt_ids))
        if not ids:
            return

        def work(conn: Connection) -> None:
            for chunk in chunks(ids):
                conn.execute(_OUTBOX_DONE, {"receipt_ids": chunk})

        self._db.write(work)

    def outbox_later(
        self, receipt_ids: Collection[str], *, error: str, now: datetime, delay_seconds: float
    ) -> None:
        """Record a failed attempt: count it, keep ``error`` and retry ``delay_seconds`` after
        ``now`` (unknown ids are ignored).

        ``error`` is kept on the rows (cut to :data:`OUTBOX_ERROR_MAX` characters); it must be
        the forwarder's own text (an error class or reason), never record contents.

        Raises:
            ValidationError: ``delay_seconds`` is negative or not finite.
        """
        if not math.isfinite(delay_seconds) or delay_seconds < 0:
            raise ValidationError("delay_seconds must be a finite number of seconds, at least 0")
        ids = sorted(set(receipt_ids))
        if not ids:
            return
        values = {
            "b_next": as_utc(now) + timedelta(seconds=delay_seconds),
            "b_error": error[:OUTBOX_ERROR_MAX],
        }

        def work(conn: Connection) -> None:
            for chunk in chunks(ids):
                conn.execute(_OUTBOX_LATER, {**values, "receipt_ids": chunk})

        self._db.write(work)

    def outbox_size(self) -> int:
        """How many receipts wait in the outbox (due or not)."""
        return self._db.read(lambda conn: int(conn.execute(_OUTBOX_SIZE).scalar_one()))

    def outbox_oldest(self, now: datetime) -> float | None:
        """Age in seconds at ``now`` of the oldest receipt in the outbox (at least 0), or None
        when the outbox is empty (health and metrics)."""
        oldest: datetime | None = self._db.read(lambda conn: conn.execute(_OUTBOX_OLDEST).scalar())
        if oldest is None:
            return None
        return max(0.0, (as_utc(now) - oldest).total_seconds())

    # ------------------------------------------------------------------ worker state

    def state_value(self, name: str) -> int | None:
        """The stored value of ``name`` in the worker state, or None if it was never set."""
        value = self._db.read(lambda conn: conn.execute(_STATE_VALUE, {"name": name}).scalar())
        return None if value is None else int(value)

    def raise_state_value(self, name: str, value: int) -> int:
        """Store ``value`` under ``name`` unless a value at least as high is stored already;
        return the value stored afterwards (never lower than before, across replicas too).

        Raises:
            ValidationError: ``value`` is negative.
        """
        if value < 0:
            raise ValidationError("a worker state value is at least 0")

        def work(conn: Connection) -> int:
            conn.execute(self._insert_state, {"name": name, "int_value": value})
            conn.execute(_STATE_RAISE, {"b_name": name, "b_value": value})
            return int(conn.execute(_STATE_VALUE, {"name": name}).scalar_one())

        return self._db.write(work)

    def _lock_ledgers(self, conn: Connection, contracts: Sequence[str]) -> dict[str, int | None]:
        """Lock (creating if missing) the ledger rows of ``contracts`` (sorted); their values."""
        rows = self._read_ledgers(conn, contracts)
        missing = [contract for contract in contracts if contract not in rows]
        if missing:
            conn.execute(
                self._insert_ledgers,
                [{"contract_digest": contract, "highest_update": None} for contract in missing],
            )
            rows = self._read_ledgers(conn, contracts)
        return {contract: rows[contract] for contract in contracts}

    @staticmethod
    def _read_ledgers(conn: Connection, contracts: Sequence[str]) -> dict[str, int | None]:
        values: dict[str, int | None] = {}
        for chunk in chunks(contracts):
            for contract, value in conn.execute(_LOCK_LEDGERS, {"contracts": chunk}):
                values[contract] = None if value is None else int(value)
        return values

    def _write_receipts(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Insert the decided receipts; all of them, or roll the transaction back."""
        inserted = set(conn.execute(self._insert_receipts, rows).scalars())
        if len(inserted) == len(rows):
            return
        # Not inserted: the receipt id is taken (by another episode), or the episode got its
        # receipt from a concurrent commit under another contract (whose lock we do not hold).
        skipped = [row for row in rows if row["episode_id"] not in inserted]
        owners: dict[str, str] = {}
        for chunk in chunks([row["receipt_id"] for row in skipped]):
            owners.update(_as_dict(conn.execute(_EPISODES_OF_RECEIPT_IDS, {"receipt_ids": chunk})))
        for row in skipped:
            owner = owners.get(row["receipt_id"])
            if owner is not None and owner != row["episode_id"]:
                raise RewardSealError(
                    f"receipt id {row['receipt_id']!r} is already used by another episode"
                )
        raise LostRace("receipt committed concurrently")


def _outbox_rows(receipt_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The outbox rows of receipts being inserted: due at once, in batch order."""
    return [
        {
            "receipt_id": row["receipt_id"],
            "envelope": row["envelope"],
            "created_at": row["created_at"],
            "batch_index": index,
            "attempts": 0,
            "next_attempt_at": row["created_at"],
            "last_error": None,
        }
        for index, row in enumerate(receipt_rows)
    ]


def _pairs_of_chunks(
    episode_ids: Sequence[str], keys: Sequence[str]
) -> Iterator[tuple[Sequence[str], Sequence[str]]]:
    """Chunks of both lists, paired so that every episode id and every key is covered.

    Each pair is one query of :data:`_OPEN_FOR_BEGIN`; an empty list binds as an empty ``IN``.
    """
    episode_chunks = list(chunks(episode_ids)) or [[]]
    key_chunks = list(chunks(keys)) or [[]]
    for number in range(max(len(episode_chunks), len(key_chunks))):
        yield (
            episode_chunks[number] if number < len(episode_chunks) else [],
            key_chunks[number] if number < len(key_chunks) else [],
        )
