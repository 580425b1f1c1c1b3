"""The MockMed table: the one schema of the service and of :mod:`rewardseal_mockmed.seeding`.

One table, ``encounters``, with an index on ``patient_id``. Every column is TEXT. The service
creates it through SQLAlchemy, seeding with the DDL compiled from it, and a test compares the
two. Its columns and their nullability also equal the hand-written DDL that seeded data
directories before seeding moved here, so those databases are read as they are.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column, Index, MetaData, Table, Text

__all__ = [
    "COLUMNS",
    "ENCOUNTERS_TABLE",
    "PATIENT_INDEX",
    "SERVER_FIELDS",
    "WRITABLE_FIELDS",
    "encounters",
    "metadata",
]

ENCOUNTERS_TABLE: Final = "encounters"
PATIENT_INDEX: Final = "encounters_patient_id"

metadata = MetaData()

encounters = Table(
    ENCOUNTERS_TABLE,
    metadata,
    # nullable=True keeps the DDL equal to the old ``id TEXT PRIMARY KEY`` on SQLite (where a
    # non-integer primary key column does not imply NOT NULL). The service always sets an id,
    # and PostgreSQL makes every primary key column NOT NULL anyway.
    Column("id", Text, primary_key=True, nullable=True),
    Column("patient_id", Text, nullable=False),
    Column("type", Text),
    Column("note", Text),
    Column("status", Text),
    Column("priority", Text, nullable=True),
    Column("created_at", Text),
)
Index(PATIENT_INDEX, encounters.c.patient_id)

COLUMNS: Final = tuple(column.name for column in encounters.columns)
"""Every column, in table order: id, patient_id, type, note, status, priority, created_at."""
SERVER_FIELDS: Final = ("id", "created_at")
"""Columns the service sets itself; a write that names one is refused."""
WRITABLE_FIELDS: Final = tuple(name for name in COLUMNS if name not in SERVER_FIELDS)
"""Columns a write may set: patient_id, type, note, status, priority."""
