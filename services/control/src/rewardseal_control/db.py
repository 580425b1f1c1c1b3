"""The control plane's database: engine and Alembic migrations, configured in code.

No ``alembic.ini`` is needed at run time: :func:`alembic_config` points Alembic at the
``migrations`` directory shipped inside this package. :func:`upgrade` and :func:`downgrade` run
the migrations in ONE transaction on one connection (SQLite and PostgreSQL both have
transactional DDL), under a lock that serializes control replicas migrating the same database
at once, so a failed migration leaves the schema as it was.

URLs: ``sqlite:///path/to/control.db`` (the default backend) or ``postgresql+psycopg://...``
(``postgresql://`` selects psycopg too); see :func:`rewardseal_server.sqlstore.normalize_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from rewardseal_server.sqlstore import StoreEngine, translated

__all__ = [
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

_MIGRATION_LOCK_KEY: Final = 0x7273_6374_6C6D  # pg_advisory_xact_lock key: one migrator at a time


def make_store_engine(url: str) -> StoreEngine:
    """A :class:`~rewardseal_server.sqlstore.StoreEngine` for the control store at ``url``."""
    return StoreEngine(url, what=STORE_NAME)


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for the control store at ``url`` (SQLite pragmas applied)."""
    return make_store_engine(url).engine


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic configuration built in code, for ``connection`` or ``url``.

    ``script_location`` is this package's ``migrations`` directory. ``env.py`` uses the
    connection when one is given (``config.attributes["connection"]``), else the URL.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    if url is not None:
        config.attributes["url"] = url
    return config


def head_revision() -> str:
    """The newest revision of the shipped migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package ships revisions
        raise RuntimeError("the control plane ships no migrations")
    return head


def _migrate(url: str, step: str, revision: str) -> None:
    store = make_store_engine(url)
    try:
        with translated(STORE_NAME), store.engine.begin() as conn:
            store.advisory_lock(conn, _MIGRATION_LOCK_KEY)
            config = alembic_config(conn)
            if step == "upgrade":
                command.upgrade(config, revision)
            else:
                command.downgrade(config, revision)
    finally:
        store.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the control store at ``url`` up to ``revision`` (default: the newest)."""
    _migrate(url, "upgrade", revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the control store at ``url`` down to ``revision`` (default: no tables at all)."""
    _migrate(url, "downgrade", revision)


def current_revision(url: str) -> str | None:
    """The revision the control store at ``url`` is at; None before any migration."""
    store = make_store_engine(url)
    try:
        with translated(STORE_NAME), store.snapshot_reader.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        store.dispose()
