"""The ``sql`` oracle: SQLite or PostgreSQL, read-only (R-W-6).

Recipe::

    {"kind": "sql",
     "database": {"url_env": "ENV_NAME"} | {"sqlite_path": "rel/path.sqlite"},
     "table": "encounters", "id_column": "id",
     "identity_fields": {"patient_id": "patient_id"}, "timeout_seconds": 2.0}

The statement is ``SELECT * FROM <table> WHERE <col> IN (:params) ... LIMIT n`` (one value per
identity of a batch; ``<col> = :param AND ...`` for identities of several keys) with the identity
in bound parameters, so the cost of a read follows the identity's index, not the table's size.
SQLAlchemy makes the engine (URL, pool, the file checks below); the reads are driver SQL on
connections kept between reads (:mod:`rewardseal_server.driver_connections`).
Read-only is enforced by the database, not by trusting the statement: SQLite opens the file in
URI ``mode=ro``; PostgreSQL sessions start with ``default_transaction_read_only=on``.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection, QueuePool

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import RECORD_ID_FIELD
from rewardseal_server.driver_connections import DriverConnection, HeldConnections, ping
from rewardseal_worker.oracles.base import (
    KIND_SQL,
    MAX_RECORDS,
    OracleUnavailable,
    check_identifier,
    check_identity,
    check_recipe_shape,
    check_relative_path,
    make_record,
    read_each,
    recipe_identity_fields,
    recipe_timeout,
    resolve_relative,
)

ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_PROGRESS_STEPS = 1000
"""SQLite virtual-machine steps between deadline checks."""
_CACHED_COUNTS = 64
"""Batched reads' texts are kept for up to this many identity values (the micro-batches of
unary calls); a longer text is written again, a cost spread over its many identities."""


def check_database_spec(raw: Any) -> None:
    """Check the recipe's ``database``: exactly one of ``url_env`` or ``sqlite_path``."""
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ValidationError(
            'oracle recipe database must be {"url_env": NAME} or {"sqlite_path": PATH}'
        )
    if "url_env" in raw:
        name = raw["url_env"]
        if not isinstance(name, str) or not ENV_NAME_PATTERN.match(name):
            raise ValidationError(
                "oracle recipe database.url_env must name an environment variable"
            )
    elif "sqlite_path" in raw:
        # Checked for shape now; resolved against the bundle when the reader is made.
        check_relative_path(raw["sqlite_path"], "database.sqlite_path")
    else:
        raise ValidationError(
            'oracle recipe database must be {"url_env": NAME} or {"sqlite_path": PATH}'
        )


def check_sql_recipe(recipe: Mapping[str, Any]) -> None:
    """The checks specific to ``sql`` (after :func:`~.base.check_recipe_shape`)."""
    check_database_spec(recipe.get("database"))
    check_identifier(recipe.get("id_column", RECORD_ID_FIELD), "id_column")


def sqlite_readonly_url(path: Path) -> URL:
    """``sqlite+pysqlite:///file:<abs>?mode=ro&uri=true`` for an existing or future file.

    Built as a URL object so that a path with ``?``, ``#`` or ``%`` cannot change the query.
    """
    absolute = path.resolve()
    # SQLite URI filenames treat ? and # as delimiters and % as an escape.
    quoted = str(absolute).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    return URL.create(
        "sqlite+pysqlite", database=f"file:{quoted}", query={"mode": "ro", "uri": "true"}
    )


def _engine_from_env(
    name: str, environ: Mapping[str, str], timeout: float
) -> tuple[Engine, Path | None]:
    """The engine of the URL in ``environ[name]``, and the SQLite file it reads (None for
    PostgreSQL)."""
    raw = environ.get(name)
    if not raw:
        raise ValidationError(f"environment variable {name} named by the oracle recipe is not set")
    try:
        url = make_url(raw)
    except (ArgumentError, ValueError):
        # from None: SQLAlchemy's message quotes the URL, which may hold a password.
        raise ValidationError(
            f"environment variable {name} does not hold a valid database URL"
        ) from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            raise ValidationError(
                f"environment variable {name} must name a SQLite file by plain path"
            )
        return _sqlite_engine(Path(database), timeout), Path(database)
    if backend == "postgresql":
        driver = url.get_driver_name()
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        elif driver not in ("psycopg", "psycopg2"):
            raise ValidationError(
                f"environment variable {name}: driver {driver!r} is not supported"
            )
        millis = max(1, math.ceil(timeout * 1000))
        try:
            engine = sa.create_engine(
                url,
                pool_pre_ping=True,
                connect_args={
                    # Read-only and bounded by the server itself, whatever the statement says.
                    "options": (
                        f"-c default_transaction_read_only=on -c statement_timeout={millis}"
                    ),
                    "connect_timeout": max(1, math.ceil(timeout)),
                },
            )
        except ImportError:
            raise ValidationError(
                "the PostgreSQL driver (psycopg) is not installed on this worker"
            ) from None
        except (ArgumentError, ValueError):
            raise ValidationError(
                f"environment variable {name} does not hold a usable PostgreSQL URL"
            ) from None
        return engine, None
    raise ValidationError(
        f"environment variable {name} names backend {backend!r}; only sqlite and postgresql"
    )


_FILE_IDENTITY = "rewardseal_file_identity"
"""Connection-record key: the SoR file's (st_dev, st_ino) taken just before it was opened."""
SQLITE_POOL_SIZE = 4
"""SQLite connections kept open between reads (more are opened, and closed, under load)."""
SQLITE_POOL_OVERFLOW = 16


def _file_identity(path: Path) -> tuple[int, int] | None:
    """The file behind ``path`` as (device, inode); None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _same_file(stamp: tuple[int, int] | None, path: Path) -> bool:
    """True when a connection stamped ``stamp`` still reads the file at ``path``."""
    return stamp is not None and _file_identity(path) == stamp


def _sqlite_engine(path: Path, timeout: float) -> Engine:
    """A read-only engine on ``path`` whose pooled connections never outlive the file.

    An oracle must read the store as it is now: a pooled connection keeps reading a file that was
    moved or replaced. So the file's (device, inode) is taken just before each connection opens
    it (taken before, a swap in between can only make the stamp stale, never the handle), and a
    checkout whose stamp differs from the path's file now discards the connection; the pool then
    opens the file anew (or fails as "could not be opened" when it is gone). The reader checks the
    connections it keeps between reads the same way (:func:`_keeps_reading`). Every read is its
    own transaction, so a kept connection sees every commit. "timeout" is SQLite's busy timeout:
    how long to wait on a writer's lock (the read deadline is enforced apart, see ``_fetch``).
    """
    engine = sa.create_engine(
        sqlite_readonly_url(path),
        connect_args={"timeout": timeout},
        poolclass=QueuePool,
        pool_size=SQLITE_POOL_SIZE,
        max_overflow=SQLITE_POOL_OVERFLOW,
        pool_timeout=timeout,
    )
    resolved = path.resolve()

    @sa.event.listens_for(engine, "do_connect")
    def stamp(dialect: Any, record: ConnectionPoolEntry, cargs: Any, cparams: Any) -> None:
        record.info[_FILE_IDENTITY] = _file_identity(resolved)

    @sa.event.listens_for(engine, "checkout")
    def still_the_file(
        dbapi_connection: Any, record: ConnectionPoolEntry, proxy: PoolProxiedConnection
    ) -> None:
        if not _same_file(record.info.get(_FILE_IDENTITY), resolved):
            raise DisconnectionError("the system of record file was replaced")

    return engine


def _keeps_reading(path: Path) -> Callable[[DriverConnection], bool]:
    """The check on a connection kept between reads of the SQLite file ``path``: still that
    file (one ``stat`` per read, as the pool's checkout made)."""
    resolved = path.resolve()
    return lambda conn: _same_file(conn.info.get(_FILE_IDENTITY), resolved)


def _to_json_scalar(value: Any) -> Any:
    """Database values as JSON scalars; anything else is left for make_record to refuse."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Types :func:`_to_json_scalar` returns unchanged (most SoR values): no call for them."""


class _Placeholders:
    """The driver's parameter markers (its DBAPI ``paramstyle``) and how values are bound."""

    def __init__(self, paramstyle: str) -> None:
        if paramstyle not in ("qmark", "format", "numeric", "pyformat", "named"):
            raise ValidationError(
                f"the database driver's paramstyle {paramstyle!r} is not supported"
            )
        self._style = paramstyle
        self.named = paramstyle in ("pyformat", "named")

    def mark(self, index: int) -> str:
        """The marker of the ``index``-th parameter (from 0)."""
        style = self._style
        if style == "qmark":
            return "?"
        if style == "format":
            return "%s"
        if style == "numeric":
            return f":{index + 1}"
        if style == "pyformat":
            return f"%(p{index})s"
        return f":p{index}"

    def bind(self, values: Sequence[Any]) -> Any:
        """``values`` as the driver takes them for markers 0..n-1."""
        if self.named:
            return {f"p{index}": value for index, value in enumerate(values)}
        return tuple(values)


class SqlReader:
    """Reads one table of a SQL system of record by identity, read-only and bounded in time."""

    kind: str = KIND_SQL
    timeout_seconds: float

    def __init__(
        self,
        engine: Engine,
        *,
        table: str,
        id_column: str,
        identity_fields: Mapping[str, str],
        timeout_seconds: float,
        sqlite: bool,
        usable: Callable[[DriverConnection], bool] | None = None,
    ) -> None:
        """Wrap ``engine`` (made once, reused for every read).

        ``usable`` checks a connection kept between reads before it reads again (default: a
        ping on PostgreSQL, nothing on SQLite; :meth:`from_recipe` passes the SQLite file
        check). Prefer :meth:`from_recipe`; identifiers are validated here as well.
        """
        self._engine = engine
        self.local = sqlite
        """A SQLite file (on this host); PostgreSQL is across a network."""
        self._table_name = check_identifier(table, "table")
        self._id_column = check_identifier(id_column, "id_column")
        self._identity_fields = dict(identity_fields)
        for key, column in self._identity_fields.items():
            check_identifier(column, f"identity_fields.{key}")
        self.timeout_seconds = timeout_seconds
        self._keys = sorted(self._identity_fields)
        self._source = f"sql table {self._table_name!r}"
        # The statements are driver SQL, written once from validated identifiers quoted by the
        # dialect: SQLAlchemy's per-execution work (expanding the IN list into a new text for
        # every read, the execution context) cost more than the read itself.
        quote = engine.dialect.identifier_preparer.quote
        self._marks = _Placeholders(engine.dialect.paramstyle)
        self._head = f"SELECT * FROM {quote(self._table_name)} WHERE "
        self._tail = f" ORDER BY {quote(self._id_column)} LIMIT "
        # Single-key identities (the usual case) are read for a whole batch with one indexed
        # IN lookup, one identity being a batch of one; others one identity at a time.
        self._batch_column = self._identity_fields[self._keys[0]] if len(self._keys) == 1 else None
        self._quoted_batch_column = (
            None if self._batch_column is None else quote(self._batch_column)
        )
        conditions = " AND ".join(
            f"{quote(self._identity_fields[key])} = {self._marks.mark(index)}"
            for index, key in enumerate(self._keys)
        )
        # LIMIT one more than allowed, so "too many" is detectable without reading everything.
        self._select_one = (
            f"{self._head}{conditions}{self._tail}{self._marks.mark(len(self._keys))}"
        )
        self._select_in: dict[int, str] = {}
        self._held = HeldConnections(
            engine,
            keep=SQLITE_POOL_SIZE,
            usable=usable if usable is not None or sqlite else ping,
        )
        self._driver_errors: tuple[type[BaseException], ...] = (
            SQLAlchemyError,
            sqlite3.Error,
            OSError,
            engine.dialect.loaded_dbapi.Error,
        )

    @classmethod
    def from_recipe(
        cls, recipe: Mapping[str, Any], bundle_dir: Path, *, environ: Mapping[str, str]
    ) -> SqlReader:
        """Make a reader from a ``sql`` recipe; ``url_env`` is looked up in ``environ``."""
        check_recipe_shape(recipe)
        check_sql_recipe(recipe)
        timeout = recipe_timeout(recipe)
        database = recipe["database"]
        if "url_env" in database:
            engine, path = _engine_from_env(database["url_env"], environ, timeout)
        else:
            path = resolve_relative(database["sqlite_path"], bundle_dir, "database.sqlite_path")
            engine = _sqlite_engine(path, timeout)
        return cls(
            engine,
            table=recipe["table"],
            id_column=recipe.get("id_column", RECORD_ID_FIELD),
            identity_fields=recipe_identity_fields(recipe),
            timeout_seconds=timeout,
            sqlite=path is not None,
            usable=None if path is None else _keeps_reading(path),
        )

    @property
    def engine(self) -> Engine:
        """The underlying engine (read-only at the database level); for diagnostics and tests."""
        return self._engine

    def read(self, identity: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every row of ``identity`` as a record. Blocking.

        Raises:
            IdentityMismatch: when the identity's keys are not the recipe's.
            OracleUnavailable: for any database error or timeout; the message names the table
                and the error class, never the URL, the SQL parameters or a row.
        """
        if self._batch_column is not None:
            (result,) = self.read_many([identity])
            if isinstance(result, OracleUnavailable):
                raise result
            return result
        check_identity(identity, self._identity_fields)
        values = [identity[key] for key in self._keys]
        rows = self._fetch(self._select_one, [*values, MAX_RECORDS + 1])
        if len(rows) > MAX_RECORDS:
            raise self._too_many()
        return [self._record(row) for row in rows]

    def read_many(
        self, identities: Sequence[Mapping[str, str]]
    ) -> list[list[dict[str, Any]] | OracleUnavailable]:
        """Every identity's rows with one indexed query; same answer as one ``read`` each."""
        column = self._batch_column
        if column is None:
            return read_each(self, identities)
        for identity in identities:
            check_identity(identity, self._identity_fields)
        if not identities:
            return []
        key = self._keys[0]
        values = sorted({identity[key] for identity in identities})
        cap = (MAX_RECORDS + 1) * len(values)
        try:
            rows = self._fetch(self._select_for(len(values)), [*values, cap])
        except OracleUnavailable as error:
            return [error for _ in identities]
        if len(rows) >= cap:
            if len(values) == 1:
                return [self._too_many() for _ in identities]
            # Some identity may exceed the per-identity cap: let the single reads say which.
            return read_each(self, identities)
        try:
            records = [self._record(row) for row in rows]
        except OracleUnavailable as error:
            if len(values) == 1:
                return [error for _ in identities]
            return read_each(self, identities)  # the identities whose rows are unusable
        if len(values) == 1:
            # Every row is the identity's (the database matched it): nothing to group, so a
            # batch of one reads exactly as read() always did.
            if len(identities) == 1:
                return [records]
            return [[dict(r) for r in records] for _ in identities]
        grouped: dict[str, list[dict[str, Any]]] = {value: [] for value in values}
        for row, record in zip(rows, records, strict=True):
            found = grouped.get(str(row[column]))
            if found is None:
                # The database matched a value that the row does not spell alike (a REAL column
                # read as "42.0" for "42", a NOCASE column): only single reads can say whose.
                return read_each(self, identities)
            found.append(record)
        results: list[list[dict[str, Any]] | OracleUnavailable] = []
        for identity in identities:
            found = grouped[identity[key]]
            if len(found) > MAX_RECORDS:
                results.append(self._too_many())
            else:
                # Each identity gets its own copies: the judge may not share mutable records.
                results.append([dict(r) for r in found])
        return results

    def _select_for(self, count: int) -> str:
        """The batched read's text for ``count`` identity values (made once per count)."""
        statement = self._select_in.get(count)
        if statement is None:
            marks = ", ".join(self._marks.mark(index) for index in range(count))
            statement = (
                f"{self._head}{self._quoted_batch_column} IN ({marks})"
                f"{self._tail}{self._marks.mark(count)}"
            )
            if count <= _CACHED_COUNTS:
                self._select_in[count] = statement
        return statement

    def _fetch(self, statement: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        """Run one read on a kept connection: rows as column -> value.

        Raises:
            OracleUnavailable: any database error or timeout (see :meth:`_describe`).
        """
        started = time.monotonic()
        deadline = started + self.timeout_seconds
        params = self._marks.bind(values)

        def work(conn: DriverConnection) -> list[dict[str, Any]]:
            driver = conn.driver
            if not isinstance(driver, sqlite3.Connection):
                return self._rows(conn, statement, params)
            # SQLite has no statement timeout: abort the statement from its progress handler.
            driver.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
            try:
                return self._rows(conn, statement, params)
            finally:
                driver.set_progress_handler(None, 0)

        try:
            return self._held.read(work)
        except self._driver_errors as exc:
            # from None: the chained error would print the SQL parameters (identity values).
            raise OracleUnavailable(self._describe(exc, self._source, started)) from None

    @staticmethod
    def _rows(conn: DriverConnection, statement: str, params: Any) -> list[dict[str, Any]]:
        names, rows = conn.fetch_named(statement, params)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _record(self, row: Mapping[str, Any]) -> dict[str, Any]:
        fields = {k: v if type(v) in _PLAIN else _to_json_scalar(v) for k, v in row.items()}
        return make_record(fields, self._id_column, self._source)

    def _too_many(self) -> OracleUnavailable:
        return OracleUnavailable(
            f"{self._source}: more than {MAX_RECORDS} records for one identity"
        )

    def _describe(self, exc: BaseException, source: str, started: float) -> str:
        if time.monotonic() - started >= self.timeout_seconds:
            return f"{source}: read timed out after {self.timeout_seconds:g}s"
        orig = exc.orig if isinstance(exc, DBAPIError) else exc
        text = str(orig) if isinstance(orig, sqlite3.Error) else ""
        # Only SQLite's own fixed phrases are passed on; they hold no URL and no row.
        if text.startswith("no such table"):
            return f"{source}: the table does not exist"
        if text.startswith("unable to open database file"):
            return f"{source}: the database file could not be opened"
        if text.startswith("no such column"):
            return f"{source}: a recipe column does not exist"
        return f"{source}: read failed ({type(orig).__name__})"

    def close(self) -> None:
        """Hand back the kept connections and dispose of the engine's connection pool."""
        self._held.clear()
        self._engine.dispose()
