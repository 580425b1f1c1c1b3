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
  run on the pooled driver connection itself (:class:`DriverConnection`) without SQLAlchemy's
  per-transaction objects.
* Error mapping (:func:`translated`): a database that cannot be reached becomes
  :class:`~rewardseal.errors.Unavailable`, any other database failure a plain
  :class:`~rewardseal.errors.RewardSealError`; messages name only the error class and
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
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import DateTime, Dialect, Insert, Table, TypeDecorator, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from rewardseal.errors import RewardSealError, Unavailable, ValidationError

__all__ = [
    "AUTOCOMMIT_READ_OPTION",
    "IN_CHUNK",
    "READ_ONLY_OPTION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "TRANSIENT_SQLSTATES",
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
    "error_name",
    "execute_on_cursor",
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


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Map database failures onto rewardseal errors; let rewardseal errors through.

    Unreachable, locked or timed-out databases become :class:`Unavailable`; every other
    SQLAlchemy failure a :class:`RewardSealError` (INTERNAL). ``what`` names the store.
    """
    try:
        yield
    except RewardSealError:
        raise
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
        raise Unavailable(f"{what} unavailable ({error_name(exc)})") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise RewardSealError(f"{what} error ({error_name(exc)})") from exc


def execute_on_cursor(
    conn: Connection, cursor: Any, statement: str, params: Any, *, many: bool = False
) -> None:
    """Run driver SQL on ``cursor``, a driver cursor of ``conn`` (``executemany`` with
    ``many``). The engine's ``before_cursor_execute`` listeners (statement logging, tests that
    count or inspect statements) see it as they see SQLAlchemy's own statements."""
    for listener in conn.dispatch.before_cursor_execute:
        listener(conn, cursor, statement, params, None, many)
    if many:
        cursor.executemany(statement, params)
    else:
        cursor.execute(statement, params)


class LostRace(Exception):
    """A concurrent writer won a row this transaction counted on: roll back and run again."""


class DriverConnection:
    """A pooled driver (DBAPI) connection of a :class:`StoreEngine`, held for one transaction
    of a hot path (:meth:`StoreEngine.write_on_driver`, :meth:`StoreEngine.read_on_driver`).

    Through a SQLAlchemy ``Connection`` every transaction paid for that object, its
    ``Transaction``, the ``begin`` event and an execution context for ``BEGIN IMMEDIATE``:
    about 0.4 ms of CPU per small batch, more than its statements. Here the transaction is
    begun and committed on the driver connection, under the same rules.
    """

    def __init__(self, engine: Engine, proxied: PoolProxiedConnection) -> None:
        self._engine = engine
        self._proxied = proxied
        self.dialect = engine.dialect
        self.driver = proxied.driver_connection
        """The driver's own connection (``sqlite3.Connection``, ``psycopg.Connection``)."""
        self._dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error

    def execute(self, cursor: Any, statement: str, params: Any, *, many: bool = False) -> None:
        """Run driver SQL on ``cursor`` (``executemany`` with ``many``). The engine's
        ``before_cursor_execute`` listeners see it (with no SQLAlchemy connection: None)."""
        for listener in self._engine.dispatch.before_cursor_execute:
            listener(None, cursor, statement, params, None, many)
        if many:
            cursor.executemany(statement, params)
        else:
            cursor.execute(statement, params)

    def invalidate(self, exc: BaseException) -> None:
        """Close the connection for good: the pool will not hand it out again."""
        if self._proxied.is_valid:
            self._proxied.invalidate(exc)

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A driver cursor; driver errors leave as SQLAlchemy's wrappers of them."""
        with self.wrapped():
            cursor = self.driver.cursor()  # type: ignore[union-attr]
        try:
            with self.wrapped(cursor):
                yield cursor
        finally:
            with suppress(self._dbapi_error):  # closing a cursor of a dead connection
                cursor.close()

    @contextmanager
    def wrapped(self, cursor: Any = None) -> Iterator[None]:
        """Raise a driver error as SQLAlchemy's wrapper of it (parameters hidden), so
        :func:`translated` and the retry rules of :meth:`StoreEngine.write` see what they see
        from SQLAlchemy; a lost connection is invalidated (never returned to the pool)."""
        try:
            yield
        except self._dbapi_error as exc:
            disconnected = self.dialect.is_disconnect(exc, self.driver, cursor)  # type: ignore[arg-type]
            if disconnected:
                self._proxied.invalidate(exc)
            raise sa_exc.DBAPIError.instance(
                None,
                None,
                exc,
                self._dbapi_error,
                hide_parameters=True,
                connection_invalidated=disconnected,
                dialect=self.dialect,
            ) from exc


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
        """:meth:`write` for driver SQL: ``work`` runs in one write transaction on a pooled
        driver connection, committed (durably) before returning, with the same rules: the
        write gate and ``BEGIN IMMEDIATE`` on SQLite (WAL, ``synchronous=FULL`` as every
        connection of this engine), READ COMMITTED on PostgreSQL, re-runs after a deadlock, a
        serialization failure or :class:`LostRace`, rollback on any error."""

        def attempt() -> _T:
            with self._driver_connection() as conn:
                return self._in_transaction(conn, work)

        return self._write_retrying(attempt)

    def _write_retrying(self, attempt: Callable[[], _T]) -> _T:
        """Run ``attempt`` (one write transaction) under the write gate; again after a
        PostgreSQL deadlock or serialization failure or a :class:`LostRace`."""
        transient_failures = lost_races = 0
        with translated(self.what):
            while True:
                try:
                    # SQLite has one writer at a time; threads of this process queue on a Python
                    # lock (woken at once) rather than on SQLite's busy handler, which sleeps
                    # in growing steps and turned contention into long tail latencies.
                    with self._write_gate:
                        return attempt()
                except LostRace as exc:
                    # Each lost race means another writer committed: progress, and the next
                    # run reads what it wrote. The bound only guards against a bug.
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
                        raise

    def read_on_driver(self, work: Callable[[DriverConnection], _T]) -> _T:
        """:meth:`read` (not ``snapshot``) for driver SQL: ``work`` runs one statement (or
        statements that need not agree) in autocommit on a pooled driver connection."""
        with translated(self.what), self._driver_connection() as conn:
            if self.backend == "sqlite":
                return work(conn)  # no BEGIN: each statement is its own snapshot
            driver: Any = conn.driver
            driver.autocommit = True  # as the AUTOCOMMIT option of read(): no BEGIN/ROLLBACK
            try:
                return work(conn)
            finally:
                try:
                    driver.autocommit = False
                except Exception as exc:  # never back to the pool in autocommit
                    conn.invalidate(exc)

    @contextmanager
    def _driver_connection(self) -> Iterator[DriverConnection]:
        """A driver connection checked out of the pool (PostgreSQL: pre-pinged) and returned
        to it (rolled back by the pool's reset) after the block."""
        try:
            proxied = self.engine.raw_connection()
        except self.engine.dialect.loaded_dbapi.Error as exc:
            raise sa_exc.DBAPIError.instance(
                None,
                None,
                exc,
                self.engine.dialect.loaded_dbapi.Error,
                hide_parameters=True,
                dialect=self.engine.dialect,
            ) from exc
        try:
            yield DriverConnection(self.engine, proxied)
        finally:
            proxied.close()

    def _in_transaction(self, conn: DriverConnection, work: Callable[[DriverConnection], _T]) -> _T:
        driver: Any = conn.driver
        with conn.wrapped():
            if self.backend == "sqlite":
                # The driver runs in autocommit (sqlite_on_connect); take the write lock now.
                driver.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
            with conn.wrapped():
                driver.commit()
        except BaseException:
            try:
                driver.rollback()
            except Exception as exc:  # never back to the pool mid-transaction
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
        if self.backend == "postgresql":
            return pg_dialect.insert(table).on_conflict_do_nothing()
        return sqlite_dialect.insert(table).on_conflict_do_nothing()

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
