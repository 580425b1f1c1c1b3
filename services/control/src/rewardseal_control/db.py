"""The control plane's database: engine and Alembic migrations, configured in code.

The migrations are :data:`MIGRATIONS` (:class:`rewardseal_server.migrating.Migrations`, shared
with the worker's store): no ``alembic.ini`` is needed at run time, the ``migrations`` directory
ships inside this package, and :func:`upgrade` and :func:`downgrade` run them in ONE transaction
under a lock that serializes control replicas migrating the same database at once, so a failed
migration leaves the schema as it was.

URLs: ``sqlite:///path/to/control.db`` (the default backend) or ``postgresql+psycopg://...``
(``postgresql://`` selects psycopg too); see :func:`rewardseal_server.sqlstore.normalize_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sqlalchemy.engine import Engine

from rewardseal_control.models import Base
from rewardseal_server.migrating import Migrations
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "MIGRATIONS",
    "MIGRATIONS_DIR",
    "STORE_NAME",
    "alembic_config",
    "current_revision",
    "downgrade",
    "head_revision",
    "make_engine",
    "make_store_engine",
    "upgrade",
]

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent / "migrations"
"""The Alembic script directory (env.py, versions/), shipped as package data."""

STORE_NAME: Final = "control store"
"""How errors name this database."""

MIGRATIONS: Final = Migrations(
    directory=MIGRATIONS_DIR,
    metadata=Base.metadata,
    what=STORE_NAME,
    migrate_command="rewardseal-control migrate",
    lock_key=0x7273_6374_6C6D,
)
"""The control store's migrations (the control plane always had them: nothing to adopt)."""

# The migration steps, by the names the CLI, the store and the tests call them.
alembic_config: Final = MIGRATIONS.config
head_revision: Final = MIGRATIONS.head
upgrade: Final = MIGRATIONS.upgrade
downgrade: Final = MIGRATIONS.downgrade
current_revision: Final = MIGRATIONS.current


def make_store_engine(url: str) -> StoreEngine:
    """A :class:`~rewardseal_server.sqlstore.StoreEngine` for the control store at ``url``."""
    return StoreEngine(url, what=STORE_NAME)


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for the control store at ``url`` (SQLite pragmas applied)."""
    return make_store_engine(url).engine
