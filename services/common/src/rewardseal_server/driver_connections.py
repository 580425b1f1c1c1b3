"""Driver (DBAPI) connections for hot paths: one per transaction or read, kept between them.

A hot path (the worker's scoring and begin batches, the SQL oracle's reads) runs prebuilt driver
SQL on the driver connection itself. Through SQLAlchemy every batch paid, per connection use, for
a pool checkout and checkin (a locked queue, checkout events, the reset's rollback) and, per
statement, for a cursor wrapped in two generator context managers: with batches of one or two
calls (unary callers), that fixed cost was most of the CPU a batch took.

* :class:`DriverConnection` runs a statement in one call (:meth:`~DriverConnection.fetch`,
  :meth:`~DriverConnection.run`): a driver error leaves as SQLAlchemy's wrapper of it with the
  parameters hidden (so ``sqlstore.translated`` and the retry rules see what they see from
  SQLAlchemy), a lost connection is invalidated, and the engine's ``before_cursor_execute``
  listeners see every statement (logging, tests that count or inspect statements).
* :class:`HeldConnections` keeps a few of an engine's connections checked out between uses
  (a list popped and appended: atomic under the GIL, no lock). A kept connection is checked by
  the caller's ``usable`` before each use (PostgreSQL: a ping, as the pool's pre-ping did; the
  SQL oracle's SQLite file: still the same file); an unusable one is invalidated and another is
  taken. Connections are handed back between uses in the state the pool expects (no open
  transaction, PostgreSQL not in autocommit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from typing import Any, Final, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["KEEP", "DriverConnection", "HeldConnections", "ping"]

_T = TypeVar("_T")

KEEP: Final = 4
"""Connections a :class:`HeldConnections` keeps between uses (more are checked out, and handed
back, under load): about the number of batches in flight at once."""


class DriverConnection:
    """A driver connection checked out of an engine's pool, for a hot path's statements.

    Used by one thread at a time (a transaction or a read); see :class:`HeldConnections`.
    """

    __slots__ = ("_engine", "_proxied", "dbapi_error", "dialect", "driver")

    def __init__(self, engine: Engine, proxied: PoolProxiedConnection) -> None:
        self._engine = engine
        self._proxied = proxied
        self.dialect = engine.dialect
        self.driver: Any = proxied.driver_connection
        """The driver's own connection (``sqlite3.Connection``, ``psycopg.Connection``)."""
        self.dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        """The driver's base error class (what :meth:`wrap_error` takes)."""

    @property
    def info(self) -> dict[Any, Any]:
        """The pool's per-connection dict (lives as long as the driver connection)."""
        return self._proxied.info

    @property
    def valid(self) -> bool:
        """False once the connection was invalidated (it must not be used again)."""
        return self._proxied.is_valid

    def fetch(self, statement: str, params: Any) -> list[Any]:
        """Run driver SQL and return every row (tuples)."""
        return self._execute(statement, params, False, _rows)

    def fetch_named(self, statement: str, params: Any) -> tuple[list[str], list[Any]]:
        """:meth:`fetch`, with the names of the result's columns first."""
        return self._execute(statement, params, False, _named_rows)

    def run(self, statement: str, params: Any, *, many: bool = False) -> int:
        """Run driver SQL (``executemany`` with ``many``); the rows it changed."""
        return self._execute(statement, params, many, _rowcount)

    def copy_in(self, statement: str, types: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """PostgreSQL ``COPY ... FROM STDIN (FORMAT BINARY)``: ``rows``, their columns of
        ``types`` (type names), in one stream; errors as :meth:`run`'s. Several times cheaper
        per row than ``executemany`` (one message per row, each adapted in Python) for a batch's
        rows; it has no ``ON CONFLICT``: a taken key fails the statement."""
        cursor = None
        try:
            cursor = self.driver.cursor()
            for listener in self._engine.dispatch.before_cursor_execute:
                listener(None, cursor, statement, (), None, True)
            with cursor.copy(statement) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
        except self.dbapi_error as exc:
            raise self.wrap_error(exc, cursor) from exc
        finally:
            if cursor is not None:
                with suppress(self.dbapi_error):
                    cursor.close()

    def _execute(self, statement: str, params: Any, many: bool, result: Callable[[Any], _T]) -> _T:
        """Run a statement on a fresh cursor and take ``result`` of that cursor, in one call:
        no context manager per statement (the hot path runs several per batch)."""
        cursor = None
        try:
            cursor = self.driver.cursor()
            # Looked up each time: listeners may be added while connections are kept.
            for listener in self._engine.dispatch.before_cursor_execute:
                listener(None, cursor, statement, params, None, many)
            if many:
                cursor.executemany(statement, params)
            else:
                cursor.execute(statement, params)
            return result(cursor)
        except self.dbapi_error as exc:
            raise self.wrap_error(exc, cursor) from exc
        finally:
            if cursor is not None:
                with suppress(self.dbapi_error):  # closing a cursor of a dead connection
                    cursor.close()

    def wrap_error(self, exc: Exception, cursor: Any = None) -> sa_exc.StatementError:
        """SQLAlchemy's wrapper of a driver error, parameters hidden; a lost connection is
        invalidated (never used or pooled again)."""
        disconnected = self.dialect.is_disconnect(exc, self.driver, cursor)  # type: ignore[arg-type]
        if disconnected:
            self.invalidate(exc)
        return sa_exc.DBAPIError.instance(
            None,
            None,
            exc,
            self.dbapi_error,
            hide_parameters=True,
            connection_invalidated=disconnected,
            dialect=self.dialect,
        )

    def invalidate(self, exc: BaseException | None = None) -> None:
        """Close the connection for good: the pool will not hand it out again."""
        if self._proxied.is_valid:
            self._proxied.invalidate(exc)

    def release(self) -> None:
        """Hand the connection back to the engine's pool (an invalidated one is discarded)."""
        self._proxied.close()


def _rows(cursor: Any) -> list[Any]:
    return cursor.fetchall()  # type: ignore[no-any-return]


def _named_rows(cursor: Any) -> tuple[list[str], list[Any]]:
    return [column[0] for column in cursor.description or ()], cursor.fetchall()


def _rowcount(cursor: Any) -> int:
    return int(cursor.rowcount)


def ping(conn: DriverConnection) -> bool:
    """True when the database answers on ``conn`` (the dialect's pre-ping statement)."""
    try:
        return bool(conn.dialect.do_ping(conn.driver))
    except conn.dialect.loaded_dbapi.Error:
        return False


class HeldConnections:
    """Driver connections of ``engine`` kept checked out of its pool between uses.

    Thread-safe. ``usable`` is asked about a kept connection before it is used again (never
    about a connection fresh from the pool, which has its own checks); one it refuses is
    invalidated. Checking out of the pool raises the driver's error as SQLAlchemy's wrapper.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        keep: int = KEEP,
        usable: Callable[[DriverConnection], bool] | None = None,
    ) -> None:
        self._engine = engine
        self._keep = keep
        self._usable = usable
        self._idle: list[DriverConnection] = []
        self._closed = False

    def take(self) -> DriverConnection:
        """A connection for one use: a kept one that is still usable, else one from the pool."""
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return self._checkout()
            if self._usable is None or self._usable(conn):
                return conn
            conn.invalidate()
            conn.release()

    def give(self, conn: DriverConnection) -> None:
        """Keep ``conn`` for the next use (or hand it back to the pool: invalid, or enough kept).

        ``conn`` must be as the pool expects it: no transaction open.
        """
        if conn.valid and not self._closed and len(self._idle) < self._keep:
            self._idle.append(conn)
        else:
            conn.release()

    def use(self, work: Callable[[DriverConnection], _T]) -> _T:
        """``work`` on a taken connection, given back after it (also when it raises)."""
        conn = self.take()
        try:
            return work(conn)
        finally:
            self.give(conn)

    def read(self, work: Callable[[DriverConnection], _T]) -> _T:
        """``work`` (statements that need no common snapshot) in autocommit: no transaction
        and no ``BEGIN``/``ROLLBACK`` round trips. SQLite connections must already run in
        autocommit for reads (``isolation_level`` None, or the driver's default, which begins
        no transaction for a ``SELECT``); PostgreSQL's is switched on for ``work`` only."""
        conn = self.take()
        try:
            if self._engine.dialect.name == "sqlite":
                return work(conn)
            driver = conn.driver
            driver.autocommit = True
            try:
                return work(conn)
            finally:
                try:
                    driver.autocommit = False
                except Exception as exc:  # never kept or pooled in autocommit
                    conn.invalidate(exc)
        finally:
            self.give(conn)

    def clear(self) -> None:
        """Hand every kept connection back to the pool; keep none from now on."""
        self._closed = True
        while self._idle:
            with suppress(IndexError):
                self._idle.pop().release()

    def _checkout(self) -> DriverConnection:
        dbapi_error = self._engine.dialect.loaded_dbapi.Error
        try:
            proxied = self._engine.raw_connection()
        except dbapi_error as exc:
            raise sa_exc.DBAPIError.instance(
                None, None, exc, dbapi_error, hide_parameters=True, dialect=self._engine.dialect
            ) from exc
        return DriverConnection(self._engine, proxied)
