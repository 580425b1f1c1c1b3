"""The worker store's Alembic migrations (R-W-17) and the adoption of a store made before them.

:data:`MIGRATIONS` (:class:`rewardseal_server.migrating.Migrations`, as the control plane's) runs
the revisions shipped in ``rewardseal_worker/migrations``: ``0001`` the store as
``metadata.create_all`` made it before the dead letter, ``0002`` the dead letter (R-C-12),
``0003`` the task parameters of open episodes (R-W-18; no store was made before migrations at
it).

Before migrations the worker made its tables with ``create_all`` on every start, so an existing
store has no version table. :func:`recognise` says which revision such a store's schema is (its
tables, their columns and indexes are exactly one revision's: :data:`PRE_MIGRATION_SHAPES`), and
``rewardseal-worker migrate`` (or an open with ``migrate=True``) stamps that revision and
upgrades from there; a schema that is neither is refused, nothing touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from rewardseal.core.errors import Unavailable
from rewardseal_server.migrating import Migrations
from rewardseal_worker.store.core import STORE_NAME
from rewardseal_worker.store.schema import metadata

__all__ = [
    "MIGRATE_COMMAND",
    "MIGRATIONS",
    "MIGRATIONS_DIR",
    "PRE_MIGRATION_SHAPES",
    "Shape",
    "recognise",
]

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent.parent / "migrations"
"""The Alembic script directory (env.py, versions/), shipped as package data."""

MIGRATE_COMMAND: Final = "rewardseal-worker migrate"
"""What a refusal tells the operator to run."""

Shape = dict[str, tuple[frozenset[str], frozenset[str]]]
"""A schema by table: (column names, index names; those backing a unique constraint left out)."""


def _table(columns: str, indexes: str = "") -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(columns.split()), frozenset(indexes.split())


_BEFORE_DEAD_LETTER: Final[Shape] = {
    "open_episodes": _table("contract_digest identity_key episode_id identity baseline begun_at"),
    "receipts": _table(
        "receipt_id episode_id contract_digest policy_update envelope evidence created_at"
    ),
    "credited_records": _table(
        "contract_digest record_id receipt_id identity_key", "ix_credited_records_identity"
    ),
    "policy_ledger": _table("contract_digest highest_update"),
    "outbox": _table(
        "receipt_id envelope created_at batch_index attempts next_attempt_at last_error",
        "ix_outbox_due ix_outbox_age",
    ),
    "worker_state": _table("name int_value"),
}

PRE_MIGRATION_SHAPES: Final[dict[str, Shape]] = {
    "0002": {
        **_BEFORE_DEAD_LETTER,
        "dead_letter": _table(
            "receipt_id created_at batch_index attempts code reason message refused_at",
            "ix_dead_letter_refused",
        ),
    },
    "0001": _BEFORE_DEAD_LETTER,
}
"""The schemas ``create_all`` made before migrations, by the revision each one is. Frozen: they
are history (a test checks each against what its revision makes), whatever later revisions do."""


def shape_of(conn: Connection) -> Shape:
    """The schema of the worker-store tables in the database behind ``conn``."""
    inspector = inspect(conn)
    known = {name for shape in PRE_MIGRATION_SHAPES.values() for name in shape}
    return {
        table: (
            frozenset(column["name"] for column in inspector.get_columns(table)),
            frozenset(
                str(index["name"])
                for index in inspector.get_indexes(table)
                if not index.get("duplicates_constraint")
            ),
        )
        for table in inspector.get_table_names()
        if table in known
    }


def recognise(conn: Connection) -> str:
    """The revision a store made before migrations is at (see the module docstring).

    Raises:
        Unavailable: its tables are no revision's schema (a partial or foreign schema).
    """
    found = shape_of(conn)
    for revision, shape in PRE_MIGRATION_SHAPES.items():
        if found == shape:
            return revision
    raise Unavailable(
        f"{STORE_NAME} schema has no revision and its tables ({', '.join(sorted(found))}) are "
        f"not a schema a worker made: {MIGRATE_COMMAND} adopts only a store an earlier worker "
        "made; point --db-url at that store, or at an empty database"
    )


MIGRATIONS: Final = Migrations(
    directory=MIGRATIONS_DIR,
    metadata=metadata,
    what=STORE_NAME,
    migrate_command=MIGRATE_COMMAND,
    lock_key=0x7265_7761_7264,  # the key create_all ran under, so an old worker waits too
    recognise=recognise,
)
"""The worker store's migrations."""
