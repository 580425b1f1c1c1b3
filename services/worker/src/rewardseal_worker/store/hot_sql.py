"""The hot path's statements, prebuilt as driver SQL and run on the raw DBAPI connection.

The reads before judging and the receipt commit run for every scoring batch, the registration
reads and insert for every batch of begins. Through SQLAlchemy
Core each statement paid for an execution context, parameter processing and, for every list
bound into ``IN``, rendering the statement again for that list's length. Here each statement is
fixed text per backend, prepared once by the driver (sqlite3's statement cache; psycopg's
automatic server-side prepare), and a list is ONE parameter whatever its length: a JSON array
read with ``json_each`` on SQLite, an array literal compared with ``= ANY`` on PostgreSQL. No
chunking.

The transactions are :class:`~rewardseal_server.sqlstore.StoreEngine`'s, begun and committed
on a driver connection kept between them (``StoreEngine.write_on_driver``, ``read_on_driver``):
SQLite's ``BEGIN IMMEDIATE``, the write gate, the durable commit and the re-runs after a lost
race or a PostgreSQL deadlock are the rules of ``StoreEngine.write``, with no SQLAlchemy
``Connection`` or ``Transaction`` per batch. A driver error is raised as SQLAlchemy's wrapper of
it (so :func:`~rewardseal_server.sqlstore.translated` maps it, parameters hidden). Each
statement is one call (``DriverConnection.fetch``/``run``); on SQLite a commit's checks under
the lock (ledgers, existing receipts, taken credits) are one statement
(:meth:`HotSql.lock_and_check`).

Values are stored exactly as SQLAlchemy stored them (the other reads and writes of the store
still use it): SQLite timestamps as naive-UTC ``YYYY-MM-DD HH:MM:SS.ffffff`` text, JSON as text;
PostgreSQL ``timestamptz`` and ``json``.

The tables are :mod:`.schema`'s: the column lists of the inserts and COPYs that write whole rows
are taken from its ``Table`` objects, and a test prepares every statement of
:meth:`HotSql.statements` against a store at the newest migration, on both backends, so the text
cannot drift from the schema (tests/worker/test_hot_sql_schema.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from rewardseal_server.sqlstore import Backend, DriverConnection, as_utc
from rewardseal_worker.store.schema import open_episodes, receipts

_json_string: Any = getattr(json.encoder, "c_encode_basestring", None) or (
    json.encoder.encode_basestring
)
"""A str as a JSON string literal (json's C implementation where there is one)."""


def _array_element(value: str) -> str:
    """``value`` as a double-quoted element of a PostgreSQL array literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _json_or_none(value: Any) -> str | None:
    """``value`` as JSON text; None (SQL NULL) for None."""
    return None if value is None else json.dumps(value)


SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
"""How SQLAlchemy's ``DateTime`` stores a timestamp in SQLite (naive UTC)."""

Registration = tuple[dict[str, str], list[dict[str, Any]] | None, datetime, dict[str, Any] | None]
"""An open registration as read: identity, baseline (None: no baseline), begun_at (aware), task
parameters (None: the contract declares none)."""

BeginRead = tuple[str, str, str, datetime, bool, dict[str, Any] | None]
"""An open registration as a batch of begins reads it: contract, identity key, episode id,
begun_at (aware), whether a baseline is recorded, task parameters (None: none bound)."""

_RECEIPT_COLUMNS: tuple[str, ...] = tuple(receipts.columns.keys())
"""The columns of a receipt row, in the order its insert binds them (the table's)."""

_OPEN_COLUMNS: tuple[str, ...] = tuple(open_episodes.columns.keys())
"""The columns of an open registration, in the order its insert binds them (the table's)."""

_RECEIPT_TYPES = ("text", "text", "text", "int8", "bytea", "bytea", "timestamptz")
"""The PostgreSQL types of :data:`_RECEIPT_COLUMNS` (for COPY's binary rows)."""

_OPEN_TYPES = ("text", "text", "text", "text", "text", "timestamptz", "text")
"""The types COPY writes a registration's columns as. ``identity``, ``baseline`` and
``task_parameters`` are ``json`` columns whose binary form is their text: written as ``text``,
our JSON goes in as it is (psycopg's ``json`` dumper would encode the string again)."""

# Kinds of rows of the one-statement reads (first column).
_OPEN, _RECEIPT, _HIGHEST, _TAKEN, _CREDITED = 0, 1, 2, 3, 4


class HotSql:
    """The hot path's statements for one backend, and the code that runs them.

    Every method takes the :class:`~rewardseal_server.sqlstore.DriverConnection` of a
    transaction the caller opened with :class:`~rewardseal_server.sqlstore.StoreEngine`.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        sqlite = backend == "sqlite"
        self._sqlite = sqlite

        # Placeholders: SQLite numbered (?1, reused), PostgreSQL named (%(name)s).
        def param(name: str, number: int) -> str:
            return f"?{number}" if sqlite else f"%({name})s"

        def listed(name: str, number: int) -> str:
            if sqlite:
                return f"IN (SELECT value FROM json_each(?{number}))"
            return f"= ANY(%({name})s::text[])"

        self._lookup = (
            f"SELECT {_OPEN}, episode_id, identity_key, identity, baseline, begun_at, "
            "task_parameters "
            f"FROM open_episodes WHERE contract_digest = {param('contract', 1)} "
            f"AND episode_id {listed('ids', 2)} "
            f"UNION ALL SELECT {_RECEIPT}, episode_id, receipt_id, NULL, NULL, NULL, NULL "
            f"FROM receipts WHERE episode_id {listed('ids', 2)} "
            f"UNION ALL SELECT {_HIGHEST}, NULL, "
            + ("highest_update" if sqlite else "highest_update::text")
            + ", NULL, NULL, NULL, NULL "
            f"FROM policy_ledger WHERE contract_digest = {param('contract', 1)} "
            # The records credited for the contract to the open registrations' identities (two
            # index searches, as in _credited) and to no identity, in the same snapshot: the
            # judge's credited set costs no second transaction (advisory, as before: the commit
            # checks every credit again under its lock, and a record taken in between sends
            # the episode round again, R-W-3).
            f"UNION ALL SELECT {_CREDITED}, identity_key, record_id, NULL, NULL, NULL, NULL "
            f"FROM credited_records WHERE contract_digest = {param('contract', 1)} "
            "AND identity_key IN (SELECT identity_key FROM open_episodes "
            f"WHERE contract_digest = {param('contract', 1)} AND episode_id {listed('ids', 2)}) "
            f"UNION ALL SELECT {_CREDITED}, NULL, record_id, NULL, NULL, NULL, NULL "
            f"FROM credited_records WHERE contract_digest = {param('contract', 1)} "
            "AND identity_key IS NULL"
        )
        # Two index searches, not one OR: SQLite would scan every credit of the contract.
        self._credited = (
            "SELECT identity_key, record_id FROM credited_records "
            f"WHERE contract_digest = {param('contract', 1)} AND identity_key {listed('keys', 2)} "
            "UNION ALL SELECT identity_key, record_id FROM credited_records "
            f"WHERE contract_digest = {param('contract', 1)} AND identity_key IS NULL"
        )
        # FOR UPDATE after ORDER BY: PostgreSQL locks the ledger rows in sorted order.
        self._lock_ledgers = (
            "SELECT contract_digest, highest_update FROM policy_ledger "
            f"WHERE contract_digest {listed('contracts', 1)}"
            + ("" if sqlite else " ORDER BY contract_digest FOR UPDATE")
        )
        self._insert_ledger = (
            "INSERT INTO policy_ledger (contract_digest, highest_update) "
            f"VALUES ({param('contract', 1)}, NULL) ON CONFLICT DO NOTHING"
        )
        self._existing_and_taken = (
            f"SELECT {_RECEIPT}, episode_id, receipt_id FROM receipts "
            f"WHERE episode_id {listed('ids', 1)} "
            f"UNION ALL SELECT {_TAKEN}, contract_digest, record_id FROM credited_records "
            f"WHERE contract_digest {listed('contracts', 2)} AND record_id {listed('records', 3)}"
        )
        # SQLite's BEGIN IMMEDIATE already holds the lock the ledger read takes on PostgreSQL:
        # there, the ledgers come in the same statement (see lock_and_check). SQLite only: on
        # PostgreSQL the UNION's text and bigint columns would not even prepare.
        self._ledgers_existing_and_taken = (
            f"{self._existing_and_taken} UNION ALL SELECT {_HIGHEST}, contract_digest, "
            f"highest_update FROM policy_ledger WHERE contract_digest {listed('contracts', 2)}"
            if sqlite
            else ""
        )
        self._insert_receipt = (
            f"INSERT INTO receipts ({', '.join(_RECEIPT_COLUMNS)}) VALUES ("
            + ", ".join(param(name, n) for n, name in enumerate(_RECEIPT_COLUMNS, start=1))
            + ") ON CONFLICT DO NOTHING"
        )
        # PostgreSQL: a batch's receipts, or registrations, in one COPY stream (see
        # insert_receipts, register).
        self._copy_receipts = (
            f"COPY receipts ({', '.join(_RECEIPT_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        )
        self._copy_open = (
            f"COPY open_episodes ({', '.join(_OPEN_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        )
        self._insert_outbox = (
            "INSERT INTO outbox (receipt_id, envelope, created_at, batch_index, attempts, "
            "next_attempt_at, last_error) VALUES ("
            f"{param('receipt_id', 1)}, {param('envelope', 2)}, {param('created_at', 3)}, "
            f"{param('batch_index', 4)}, 0, {param('created_at', 3)}, NULL)"
        )
        self._insert_credit = (
            "INSERT INTO credited_records (contract_digest, record_id, receipt_id, identity_key) "
            f"VALUES ({param('contract_digest', 1)}, {param('record_id', 2)}, "
            f"{param('receipt_id', 3)}, {param('identity_key', 4)}) ON CONFLICT DO NOTHING"
        )
        self._close_open = f"DELETE FROM open_episodes WHERE episode_id {listed('ids', 1)}"
        # Forward only, in the statement too: the commit computes the new highest under the
        # ledger lock as max(highest, item), so the guard never holds one back; it makes "the
        # highest never moves backwards" (R-W-7, with a policy lag every batch may hold items
        # below it) a property of the write itself, at no extra statement.
        self._raise_ledger = (
            f"UPDATE policy_ledger SET highest_update = {param('highest', 1)} "
            f"WHERE contract_digest = {param('contract', 2)} "
            f"AND (highest_update IS NULL OR highest_update < {param('highest', 1)})"
        )
        self._owners = (
            f"SELECT receipt_id, episode_id FROM receipts WHERE receipt_id {listed('ids', 1)}"
        )
        # Begins: the registrations a batch can meet (its episode ids anywhere, its contract x
        # identity slots), locked on PostgreSQL in key order. FOR UPDATE takes no UNION, so
        # PostgreSQL reads the episodes' receipts in a second statement, after the lock (READ
        # COMMITTED: a receipt whose commit closed a registration before the lock is visible);
        # SQLite's writers are serialized by BEGIN IMMEDIATE, so there one statement reads both.
        open_for_begin = (
            f"SELECT {_OPEN}, contract_digest, identity_key, episode_id, begun_at, "
            "baseline IS NOT NULL, task_parameters "
            f"FROM open_episodes WHERE episode_id {listed('ids', 1)} "
            f"OR (contract_digest {listed('contracts', 2)} AND identity_key {listed('keys', 3)})"
        )
        receipts_for_begin = (
            f"SELECT {_RECEIPT}, NULL, NULL, episode_id, receipt_id, NULL, NULL FROM receipts "
            f"WHERE episode_id {listed('ids', 1)}"
        )
        all_three = ("ids", "contracts", "keys")
        self._begin_reads: tuple[tuple[str, tuple[str, ...]], ...] = (
            ((f"{open_for_begin} UNION ALL {receipts_for_begin}", all_three),)
            if sqlite
            else (
                (f"{open_for_begin} ORDER BY contract_digest, identity_key FOR UPDATE", all_three),
                (receipts_for_begin, ("ids",)),
            )
        )
        self._insert_open = (
            f"INSERT INTO open_episodes ({', '.join(_OPEN_COLUMNS)}) VALUES ("
            f"{param('contract_digest', 1)}, "
            f"{param('identity_key', 2)}, {param('episode_id', 3)}, "
            + (
                "?4, ?5, ?6, ?7"
                if sqlite
                else "%(identity)s::json, %(baseline)s::json, %(begun_at)s, "
                "%(task_parameters)s::json"
            )
            + ") ON CONFLICT DO NOTHING"
        )

    def statements(self) -> dict[str, str]:
        """Every statement this backend runs, by name (for the test that checks them against
        the schema)."""
        named = {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, str) and value and name != "backend"
        }
        for index, (statement, _) in enumerate(self._begin_reads):
            named[f"_begin_reads[{index}]"] = statement
        return named

    # ------------------------------------------------------------------ plumbing

    def _list(self, values: Collection[str]) -> str:
        """A list bound as one parameter: JSON text for ``json_each`` (SQLite), the text of an
        array literal for ``::text[]`` (PostgreSQL)."""
        if self._sqlite:
            # A JSON array of strings, each encoded by json's own C function: json.dumps built
            # an encoder object per call, for lists that are mostly one id long.
            return "[" + ",".join(map(_json_string, values)) + "]"
        # psycopg's list adapter escapes element by element through a regex in Python: at 64
        # ids, ten lists per begin-and-score batch cost about 7% of the worker's CPU per
        # episode. Every element quoted, so only '"' and '\' need escaping.
        return "{" + ",".join(map(_array_element, values)) + "}"

    def _bind(self, named: Mapping[str, Any], order: Sequence[str]) -> Any:
        """Parameters for a statement: positional for SQLite (``?1`` is ``order[0]``)."""
        return tuple(named[name] for name in order) if self._sqlite else dict(named)

    def _time(self, value: datetime) -> Any:
        if self._sqlite:
            # SQLITE_TIME_FORMAT, as isoformat writes it (strftime is several times slower).
            return as_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")
        return as_utc(value)

    # ------------------------------------------------------------------ reads before judging

    def lookup(
        self, conn: DriverConnection, contract_digest: str, episode_ids: Sequence[str]
    ) -> tuple[dict[str, str], dict[str, Registration], int | None, list[tuple[str | None, str]]]:
        """In ONE statement (one snapshot): the episodes' receipts (episode id -> receipt id,
        any contract), their open registrations on ``contract_digest``, the contract's
        highest committed policy update, and (identity key, record id) of every record
        credited for the contract to a registration's identity or to no identity (key None),
        as :meth:`credited` gives them for those keys."""
        found: dict[str, str] = {}
        registered: dict[str, Registration] = {}
        highest: int | None = None
        credited: list[tuple[str | None, str]] = []
        params = self._bind(
            {"contract": contract_digest, "ids": self._list(episode_ids)}, ("contract", "ids")
        )
        for kind, episode_id, key, identity, baseline, begun_at, parameters in conn.fetch(
            self._lookup, params
        ):
            if kind == _OPEN:
                registered[episode_id] = self._registration(
                    identity, baseline, begun_at, parameters
                )
            elif kind == _RECEIPT:
                found[episode_id] = key
            elif kind == _CREDITED:
                credited.append((episode_id, key))
            elif key is not None:
                highest = int(key)
        return found, registered, highest, credited

    def _registration(
        self, identity: Any, baseline: Any, begun_at: Any, parameters: Any
    ) -> Registration:
        if self._sqlite:  # JSON as text, timestamps as naive-UTC text (see the module docstring)
            identity = json.loads(identity)
            baseline = None if baseline is None else json.loads(baseline)
            begun_at = datetime.fromisoformat(begun_at)
            parameters = None if parameters is None else json.loads(parameters)
        listed = None if baseline is None else list(baseline)
        return identity, listed, as_utc(begun_at), None if parameters is None else dict(parameters)

    def credited(
        self, conn: DriverConnection, contract_digest: str, identity_keys: Collection[str]
    ) -> list[tuple[str | None, str]]:
        """(identity key, record id) of every record credited for the contract to one of
        ``identity_keys`` or to no identity (key None)."""
        params = self._bind(
            {"contract": contract_digest, "keys": self._list(identity_keys)}, ("contract", "keys")
        )
        return [(key, record) for key, record in conn.fetch(self._credited, params)]

    # ------------------------------------------------------------------ the commit

    def lock_ledgers(
        self, conn: DriverConnection, contracts: Sequence[str]
    ) -> dict[str, int | None]:
        """Lock (PostgreSQL: ``FOR UPDATE``, sorted; creating missing rows) the ledger rows of
        ``contracts``; their highest committed updates."""
        params = self._bind({"contracts": self._list(contracts)}, ("contracts",))
        values = {
            c: None if v is None else int(v) for c, v in conn.fetch(self._lock_ledgers, params)
        }
        missing = [c for c in contracts if c not in values]
        if missing:
            conn.run(
                self._insert_ledger,
                [self._bind({"contract": c}, ("contract",)) for c in missing],
                many=True,
            )
            values = {
                c: None if v is None else int(v) for c, v in conn.fetch(self._lock_ledgers, params)
            }
        return {contract: values[contract] for contract in contracts}

    def lock_and_check(
        self,
        conn: DriverConnection,
        contracts: Sequence[str],
        episode_ids: Sequence[str],
        record_ids: Sequence[str],
    ) -> tuple[dict[str, int | None], dict[str, str], set[tuple[str, str]]]:
        """:meth:`lock_ledgers`, then :meth:`existing_and_taken`: what a commit checks, read
        under the contracts' locks. On SQLite, whose writers are serialized by ``BEGIN
        IMMEDIATE``, one statement reads all three (the ledger rows are created, and read
        again, only for contracts that have none yet)."""
        if not self._sqlite:
            highest = self.lock_ledgers(conn, contracts)
            return highest, *self.existing_and_taken(conn, episode_ids, contracts, record_ids)
        params = (self._list(episode_ids), self._list(contracts), self._list(record_ids))
        values: dict[str, int | None] = {}
        existing: dict[str, str] = {}
        taken: set[tuple[str, str]] = set()
        for kind, first, second in conn.fetch(self._ledgers_existing_and_taken, params):
            if kind == _HIGHEST:
                values[first] = None if second is None else int(second)
            elif kind == _RECEIPT:
                existing[first] = second
            else:
                taken.add((first, second))
        missing = [c for c in contracts if c not in values]
        if missing:
            values.update(self.lock_ledgers(conn, missing))
        return {contract: values[contract] for contract in contracts}, existing, taken

    def existing_and_taken(
        self,
        conn: DriverConnection,
        episode_ids: Sequence[str],
        contracts: Sequence[str],
        record_ids: Sequence[str],
    ) -> tuple[dict[str, str], set[tuple[str, str]]]:
        """In one statement: the episodes' receipts (episode id -> receipt id) and the
        (contract, record) pairs among ``contracts`` x ``record_ids`` already credited."""
        params = self._bind(
            {
                "ids": self._list(episode_ids),
                "contracts": self._list(contracts),
                "records": self._list(record_ids),
            },
            ("ids", "contracts", "records"),
        )
        existing: dict[str, str] = {}
        taken: set[tuple[str, str]] = set()
        for kind, first, second in conn.fetch(self._existing_and_taken, params):
            if kind == _RECEIPT:
                existing[first] = second
            else:
                taken.add((first, second))
        return existing, taken

    @property
    def copies(self) -> bool:
        """Whether a batch's rows can go in by COPY (PostgreSQL): :meth:`register`'s always,
        :meth:`insert_receipts`'s when asked."""
        return not self._sqlite

    def insert_receipts(
        self,
        conn: DriverConnection,
        rows: Sequence[Mapping[str, Any]],
        *,
        outbox: bool,
        copy: bool = False,
    ) -> int:
        """Insert receipt rows (``ON CONFLICT DO NOTHING``) and, with ``outbox``, their outbox
        rows (due at once, in batch order); how many receipts were inserted.

        ``copy`` (PostgreSQL, :attr:`copies`): in one COPY stream instead, which has no ``ON
        CONFLICT``: all are inserted, or a taken receipt id or episode fails the statement
        (and the transaction) with an integrity error. For a batch whose episodes were checked
        under the ledger lock, where such a conflict is a rare race."""
        # A batch's rows share one commit time: format each distinct time once.
        times = {t: self._time(t) for t in {row["created_at"] for row in rows}}
        if copy:
            conn.copy_in(
                self._copy_receipts,
                _RECEIPT_TYPES,
                (
                    (*(row[name] for name in _RECEIPT_COLUMNS[:-1]), times[row["created_at"]])
                    for row in rows
                ),
            )
            inserted = len(rows)
        else:
            bound = [
                self._bind({**row, "created_at": times[row["created_at"]]}, _RECEIPT_COLUMNS)
                for row in rows
            ]
            inserted = conn.run(self._insert_receipt, bound, many=True)
        if outbox and inserted == len(rows):
            conn.run(
                self._insert_outbox,
                [
                    self._bind(
                        {
                            "receipt_id": row["receipt_id"],
                            "envelope": row["envelope"],
                            "created_at": times[row["created_at"]],
                            "batch_index": index,
                        },
                        ("receipt_id", "envelope", "created_at", "batch_index"),
                    )
                    for index, row in enumerate(rows)
                ],
                many=True,
            )
        return inserted

    def insert_credits(self, conn: DriverConnection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert credit rows (``ON CONFLICT DO NOTHING``); how many were inserted."""
        order = ("contract_digest", "record_id", "receipt_id", "identity_key")
        return conn.run(self._insert_credit, [self._bind(row, order) for row in rows], many=True)

    def close_and_raise(
        self, conn: DriverConnection, episode_ids: Sequence[str], raised: Mapping[str, int]
    ) -> None:
        """Delete the episodes' open registrations; raise the ledgers of ``raised`` (contract ->
        new highest update; a ledger already at or above it is left as it is)."""
        if episode_ids:
            self.close_open(conn, episode_ids)
        if raised:
            conn.run(
                self._raise_ledger,
                [
                    self._bind({"highest": value, "contract": contract}, ("highest", "contract"))
                    for contract, value in raised.items()
                ],
                many=True,
            )

    # ------------------------------------------------------------------ begins

    def begin_reads(
        self,
        conn: DriverConnection,
        episode_ids: Collection[str],
        contracts: Collection[str],
        identity_keys: Collection[str],
    ) -> tuple[list[BeginRead], dict[str, str]]:
        """The open registrations a batch of begins can meet, as (contract, identity key,
        episode id, begun_at aware, whether a baseline is recorded, task parameters or None):
        those of ``episode_ids``
        and of the ``contracts`` x ``identity_keys`` slots (PostgreSQL: locked ``FOR
        UPDATE``); and the receipts of ``episode_ids`` (episode id -> receipt id), read after
        the lock."""
        named = {
            "ids": self._list(episode_ids),
            "contracts": self._list(contracts),
            "keys": self._list(identity_keys),
        }
        registrations: list[BeginRead] = []
        receipts: dict[str, str] = {}
        for statement, order in self._begin_reads:
            for kind, contract, key, episode_id, last, recorded, parameters in conn.fetch(
                statement, self._bind(named, order)
            ):
                if kind == _OPEN:
                    begun = datetime.fromisoformat(last) if self._sqlite else last
                    if self._sqlite and parameters is not None:
                        parameters = json.loads(parameters)
                    registrations.append(
                        (contract, key, episode_id, as_utc(begun), bool(recorded), parameters)
                    )
                else:
                    receipts[episode_id] = last
        return registrations, receipts

    def register(self, conn: DriverConnection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert open registrations (``ON CONFLICT DO NOTHING``): each row's contract_digest,
        identity_key, episode_id, identity (a mapping), baseline (records or None), begun_at
        and task_parameters (a mapping or None); how many were inserted.

        PostgreSQL (:attr:`copies`): in one COPY stream, which has no ``ON CONFLICT``: a taken
        slot or episode id fails the statement (and the transaction) with a unique violation
        instead of inserting fewer rows; both mean a concurrent begin won the race."""
        if self.copies:
            conn.copy_in(
                self._copy_open,
                _OPEN_TYPES,
                (
                    (
                        row["contract_digest"],
                        row["identity_key"],
                        row["episode_id"],
                        json.dumps(row["identity"]),
                        None if row["baseline"] is None else json.dumps(row["baseline"]),
                        as_utc(row["begun_at"]),
                        _json_or_none(row["task_parameters"]),
                    )
                    for row in rows
                ),
            )
            return len(rows)
        bound = [
            self._bind(
                {
                    **row,
                    "identity": json.dumps(row["identity"]),
                    "baseline": None if row["baseline"] is None else json.dumps(row["baseline"]),
                    "begun_at": self._time(row["begun_at"]),
                    "task_parameters": _json_or_none(row["task_parameters"]),
                },
                _OPEN_COLUMNS,
            )
            for row in rows
        ]
        return conn.run(self._insert_open, bound, many=True)

    def close_open(self, conn: DriverConnection, episode_ids: Collection[str]) -> None:
        """Delete the open registrations of ``episode_ids``."""
        conn.run(self._close_open, self._bind({"ids": self._list(episode_ids)}, ("ids",)))

    def owners(self, conn: DriverConnection, receipt_ids: Sequence[str]) -> dict[str, str]:
        """receipt id -> episode id, for those of ``receipt_ids`` that are stored."""
        rows = conn.fetch(self._owners, self._bind({"ids": self._list(receipt_ids)}, ("ids",)))
        return {receipt_id: episode_id for receipt_id, episode_id in rows}
