"""Shared SQL plumbing for rewardseal's durable stores (the worker's and the control plane's).

Needs SQLAlchemy 2 (the ``sql`` extra of the ``rewardseal`` distribution); nothing else in the
core package imports this module, so trainers never need a database driver.

What lives here, once:

* URL handling (:func:`normalize_url`): ``sqlite:///path`` (a durable file; in-memory SQLite is
  refused) or PostgreSQL, where ``postgresql://`` and ``postgres://`` select psycopg 3
  (``postgresql+psycopg://``). Error messages never repeat the URL (it may hold a password).
  :func:`sqlite_url` is the one way to turn a file path into a URL: any path stays literal.
* Private SQLite files (:func:`create_private_sqlite_file`): a new database file is made 0600
  before SQLite opens it, so its ``-wal``/``-shm``/``-journal`` files (which SQLite creates
  with the database file's mode) are private too.
* Engine creation (:class:`StoreEngine`): parameters are hidden from error messages (they can
  hold record contents); every SQLite connection gets WAL, ``synchronous=FULL``,
  ``busy_timeout`` and ``foreign_keys=ON``, and SQLite write transactions start with
  ``BEGIN IMMEDIATE`` so a read-then-write never fails midway on a lock upgrade. On SQLite the
  write transactions of one engine also queue on an in-process lock (the *write gate*): SQLite
  has one writer at a time, and threads woken from a Python lock at once beat SQLite's busy
  handler, which sleeps in growing steps and turns contention into long tail latencies.
* Transactions (:meth:`StoreEngine.write`, :meth:`StoreEngine.read`): a write is one
  transaction, committed before return, re-run after a PostgreSQL deadlock or serialization
  failure or when the work raises :class:`LostRace`. :meth:`StoreEngine.write_on_driver` and
  :meth:`StoreEngine.read_on_driver` are the same transactions for a hot path's driver SQL,
  run on a driver connection kept between them (:mod:`rewardseal_server.driver_connections`)
  without SQLAlchemy's per-transaction objects or a pool checkout each time.
* Error mapping (:func:`translated`): a database that cannot be reached becomes
  :class:`~rewardseal.core.errors.Unavailable`, any other database failure a plain
  :class:`~rewardseal.core.errors.RewardSealError`; messages name only the error class and
  SQLSTATE, never a statement's parameters or a driver's message.
* :class:`UTCDateTime`: timestamps stored in UTC and always read back timezone-aware.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import DateTime, Dialect, Insert, Table, TypeDecorator, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import ConnectionPoolEntry

from rewardseal.core.errors import RewardSealError, Unavailable, ValidationError
from rewardseal_server.driver_connections import DriverConnection, HeldConnections, ping

__all__ = [
    "AUTOCOMMIT_READ_OPTION",
    "IN_CHUNK",
    "READ_ONLY_OPTION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "TRANSIENT_SQLSTATES",
    "UNIQUE_VIOLATION",
    "Backend",
    "DriverConnection",
    "LostRace",
    "StoreEngine",
    "UTCDateTime",
    "as_utc",
    "backend_of",
    "chunks",
    "create_private_file",
    "create_private_sqlite_file",
    "database_error",
    "error_name",
    "insert_ignore",
    "normalize_url",
    "sqlite_on_begin",
    "sqlite_on_connect",
    "sqlite_url",
    "sqlstate",
    "translated",
]

Backend = Literal["sqlite", "postgresql"]
_T = TypeVar("_T")

SQLITE_BUSY_TIMEOUT_MS: Final = 5000
"""How long a SQLite connection waits for the database lock before failing."""

IN_CHUNK: Final = 500
"""Most values bound into one ``IN (...)`` list; longer lists are queried in chunks."""

TRANSIENT_SQLSTATES: Final = frozenset({"40P01", "40001"})
"""deadlock_detected and serialization_failure: the transaction is run again."""

TRANSIENT_RETRIES: Final = 5
RACE_RETRIES: Final = 32

READ_ONLY_OPTION: Final = "rewardseal_read_only"
"""Execution option: a SQLite transaction that only reads (deferred ``BEGIN``)."""

AUTOCOMMIT_READ_OPTION: Final = "rewardseal_autocommit_read"
"""Execution option: a SQLite single-statement read (no ``BEGIN`` at all)."""


# ---------------------------------------------------------------------- URLs

PRIVATE_FILE_MODE: Final = 0o600
"""Mode of a store file: receipts, evidence and registrations are for the service alone."""


def insert_ignore(backend: str, table: Table) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` into ``table`` for ``backend`` (a connection's
    ``dialect.name``, where only the connection is at hand)."""
    if backend == "postgresql":
        return pg_dialect.insert(table).on_conflict_do_nothing()
    return sqlite_dialect.insert(table).on_conflict_do_nothing()


def sqlite_url(path: Path | str) -> str:
    """The ``sqlite:///`` URL of the database file ``path``, as a string that parses back to
    exactly that path.

    An f-string URL is not one: ``?`` starts a query, ``#`` a fragment and ``%xx`` is
    unescaped, so a data directory named ``a?b`` put the database in ``a``. Here every
    character of the path is escaped as the URL syntax needs, and the string survives being
    handed through flags, environment variables and settings.
    """
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


def create_private_file(path: Path | str) -> bool:
    """Create ``path`` as an empty 0600 file (whatever the umask) if it does not exist.

    Returns True when this call created it. An existing file (or symlink) is left as it is;
    a missing directory or no permission is left for the caller's open to report.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except OSError:  # FileExistsError included: an existing file is not ours to change
        return False
    try:
        # os.open's mode passes through the umask; fchmod does not.
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return True


def create_private_sqlite_file(url: URL) -> None:
    """Make the file of a SQLite ``url`` 0600 if it does not exist yet (whatever the umask).

    SQLite would create it 0644 (less the umask) and give its ``-wal``, ``-shm`` and
    ``-journal`` files the database file's mode, so making the empty file private first keeps
    all of them private (SQLite takes an empty file as a new database). An existing file is
    left as it is; so is a missing directory (SQLite then reports the database unreachable).
    """
    database = url.database or ""
    if database.startswith("file:") or url.query.get("uri") == "true":
        return  # A URI filename (mode=ro and the like): SQLite decides, nothing to create.
    create_private_file(database)


URL_FORMS: Final = (
    "expected sqlite:///path/to/file.db or postgresql://USER:PASSWORD@HOST:5432/DBNAME"
)
"""What a store URL looks like, for the message that refuses one."""


def normalize_url(url: str | URL, *, what: str = "database") -> URL:
    """Parse and check a store URL; ``postgresql://`` and ``postgres://`` select psycopg 3.

    Raises:
        ValidationError: the URL does not parse, names an unsupported backend, or names an
            in-memory SQLite database (not durable). ``what`` names the store in the message.
    """
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError, TypeError):
        # Never echo the URL: it may carry a password.
        raise ValidationError(f"malformed {what} URL: {URL_FORMS}") from None
    backend = parsed.drivername.partition("+")[0]
    if backend in ("postgres", "postgresql"):
        if "+" not in parsed.drivername:
            parsed = parsed.set(drivername="postgresql+psycopg")
        elif backend == "postgres":
            parsed = parsed.set(drivername="postgresql+" + parsed.drivername.partition("+")[2])
        return parsed
    if backend == "sqlite":
        database = parsed.database or ""
        if not database or ":memory:" in database or "mode=memory" in str(parsed):
            raise ValidationError(
                f"the {what} needs a durable database; an in-memory SQLite URL is not one "
                "(use sqlite:///path/to/file.db)"
            )
        return parsed
    raise ValidationError(f"unsupported {what} backend {backend!r}: {URL_FORMS}")


def backend_of(url: URL) -> Backend:
    """``"sqlite"`` or ``"postgresql"`` for a URL that :func:`normalize_url` accepted."""
    return "sqlite" if url.drivername.partition("+")[0] == "sqlite" else "postgresql"


# ---------------------------------------------------------------------- timestamps


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (a naive value is taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (UTC).

    SQLite has no timezone-aware type, so values are stored there as naive UTC. The column's
    DDL type is ``DateTime(timezone=True)`` (what migrations should write).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Normalize to UTC (a naive value is taken as UTC); naive UTC for SQLite."""
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime."""
        if value is None:
            return None
        if not isinstance(value, datetime):  # pragma: no cover - drivers return datetime
            raise TypeError(f"expected datetime, got {type(value).__name__}")
        return as_utc(value)


# ---------------------------------------------------------------------- errors


UNIQUE_VIOLATION: Final = "23505"
"""PostgreSQL's SQLSTATE for a taken unique key (what a COPY meets where an INSERT would skip
the row ``ON CONFLICT``)."""


def sqlstate(error: sa_exc.DBAPIError) -> str | None:
    """The SQLSTATE of a driver error, where the driver reports one."""
    state = getattr(error.orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def error_name(error: sa_exc.SQLAlchemyError) -> str:
    """A short description of a database error that cannot carry record contents.

    Messages leave the services (as RPC errors), and a driver message or a statement's
    parameters could quote stored values, so only the error classes and SQLSTATE are named.
    """
    if isinstance(error, sa_exc.DBAPIError):
        state = sqlstate(error)
        name = type(error.orig).__name__
        return f"{name}, SQLSTATE {state}" if state else name
    return type(error).__name__


def database_error(exc: sa_exc.SQLAlchemyError, what: str) -> RewardSealError:
    """The rewardseal error for a database failure of the store ``what`` (see
    :func:`translated`)."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return Unavailable(f"{what} unavailable ({error_name(exc)})")
    return RewardSealError(f"{what} error ({error_name(exc)})")


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Map database failures onto rewardseal errors; let rewardseal errors through.

    Unreachable, locked or timed-out databases become :class:`Unavailable`; every other
    SQLAlchemy failure a :class:`RewardSealError` (INTERNAL). ``what`` names the store.
    """
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:
        raise database_error(exc, what) from exc


class LostRace(Exception):
    """A concurrent writer won a row this transaction counted on: roll back and run again."""


# ---------------------------------------------------------------------- SQLite connections


def sqlite_on_connect(dbapi_connection: Any, connection_record: ConnectionPoolEntry) -> None:
    """Configure every new SQLite connection and take over transaction control.

    WAL, ``synchronous=FULL``, ``busy_timeout`` and ``foreign_keys=ON``. ``isolation_level =
    None`` stops the driver from issuing its own ``BEGIN``; :func:`sqlite_on_begin` issues
    ``BEGIN IMMEDIATE`` (writes) or ``BEGIN`` (reads) instead. Runs once per pooled connection.
    """
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enter_wal(cursor)
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _enter_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL``, retried within the busy timeout while the file is locked.

    Switching a fresh database to WAL needs an exclusive lock, and SQLite can answer "database is
    locked" at once, without waiting in its busy handler, when other connections open the same
    new file at that moment (replicas or migrations starting together).
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def sqlite_on_begin(conn: Connection) -> None:
    """Start SQLite transactions: IMMEDIATE for writes (take the write lock up front).

    Connections with :data:`READ_ONLY_OPTION` get a deferred ``BEGIN``; with
    :data:`AUTOCOMMIT_READ_OPTION` no ``BEGIN`` at all (the statement is its own snapshot).
    """
    options = conn.get_execution_options()
    if options.get(AUTOCOMMIT_READ_OPTION):
        return
    if options.get(READ_ONLY_OPTION):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


# ---------------------------------------------------------------------- engine


class StoreEngine:
    """An engine over SQLite or PostgreSQL with the transaction rules of this module.

    Thread-safe: one instance may be used from many threads (a connection pool backs it). On
    SQLite its write transactions are serialized in-process by a lock (see :meth:`write`).
    """

    def __init__(self, url: str | URL, *, what: str = "database", **options: Any) -> None:
        """Open an engine for ``url`` (see :func:`normalize_url`); ``what`` names the store in
        error messages; ``options`` go to :func:`sqlalchemy.create_engine`.

        Raises:
            ValidationError: the URL is not usable (malformed, unsupported, in-memory, no
                driver).
        """
        parsed = normalize_url(url, what=what)
        self.what = what
        self.backend: Backend = backend_of(parsed)
        if self.backend == "postgresql":
            options.setdefault("pool_pre_ping", True)
            self.engine = self._create(parsed, options)
            # PostgreSQL takes concurrent writers; its row locks order them.
            self._write_gate: AbstractContextManager[Any] = nullcontext()
            # Reads run in autocommit: under READ COMMITTED every statement takes its own
            # snapshot anyway, and this saves the BEGIN and ROLLBACK round trips.
            self.snapshot_reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            self.statement_reader = self.snapshot_reader
        else:
            create_private_sqlite_file(parsed)
            connect_args = dict(options.pop("connect_args", {}))
            connect_args.setdefault("check_same_thread", False)
            self.engine = self._create(parsed, {**options, "connect_args": connect_args})
            self._write_gate = threading.Lock()
            event.listen(self.engine, "connect", sqlite_on_connect)
            event.listen(self.engine, "begin", sqlite_on_begin)
            self.snapshot_reader = self.engine.execution_options(**{READ_ONLY_OPTION: True})
            self.statement_reader = self.engine.execution_options(**{AUTOCOMMIT_READ_OPTION: True})
        # The hot path's driver connections, kept between its transactions; on PostgreSQL each
        # is pinged before it is used again, as the pool's pre-ping did at every checkout.
        self._held = HeldConnections(
            self.engine, usable=ping if self.backend == "postgresql" else None
        )

    def _create(self, url: URL, options: dict[str, Any]) -> Engine:
        try:
            return create_engine(url, hide_parameters=True, **options)
        except sa_exc.ArgumentError as exc:  # includes an unknown driver; names no password
            raise ValidationError(f"cannot use {self.what} URL: {exc}") from exc
        except ImportError as exc:
            raise ValidationError(
                f"cannot use {self.what} URL: driver not installed ({exc.name})"
            ) from exc

    def write(self, work: Callable[[Connection], _T]) -> _T:
        """Run ``work`` in one write transaction, committed (durably) before returning.

        Runs it again after a PostgreSQL deadlock or serialization failure, or when ``work``
        raises :class:`LostRace`; ``work`` must therefore have no effect outside the
        transaction. On SQLite, writes of this engine wait for each other on the write gate
        (other processes still wait on the database lock), so ``work`` must not itself call
        :meth:`write`.
        """

        def attempt() -> _T:
            with self.engine.begin() as conn:
                return work(conn)

        return self._write_retrying(attempt)

    def write_on_driver(self, work: Callable[[DriverConnection], _T]) -> _T:
        """:meth:`write` for driver SQL: ``work`` runs in one write transaction on a driver
        connection kept between transactions (:class:`HeldConnections`), committed (durably)
        before returning, with the same rules: the write gate and ``BEGIN IMMEDIATE`` on
        SQLite (WAL, ``synchronous=FULL`` as every connection of this engine), READ COMMITTED
        on PostgreSQL, re-runs after a deadlock, a serialization failure or
        :class:`LostRace`, rollback on any error."""

        def attempt() -> _T:
            conn = self._held.take()
            try:
                return self._in_transaction(conn, work)
            finally:
                self._held.give(conn)

        return self._write_retrying(attempt)

    def _write_retrying(self, attempt: Callable[[], _T]) -> _T:
        """Run ``attempt`` (one write transaction) under the write gate; again after a
        PostgreSQL deadlock or serialization failure or a :class:`LostRace`. Database
        failures leave as :func:`translated` maps them."""
        transient_failures = lost_races = 0
        while True:
            try:
                # SQLite has one writer at a time; threads of this process queue on a Python
                # lock (woken at once) rather than on SQLite's busy handler, which sleeps in
                # growing steps and turned contention into long tail latencies.
                with self._write_gate:
                    return attempt()
            except LostRace as exc:
                # Each lost race means another writer committed: progress, and the next run
                # reads what it wrote. The bound only guards against a bug.
                lost_races += 1
                if lost_races >= RACE_RETRIES:
                    raise Unavailable(
                        f"{self.what}: concurrent writers kept winning the same rows"
                    ) from exc
            except sa_exc.DBAPIError as exc:
                transient_failures += 1
                if (
                    sqlstate(exc) not in TRANSIENT_SQLSTATES
                    or transient_failures >= TRANSIENT_RETRIES
                ):
                    raise database_error(exc, self.what) from exc
            except sa_exc.SQLAlchemyError as exc:
                raise database_error(exc, self.what) from exc

    def read_on_driver(self, work: Callable[[DriverConnection], _T]) -> _T:
        """:meth:`read` (not ``snapshot``) for driver SQL: ``work`` runs one statement (or
        statements that need not agree) in autocommit on a kept driver connection."""
        try:
            return self._held.read(work)
        except sa_exc.SQLAlchemyError as exc:
            raise database_error(exc, self.what) from exc

    def _in_transaction(self, conn: DriverConnection, work: Callable[[DriverConnection], _T]) -> _T:
        driver = conn.driver
        if self.backend == "sqlite":
            # The driver runs in autocommit (sqlite_on_connect); take the write lock now.
            try:
                driver.execute("BEGIN IMMEDIATE")
            except conn.dbapi_error as exc:
                raise conn.wrap_error(exc) from exc
        try:
            result = work(conn)
            try:
                driver.commit()
            except conn.dbapi_error as exc:
                raise conn.wrap_error(exc) from exc
        except BaseException:
            try:
                driver.rollback()
            except Exception as exc:  # never kept or pooled mid-transaction
                conn.invalidate(exc)
            raise
        return result

    def read(self, work: Callable[[Connection], _T], *, snapshot: bool = False) -> _T:
        """Run ``work`` without taking any write lock.

        ``snapshot``: its statements must see one state of the database (SQLite: one deferred
        transaction). Otherwise ``work`` runs a single statement (or statements that need not
        agree) in autocommit.
        """
        engine = self.snapshot_reader if snapshot else self.statement_reader
        with translated(self.what), engine.connect() as conn:
            return work(conn)

    def insert_ignore(self, table: Table) -> Insert:
        """``INSERT ... ON CONFLICT DO NOTHING`` into ``table`` for this backend."""
        return insert_ignore(self.backend, table)

    def advisory_lock(self, conn: Connection, key: int) -> None:
        """Serialize with other transactions taking ``key`` (PostgreSQL; SQLite writers are
        already serialized by ``BEGIN IMMEDIATE``). Held until the transaction ends."""
        if self.backend == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self.read(lambda conn: conn.execute(text("SELECT 1")).scalar_one())

    def dispose(self) -> None:
        """Close every pooled connection. The engine must not be used afterwards."""
        self._held.clear()
        self.engine.dispose()

    def __repr__(self) -> str:
        return (
            f"StoreEngine({self.engine.url.render_as_string(hide_password=True)!r}, "
            f"what={self.what!r})"
        )


def chunks(values: Sequence[_T], size: int = IN_CHUNK) -> Iterator[Sequence[_T]]:
    """``values`` in consecutive slices of at most ``size`` (none when empty)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
