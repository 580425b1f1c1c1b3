"""Seed and stage a MockMed SQLite file and screen dump directly, without the service running.

The worker's ``serve --seed-mockmed`` (``rewardseal_worker.seed``), tests, demos and benchmarks
write MockMed's system of record here: :func:`create_database` makes the ``encounters`` table of
:mod:`rewardseal_mockmed.schema` with synthetic background rows, :func:`create_screen` the empty
screen dump of :mod:`rewardseal_mockmed.screen`. The staging helpers play one episode's effect:
:func:`write_encounter` is an honest write (or a duplicate), :func:`show_on_screen` alone is the
banner lie (the screen shows a saved Triage encounter, the database has none).

Why not :class:`~rewardseal_mockmed.store.EncounterStore`: staging writes what a policy or a
benchmark needs (a chosen id, ``created_at`` left NULL, 50,000 rows in one ``executemany``),
which the service's write API refuses by design, and seeding must keep an existing file's
journal mode. So this module speaks ``sqlite3`` to the file, with the DDL compiled from
MockMed's own table: one schema, whoever creates the file.

Everything is synthetic: the background rows belong to invented patients.
"""

from __future__ import annotations

import contextlib
import math
import random
import sqlite3
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.schema import COLUMNS, ENCOUNTERS_TABLE, encounters
from rewardseal_mockmed.screen import SAVED_BANNER, ScreenDump
from rewardseal_mockmed.store import EPOCH, PRIORITIES, STATUSES, TYPES
from rewardseal_mockmed.synthetic import synthetic_note
from rewardseal_server.service_settings import make_private_dir
from rewardseal_server.sqlstore import create_private_file

__all__ = [
    "DEFAULT_BACKGROUND_ROWS",
    "DEFAULT_NOTE",
    "MAX_BACKGROUND_ROWS",
    "add_background_rows",
    "count_encounters",
    "create_database",
    "create_screen",
    "show_on_screen",
    "write_encounter",
]

DEFAULT_BACKGROUND_ROWS: Final = 200
"""Background rows a freshly seeded database holds."""
MAX_BACKGROUND_ROWS: Final = 10_000_000
DEFAULT_NOTE: Final = "Synthetic triage: mild headache since morning; vitals stable."
"""The note of a staged Triage encounter (database row or screen row)."""

_BUSY_TIMEOUT_SECONDS = 30.0
_SQLITE = sqlite_dialect.dialect()
# IF NOT EXISTS: a re-seed adds a missing index to a table it keeps.
_SCHEMA: Final = (
    str(CreateTable(encounters, if_not_exists=True).compile(dialect=_SQLITE)),
    *(
        str(CreateIndex(index, if_not_exists=True).compile(dialect=_SQLITE))
        for index in sorted(encounters.indexes, key=lambda index: str(index.name))
    ),
)
_INSERT: Final = (
    f"INSERT INTO {ENCOUNTERS_TABLE} ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)


# --------------------------------------------------------------------------------------------
# The database
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _connect(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection in autocommit mode (transactions are explicit), closed on exit."""
    conn = sqlite3.connect(db_path, timeout=_BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _table_exists(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (ENCOUNTERS_TABLE,)
    ).fetchone()
    return row is not None


def _ensure_schema(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


def _background_rows(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """``count`` synthetic encounters (in :data:`COLUMNS` order) over ``count / 4`` patients.

    Not :func:`rewardseal_mockmed.store.background_rows`: these rows grow a file in steps (the
    generator is seeded with the rows already there) and are what seeded data directories
    already hold, so their shape stays as it is.
    """
    # 10 hex digits: never the 8-digit ids of rewardseal_kit.extradup.variants or the calibration.
    patients = [f"patient-{rng.getrandbits(40):010x}" for _ in range(max(1, math.ceil(count / 4)))]
    rows: list[tuple[Any, ...]] = []
    for _ in range(count):
        created = EPOCH + timedelta(seconds=rng.randrange(0, 300 * 24 * 3600))
        rows.append(
            (
                f"enc-{rng.getrandbits(96):024x}",
                rng.choice(patients),
                rng.choice(TYPES),
                synthetic_note(rng),
                rng.choice(STATUSES),
                rng.choice(PRIORITIES),
                created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        )
    return rows


def _insert_background(conn: sqlite3.Connection, count: int, seed: int) -> int:
    existing = conn.execute(f"SELECT COUNT(*) FROM {ENCOUNTERS_TABLE}").fetchone()[0]
    # The row count joins the seed so that repeated calls with one seed add new rows.
    rng = random.Random(f"mockmed.background/{seed}/{existing}")
    conn.executemany(_INSERT, _background_rows(rng, count))
    return count


def _check_count(count: int) -> int:
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or not 0 <= count <= MAX_BACKGROUND_ROWS
    ):
        raise ValidationError(f"row count must be an integer in 0..{MAX_BACKGROUND_ROWS}")
    return count


def create_database(db_path: Path, *, background_rows: int, seed: int) -> bool:
    """Create the MockMed database with ``background_rows`` synthetic rows, unless it exists.

    The table, its ``patient_id`` index and the rows are written in one transaction. An
    existing table is kept with every row it holds (receipts may point at them); only a missing
    index is added. The directory is made 0700 and the file 0600. Returns True when the table
    was created.
    """
    _check_count(background_rows)
    make_private_dir(db_path.parent)
    # 0600 before SQLite opens it: its -wal and -shm files take the database file's mode.
    create_private_file(db_path)
    with _connect(db_path) as conn, _transaction(conn):
        if _table_exists(conn):
            _ensure_schema(conn)
            return False
        _ensure_schema(conn)
        _insert_background(conn, background_rows, seed)
        return True


def add_background_rows(db_path: Path, count: int, seed: int) -> int:
    """Add ``count`` synthetic rows for invented patients in one transaction; return ``count``.

    Rows are a pure function of ``seed`` and the current row count, so a benchmark can grow the
    table to 50,000 rows reproducibly (one ``executemany``, well under a second).
    """
    _check_count(count)
    with _connect(db_path) as conn, _transaction(conn):
        _ensure_schema(conn)
        return _insert_background(conn, count, seed)


def write_encounter(
    db_path: Path,
    *,
    patient_id: str,
    type: str | None = "Triage",
    note: str | None = DEFAULT_NOTE,
    status: str | None = "open",
    priority: str | None = None,
    created_at: str | None = None,
    encounter_id: str | None = None,
) -> str:
    """Write one encounter, as the policy's write would, and return its id.

    ``created_at`` stays NULL unless given (the MockMed contract allows it as a field the
    system stamps). Pass ``priority="stat"`` to stage the forbidden effect.

    Raises:
        ValidationError: ``patient_id`` is empty, or the database or its table is missing.
    """
    if not isinstance(patient_id, str) or not patient_id:
        raise ValidationError("patient_id must be a non-empty string")
    if not Path(db_path).is_file():
        raise ValidationError(f"{db_path} does not exist; seed MockMed first")
    record_id = encounter_id or f"enc-{uuid.uuid4().hex}"
    with _connect(db_path) as conn, _transaction(conn):
        if not _table_exists(conn):
            raise ValidationError(f"{db_path} holds no {ENCOUNTERS_TABLE} table; seed it first")
        conn.execute(_INSERT, (record_id, patient_id, type, note, status, priority, created_at))
    return record_id


def count_encounters(db_path: Path, *, patient_id: str | None = None) -> int:
    """How many encounters the database holds (for one patient when ``patient_id`` is given)."""
    with _connect(db_path) as conn:
        if patient_id is None:
            row = conn.execute(f"SELECT COUNT(*) FROM {ENCOUNTERS_TABLE}").fetchone()
        else:
            row = conn.execute(
                f"SELECT COUNT(*) FROM {ENCOUNTERS_TABLE} WHERE patient_id = ?", (patient_id,)
            ).fetchone()
    return int(row[0])


# --------------------------------------------------------------------------------------------
# The screen dump
# --------------------------------------------------------------------------------------------


def create_screen(screen_path: Path) -> bool:
    """Create the empty screen dump at ``screen_path`` unless a file is there; True if created.

    An existing dump is not opened at all: seeding never rewrites what it finds.
    """
    if screen_path.exists():
        return False
    # ScreenDump creates a missing file under its lock; one that appeared meanwhile is kept.
    ScreenDump(screen_path)
    return True


def show_on_screen(
    screen_path: Path,
    *,
    patient_id: str,
    banner: str = SAVED_BANNER,
    fields: Mapping[str, str | None] | None = None,
) -> str:
    """Append what the UI displays for ``patient_id`` to the screen dump; return the row id.

    ``fields`` default to a Triage encounter (type, note, status); ``banner`` is shown for the
    patient (informational only: no oracle reads it as a record). Nothing is written to the
    database, so calling this alone stages the banner lie.

    Raises:
        ValidationError: ``patient_id`` is empty, ``fields`` set ``id`` or ``patient_id``, or
            the file is not a screen dump.
    """
    if not isinstance(patient_id, str) or not patient_id:
        raise ValidationError("patient_id must be a non-empty string")
    shown = (
        dict(fields)
        if fields is not None
        else {"type": "Triage", "note": DEFAULT_NOTE, "status": "open"}
    )
    if "id" in shown or "patient_id" in shown:
        raise ValidationError("fields may not set 'id' or 'patient_id'")
    row_id = ScreenDump.claimed_row_id()
    ScreenDump(screen_path).show({"id": row_id, "patient_id": patient_id, **shown}, banner)
    return row_id
