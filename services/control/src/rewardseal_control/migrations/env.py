"""Alembic environment of the control plane (docs/spec.md R-C-6).

Run through :mod:`rewardseal_control.db` (``upgrade``, ``downgrade``), which builds the Alembic
configuration in code and hands over an open connection in ``config.attributes["connection"]``
(so that the whole migration is one transaction, under the caller's lock). A URL may be given
instead, in ``config.attributes["url"]`` or as the ``sqlalchemy.url`` option (the ``alembic``
command line); offline (``--sql``) runs render SQL for that URL.

SQLite runs in batch mode (``render_as_batch``), because SQLite cannot alter most of a table in
place; column types are compared (``compare_type``) when autogenerating.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from rewardseal_control.models import Base
from rewardseal_server.sqlstore import StoreEngine, normalize_url

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: pass a connection or a URL in config.attributes")
    return str(url)


def run_migrations_offline() -> None:
    """Render the migrations as SQL for the configured URL, without a database."""
    url = normalize_url(_url(), what="control store")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.drivername.startswith("sqlite"),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the given connection, or through a new engine for the given URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    store = StoreEngine(_url(), what="control store")
    try:
        with store.engine.begin() as conn:
            _run(conn)
    finally:
        store.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
