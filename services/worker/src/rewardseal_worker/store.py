"""The worker's durable store (R-W-3, R-W-7, R-W-8): open episodes, receipts, credits, ledger.

SQLAlchemy 2 Core over SQLite (the default; WAL, ``synchronous=FULL``, ``busy_timeout``) or
PostgreSQL (``postgresql+psycopg://...``). Every write is one transaction and is durable when the
method returns.

Concurrency model, which holds across threads, processes and replicas sharing one PostgreSQL:

* SQLite: every write transaction starts with ``BEGIN IMMEDIATE``, so writers are serialized by
  the database lock (waiting up to ``busy_timeout``) and a read-then-write never fails midway.
* PostgreSQL (READ COMMITTED): ``commit_receipts`` first creates and locks (``SELECT ... FOR
  UPDATE``) the policy-ledger row of every contract in the batch, in sorted order. Everything a
  receipt commit checks for a contract (ledger, credited records) is therefore read under that
  lock. Receipt uniqueness is enforced by the ``UNIQUE (episode_id)`` constraint with ``INSERT
  ... ON CONFLICT DO NOTHING``, so exactly one receipt per episode exists whatever the race.
  Deadlocks and serialization failures (SQLSTATE 40P01 / 40001) are retried a few times.

Only :mod:`rewardseal.errors` classes leave this module: a database that cannot be reached
becomes :class:`~rewardseal.errors.Unavailable`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Insert,
    LargeBinary,
    MetaData,
    String,
    Table,
    TypeDecorator,
    create_engine,
    delete,
    event,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import ConnectionPoolEntry

from rewardseal.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    RewardSealError,
    Unavailable,
    ValidationError,
)

__all__ = [
    "CommitResult",
    "OpenEpisode",
    "ReceiptToCommit",
    "StoredReceipt",
    "WorkerStore",
]

Record = dict[str, Any]
_T = TypeVar("_T")

SQLITE_BUSY_TIMEOUT_MS = 5000
"""How long a SQLite connection waits for the database lock before failing."""

_TRANSIENT_RETRIES = 5
_TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
_READ_ONLY_OPTION = "rewardseal_read_only"
_SCHEMA_LOCK_KEY = 0x7265_7761_7264  # pg_advisory_xact_lock key serializing CREATE TABLE


class _UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (UTC).

    SQLite has no timezone-aware type, so values are stored there as naive UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Normalize to UTC (a naive value is taken as UTC); naive UTC for SQLite."""
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime."""
        if value is None:
            return None
        if not isinstance(value, datetime):  # pragma: no cover - drivers return datetime
            raise TypeError(f"expected datetime, got {type(value).__name__}")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData()

open_episodes = Table(
    "open_episodes",
    metadata,
    Column("contract_digest", String, primary_key=True),
    Column("identity_key", String, primary_key=True),
    Column("episode_id", String, nullable=False, unique=True),
    Column("identity", JSON, nullable=False),
    Column("baseline", JSON(none_as_null=True), nullable=True),
    Column("begun_at", _UTCDateTime, nullable=False),
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
    Column("created_at", _UTCDateTime, nullable=False),
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
    is False and ``credit_conflicts`` is empty); the episode already had a receipt
    (``duplicate_of`` names it); the policy update went backwards (``regressed``); or a record
    to credit is already credited to another receipt (``credit_conflicts`` names them: the
    caller must judge again with the fresh credited set). Only in the first case was anything
    stored for the item.
    """

    receipt_id: str
    duplicate_of: str | None = None
    regressed: bool = False
    credit_conflicts: tuple[str, ...] = ()

    @property
    def stored(self) -> bool:
        """True when this item's receipt was committed by this call."""
        return self.duplicate_of is None and not self.regressed and not self.credit_conflicts


@dataclass(frozen=True)
class OpenEpisode:
    """A registered (BeginEpisode) episode that has no receipt yet."""

    identity_key: str
    identity: dict[str, str]
    baseline: list[Record] | None
    begun_at: datetime


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


def _error_name(error: sa_exc.SQLAlchemyError) -> str:
    """A short description of a database error that cannot carry record contents.

    Messages leave the worker (as RPC errors), and a driver message or a statement's
    parameters could quote SoR records, so only the error classes and SQLSTATE are named.
    """
    if isinstance(error, sa_exc.DBAPIError):
        state = _sqlstate(error)
        name = type(error.orig).__name__
        return f"{name}, SQLSTATE {state}" if state else name
    return type(error).__name__


def _sqlstate(error: sa_exc.DBAPIError) -> str | None:
    """The SQLSTATE of a driver error, where the driver reports one."""
    state = getattr(error.orig, "sqlstate", None)
    return state if isinstance(state, str) else None


class WorkerStore:
    """Durable worker state on SQLite (default) or PostgreSQL, shared safely by many processes.

    Thread-safe: one instance may be used from many threads (a connection pool backs it).
    """

    def __init__(self, url: str) -> None:
        """Open the store at a SQLAlchemy URL and create the tables if missing.

        ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://user@host:port/db``
        (``postgresql://`` and ``postgres://`` select psycopg too).
        """
        try:
            parsed = make_url(url)
        except sa_exc.ArgumentError as exc:
            raise ValidationError(f"malformed worker store URL: {exc}") from exc
        backend = parsed.drivername.partition("+")[0]
        if backend in ("postgres", "postgresql"):
            backend = "postgresql"
            if "+" not in parsed.drivername:
                parsed = parsed.set(drivername="postgresql+psycopg")
            self._engine: Engine = self._create_engine(parsed, pool_pre_ping=True)
        elif backend == "sqlite":
            database = parsed.database or ""
            if not database or ":memory:" in database or "mode=memory" in str(parsed):
                raise ValidationError(
                    "the worker store needs a durable database; an in-memory SQLite URL "
                    "is not one (use sqlite:///path/to/file.db)"
                )
            self._engine = self._create_engine(parsed, connect_args={"check_same_thread": False})
            event.listen(self._engine, "connect", _sqlite_on_connect)
            event.listen(self._engine, "begin", _sqlite_on_begin)
        else:
            raise ValidationError(f"unsupported worker store backend {backend!r}")
        self._dialect = backend
        try:
            self._create_schema()
        except BaseException:
            self._engine.dispose()
            raise

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _create_engine(url: URL, **options: Any) -> Engine:
        """create_engine with parameters kept out of error messages (they hold records)."""
        try:
            return create_engine(url, hide_parameters=True, **options)
        except sa_exc.ArgumentError as exc:  # includes an unknown driver
            raise ValidationError(f"cannot use worker store URL: {exc}") from exc

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._dialect

    @property
    def engine(self) -> Engine:
        """The underlying engine (for diagnostics and tests)."""
        return self._engine

    def _insert_ignore(self, table: Table, values: Mapping[str, Any]) -> Insert:
        """``INSERT ... ON CONFLICT DO NOTHING`` for this dialect; its result's ``rowcount``
        says whether the row was inserted (1) or conflicted (0)."""
        if self._dialect == "postgresql":
            statement: Insert = pg_dialect.insert(table).values(**values).on_conflict_do_nothing()
        else:
            statement = sqlite_dialect.insert(table).values(**values).on_conflict_do_nothing()
        # Without this, drivers such as psycopg report rowcount -1 after an INSERT.
        return statement.execution_options(preserve_rowcount=True)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Map database failures onto rewardseal errors; let rewardseal errors through."""
        try:
            yield
        except RewardSealError:
            raise
        except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
            raise Unavailable(f"worker store unavailable ({_error_name(exc)})") from exc
        except sa_exc.SQLAlchemyError as exc:
            raise RewardSealError(f"worker store error ({_error_name(exc)})") from exc

    def _write(self, work: Callable[[Connection], _T]) -> _T:
        """Run ``work`` in one write transaction, committed (durably) before returning.

        Retries PostgreSQL deadlocks and serialization failures; ``work`` must therefore have
        no effect outside the transaction.
        """
        with self._translated():
            for attempt in range(_TRANSIENT_RETRIES):
                try:
                    with self._engine.begin() as conn:
                        return work(conn)
                except sa_exc.DBAPIError as exc:
                    if (
                        _sqlstate(exc) not in _TRANSIENT_SQLSTATES
                        or attempt == _TRANSIENT_RETRIES - 1
                    ):
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        """Run ``work`` in a read-only transaction (a deferred, lock-free one on SQLite)."""
        with self._translated(), self._engine.connect() as conn:
            conn.execution_options(**{_READ_ONLY_OPTION: True})
            return work(conn)

    def _create_schema(self) -> None:
        """Create missing tables, serialized against other processes doing the same."""

        def create(conn: Connection) -> None:
            if self._dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            metadata.create_all(conn, checkfirst=True)

        self._write(create)

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self._read(lambda conn: conn.execute(text("SELECT 1")).scalar_one())

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._engine.dispose()

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
        ``identity_key``; when given it must agree with it.

        Raises:
            DuplicateEpisode: the episode already has a receipt (metadata ``receipt_id``).
            IdentityBusy: the identity has another, non-stale open episode.
            IdentityConflict: the episode id is open (non-stale) on another contract or
                identity.
            ValidationError: ``identity_key`` is not a canonical identity string, or
                ``identity`` disagrees with it.
        """
        parsed_identity = _identity_from_key(identity_key)
        if identity is not None and dict(identity) != parsed_identity:
            raise ValidationError("identity does not match identity_key")

        def stale(row_begun_at: datetime) -> bool:
            return (begun_at - row_begun_at).total_seconds() >= ttl_seconds

        def work(conn: Connection) -> None:
            existing_receipt = conn.execute(
                select(receipts.c.receipt_id).where(receipts.c.episode_id == episode_id)
            ).scalar_one_or_none()
            if existing_receipt is not None:
                raise DuplicateEpisode(
                    f"episode {episode_id!r} already has a receipt",
                    metadata={"receipt_id": existing_receipt},
                )
            # A concurrent writer can win the insert between our read and our write (only on
            # PostgreSQL); re-reading then sees its row, so a second pass settles it.
            for _ in range(3):
                holder = conn.execute(
                    select(open_episodes.c.episode_id, open_episodes.c.begun_at)
                    .where(
                        open_episodes.c.contract_digest == contract_digest,
                        open_episodes.c.identity_key == identity_key,
                    )
                    .with_for_update()
                ).one_or_none()
                if holder is not None:
                    if holder.episode_id == episode_id:
                        return  # idempotent re-begin: keep the first registration
                    if not stale(holder.begun_at):
                        raise IdentityBusy(
                            "the oracle identity already has an open episode for this contract"
                        )
                    conn.execute(
                        delete(open_episodes).where(open_episodes.c.episode_id == holder.episode_id)
                    )
                elsewhere = conn.execute(
                    select(open_episodes.c.begun_at)
                    .where(open_episodes.c.episode_id == episode_id)
                    .with_for_update()
                ).one_or_none()
                if elsewhere is not None:
                    if not stale(elsewhere.begun_at):
                        raise IdentityConflict(
                            f"episode {episode_id!r} is already open for another identity"
                            " or contract"
                        )
                    conn.execute(
                        delete(open_episodes).where(open_episodes.c.episode_id == episode_id)
                    )
                inserted = conn.execute(
                    self._insert_ignore(
                        open_episodes,
                        {
                            "contract_digest": contract_digest,
                            "identity_key": identity_key,
                            "episode_id": episode_id,
                            "identity": parsed_identity,
                            "baseline": baseline,
                            "begun_at": begun_at,
                        },
                    )
                )
                if inserted.rowcount == 1:
                    return
            raise IdentityBusy("the oracle identity already has an open episode for this contract")

        self._write(work)

    def open_episode(self, contract_digest: str, episode_id: str) -> OpenEpisode | None:
        """The open registration of an episode on a contract, or None."""

        def work(conn: Connection) -> OpenEpisode | None:
            row = conn.execute(
                select(
                    open_episodes.c.identity_key,
                    open_episodes.c.identity,
                    open_episodes.c.baseline,
                    open_episodes.c.begun_at,
                ).where(
                    open_episodes.c.contract_digest == contract_digest,
                    open_episodes.c.episode_id == episode_id,
                )
            ).one_or_none()
            if row is None:
                return None
            return OpenEpisode(
                identity_key=row.identity_key,
                identity=dict(row.identity),
                baseline=None if row.baseline is None else list(row.baseline),
                begun_at=row.begun_at,
            )

        return self._read(work)

    # ------------------------------------------------------------------ receipts

    def receipt_by_episode(self, episode_id: str) -> StoredReceipt | None:
        """The receipt of an episode, or None."""
        return self._receipt_where(receipts.c.episode_id == episode_id)

    def receipt_by_id(self, receipt_id: str) -> StoredReceipt | None:
        """A receipt by its id, or None."""
        return self._receipt_where(receipts.c.receipt_id == receipt_id)

    def _receipt_where(self, condition: Any) -> StoredReceipt | None:
        def work(conn: Connection) -> StoredReceipt | None:
            row = conn.execute(
                select(
                    receipts.c.receipt_id,
                    receipts.c.episode_id,
                    receipts.c.contract_digest,
                    receipts.c.envelope,
                    receipts.c.evidence,
                ).where(condition)
            ).one_or_none()
            if row is None:
                return None
            return StoredReceipt(
                receipt_id=row.receipt_id,
                episode_id=row.episode_id,
                contract_digest=row.contract_digest,
                envelope=bytes(row.envelope),
                evidence=bytes(row.evidence),
            )

        return self._read(work)

    def count_receipts(self) -> int:
        """How many receipts are stored (tests and benchmarks)."""
        return self._read(
            lambda conn: int(conn.execute(select(func.count()).select_from(receipts)).scalar_one())
        )

    def highest_policy_update(self, contract_digest: str) -> int | None:
        """The highest policy update committed for a contract, or None if none was (R-W-7)."""

        def work(conn: Connection) -> int | None:
            value = conn.execute(
                select(policy_ledger.c.highest_update).where(
                    policy_ledger.c.contract_digest == contract_digest
                )
            ).scalar_one_or_none()
            return None if value is None else int(value)

        return self._read(work)

    def credited_record_ids(self, contract_digest: str, identity_key: str) -> set[str]:
        """Ids of the SoR records already credited to a receipt for this contract and identity.

        Also includes records credited by receipts committed without an identity key (those
        cannot be attributed to an identity, so they are excluded for every identity).
        """

        def work(conn: Connection) -> set[str]:
            rows = conn.execute(
                select(credited_records.c.record_id).where(
                    credited_records.c.contract_digest == contract_digest,
                    or_(
                        credited_records.c.identity_key == identity_key,
                        credited_records.c.identity_key.is_(None),
                    ),
                )
            ).scalars()
            return set(rows)

        return self._read(work)

    def commit_receipts(self, items: Sequence[ReceiptToCommit]) -> list[CommitResult]:
        """Commit a batch of receipts in ONE transaction; one result per item, in order.

        Items are applied in order; per item, the first check that fires wins:

        1. the episode already has a receipt (stored before, or earlier in this batch) ->
           ``duplicate_of`` = that receipt's id;
        2. ``policy_update`` is below the contract's highest committed update -> ``regressed``;
        3. a record to credit is already credited for the contract -> ``credit_conflicts``;
        4. otherwise the receipt is inserted, its records credited, the episode's open
           registration closed and the ledger raised to ``max(highest, policy_update)``.

        Nothing is stored for an item in cases 1-3. Durable before return.
        """
        if not items:
            return []
        contracts = sorted({item.contract_digest for item in items})

        def work(conn: Connection) -> list[CommitResult]:
            highest: dict[str, int | None] = {}
            for contract in contracts:  # sorted: every transaction locks in the same order
                conn.execute(
                    self._insert_ignore(
                        policy_ledger, {"contract_digest": contract, "highest_update": None}
                    )
                )
                highest[contract] = conn.execute(
                    select(policy_ledger.c.highest_update)
                    .where(policy_ledger.c.contract_digest == contract)
                    .with_for_update()
                ).scalar_one()
            now = datetime.now(UTC)
            results = [self._commit_one(conn, item, highest, now) for item in items]
            for contract, value in highest.items():
                conn.execute(
                    update(policy_ledger)
                    .where(policy_ledger.c.contract_digest == contract)
                    .values(highest_update=value)
                )
            return results

        return self._write(work)

    def _commit_one(
        self,
        conn: Connection,
        item: ReceiptToCommit,
        highest: dict[str, int | None],
        now: datetime,
    ) -> CommitResult:
        """Apply one item inside the batch transaction (the contract's ledger row is locked)."""
        existing = self._receipt_id_of_episode(conn, item.episode_id)
        if existing is not None:
            return CommitResult(receipt_id=item.receipt_id, duplicate_of=existing)
        current = highest[item.contract_digest]
        if current is not None and item.policy_update < current:
            return CommitResult(receipt_id=item.receipt_id, regressed=True)
        wanted = sorted(set(item.credited_record_ids))
        if wanted:
            taken = conn.execute(
                select(credited_records.c.record_id).where(
                    credited_records.c.contract_digest == item.contract_digest,
                    credited_records.c.record_id.in_(wanted),
                )
            ).scalars()
            conflicts = tuple(sorted(taken))
            if conflicts:
                return CommitResult(receipt_id=item.receipt_id, credit_conflicts=conflicts)
        inserted = conn.execute(
            self._insert_ignore(
                receipts,
                {
                    "receipt_id": item.receipt_id,
                    "episode_id": item.episode_id,
                    "contract_digest": item.contract_digest,
                    "policy_update": item.policy_update,
                    "envelope": item.envelope,
                    "evidence": item.evidence,
                    "created_at": now,
                },
            )
        )
        if inserted.rowcount != 1:
            # Lost a race with another transaction (on another contract) for this episode.
            existing = self._receipt_id_of_episode(conn, item.episode_id)
            if existing is None:
                raise RewardSealError(
                    f"receipt id {item.receipt_id!r} is already used by another episode"
                )
            return CommitResult(receipt_id=item.receipt_id, duplicate_of=existing)
        if wanted:
            # Checked free above under the contract's lock: a conflict here is a bug and fails
            # the whole batch rather than crediting a record twice.
            conn.execute(
                credited_records.insert(),
                [
                    {
                        "contract_digest": item.contract_digest,
                        "record_id": record_id,
                        "receipt_id": item.receipt_id,
                        "identity_key": item.identity_key,
                    }
                    for record_id in wanted
                ],
            )
        conn.execute(delete(open_episodes).where(open_episodes.c.episode_id == item.episode_id))
        highest[item.contract_digest] = (
            item.policy_update if current is None else max(current, item.policy_update)
        )
        return CommitResult(receipt_id=item.receipt_id)

    @staticmethod
    def _receipt_id_of_episode(conn: Connection, episode_id: str) -> str | None:
        value = conn.execute(
            select(receipts.c.receipt_id).where(receipts.c.episode_id == episode_id)
        ).scalar_one_or_none()
        return None if value is None else str(value)


def _sqlite_on_connect(dbapi_connection: Any, connection_record: ConnectionPoolEntry) -> None:
    """Configure every new SQLite connection (R-W-8) and take over transaction control.

    ``isolation_level = None`` stops the driver from issuing its own ``BEGIN``; the ``begin``
    listener issues ``BEGIN IMMEDIATE`` (writes) or ``BEGIN`` (reads) instead.
    """
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    """Start SQLite transactions: IMMEDIATE for writes (take the write lock up front)."""
    if conn.get_execution_options().get(_READ_ONLY_OPTION):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
