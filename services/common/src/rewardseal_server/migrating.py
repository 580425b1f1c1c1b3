"""A service store's Alembic migrations, configured in code (the control plane's, the worker's).

No ``alembic.ini`` is needed at run time: a :class:`Migrations` points Alembic at the
``migrations`` directory its service ships inside its package, and that directory's ``env.py``
is two lines that call :meth:`Migrations.run_environment`. :meth:`Migrations.upgrade` and
:meth:`Migrations.downgrade` run the migrations in ONE transaction on one connection (SQLite and
PostgreSQL both have transactional DDL), under a lock that serializes processes and replicas
migrating the same database at once, so a failed migration leaves the schema as it was.

A store made before its service had migrations (no version table, its tables present) is
adopted by :meth:`Migrations.upgrade` when the service says which revision its schema is
(``recognise``): that revision is stamped, then the upgrade runs from there.

:meth:`Migrations.check` is the start-up rule of a service that does not migrate on start: the
schema must be at the newest revision, else :class:`~rewardseal.core.errors.Unavailable` with one
line naming the service's migrate command; ``create_fresh`` creates a database that holds none
of the store's tables at the newest revision instead (first start, processes racing included).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import MetaData, inspect
from sqlalchemy.engine import Connection

from rewardseal.core.errors import Unavailable, ValidationError
from rewardseal_server.sqlstore import StoreEngine, normalize_url, translated

__all__ = ["Migrations", "Recognise"]

Recognise = Callable[[Connection], str]
"""The revision an unversioned store's schema is at (its tables present, no version table);
raises :class:`~rewardseal.core.errors.Unavailable` when the schema is no revision's."""


@dataclass(frozen=True)
class Migrations:
    """One store's migrations: where they are, what they migrate, how an operator runs them."""

    directory: Path
    """The Alembic script directory (``env.py``, ``versions/``), shipped as package data."""
    metadata: MetaData
    """The store's tables at the newest revision (autogenerate compares against them)."""
    what: str
    """How errors name the store (``"worker store"``)."""
    migrate_command: str
    """The command that migrates it (``"rewardseal-worker migrate"``), named by refusals."""
    lock_key: int
    """``pg_advisory_xact_lock`` key: one migrator of this store at a time."""
    recognise: Recognise | None = None
    """How to adopt a store made before migrations existed; None: such a store is refused."""

    # ------------------------------------------------------------------ Alembic

    def config(self, connection: Connection | None = None, url: str | None = None) -> Config:
        """An Alembic configuration built in code, for ``connection`` or ``url``.

        ``script_location`` is :attr:`directory`. ``env.py`` uses the connection when one is
        given (``config.attributes["connection"]``), else the URL.
        """
        config = Config()
        config.set_main_option("script_location", str(self.directory))
        if connection is not None:
            config.attributes["connection"] = connection
        if url is not None:
            config.attributes["url"] = url
        return config

    def head(self) -> str:
        """The newest revision of the shipped migrations."""
        head = ScriptDirectory.from_config(self.config()).get_current_head()
        if head is None:  # pragma: no cover - every service ships revisions
            raise RuntimeError(f"the {self.what} ships no migrations")
        return head

    def run_environment(self) -> None:
        """The body of ``env.py``: migrate through the given connection (or a new engine for
        the given URL), or render the migrations as SQL for the URL (``--sql``).

        SQLite runs in batch mode (``render_as_batch``), because SQLite cannot alter most of a
        table in place; column types are compared (``compare_type``) when autogenerating.
        """
        from alembic import context

        config = context.config
        if context.is_offline_mode():
            url = normalize_url(self._url(config), what=self.what)
            context.configure(
                url=url,
                target_metadata=self.metadata,
                literal_binds=True,
                dialect_opts={"paramstyle": "named"},
                render_as_batch=url.drivername.startswith("sqlite"),
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
            return

        def run(connection: Connection) -> None:
            context.configure(
                connection=connection,
                target_metadata=self.metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()

        connection = config.attributes.get("connection")
        if connection is not None:
            run(connection)
            return
        store = StoreEngine(self._url(config), what=self.what)
        try:
            with store.engine.begin() as conn:
                run(conn)
        finally:
            store.dispose()

    @staticmethod
    def _url(config: Config) -> str:
        url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError("no database: pass a connection or a URL in config.attributes")
        return str(url)

    # ------------------------------------------------------------------ migrating

    def upgrade(self, url: str, revision: str = "head") -> None:
        """Migrate the store at ``url`` up to ``revision`` (default: the newest), adopting a
        store made before migrations (see :attr:`recognise`).

        Raises:
            ValidationError: ``revision`` is none this build ships.
            Unavailable: the database cannot be reached, or its schema is at a revision this
                build does not ship (a newer build migrated it), or is no revision's.
        """
        self._migrate(url, "upgrade", revision)

    def downgrade(self, url: str, revision: str = "base") -> None:
        """Migrate the store at ``url`` down to ``revision`` (default: no tables at all)."""
        self._migrate(url, "downgrade", revision)

    def _migrate(self, url: str, step: Literal["upgrade", "downgrade"], revision: str) -> None:
        store = StoreEngine(url, what=self.what)
        try:
            with translated(self.what), store.engine.begin() as conn:
                store.advisory_lock(conn, self.lock_key)
                config = self.config(conn)
                current = MigrationContext.configure(conn).get_current_revision()
                if current is None and self.recognise is not None and self._holds_tables(conn):
                    command.stamp(config, self.recognise(conn))
                elif current is not None and not self._ships(current):
                    raise Unavailable(self._refusal(current, self.head()))
                try:
                    if step == "upgrade":
                        command.upgrade(config, revision)
                    else:
                        command.downgrade(config, revision)
                except CommandError as exc:  # a revision it does not ship, or no such step
                    raise ValidationError(f"cannot migrate the {self.what}: {exc}") from exc
        finally:
            store.dispose()

    def current(self, url: str) -> str | None:
        """The revision the store at ``url`` is at; None before any migration."""
        store = StoreEngine(url, what=self.what)
        try:
            with translated(self.what), store.snapshot_reader.connect() as conn:
                return MigrationContext.configure(conn).get_current_revision()
        finally:
            store.dispose()

    # ------------------------------------------------------------------ the start-up rule

    def check(self, db: StoreEngine, *, create_fresh: bool = False) -> None:
        """Refuse a schema that is not at the newest revision (older, newer, or made before
        migrations), in one line naming :attr:`migrate_command`.

        ``create_fresh``: a database holding none of the store's tables is migrated to the
        newest revision instead, in the same locked transaction as the check (so processes
        starting together on one fresh database create it once).

        Raises:
            Unavailable: the schema is not current, or the database cannot be reached.
        """
        head = self.head()
        with _quiet_alembic():
            current = self._checked(db, head, create_fresh=create_fresh)
        if current != head:
            raise Unavailable(self._refusal(current, head))

    def _checked(self, db: StoreEngine, head: str, *, create_fresh: bool) -> str | None:
        """The store's revision; with ``create_fresh``, ``head`` once a fresh one is made."""

        def current_of(conn: Connection) -> str | None:
            return MigrationContext.configure(conn).get_current_revision()

        if not create_fresh:
            return db.read(current_of, snapshot=True)

        def check_or_create(conn: Connection) -> str | None:
            db.advisory_lock(conn, self.lock_key)
            current = current_of(conn)
            if current is None and not self._holds_tables(conn):
                command.upgrade(self.config(conn), "head")
                return head
            return current

        return db.write(check_or_create)

    def _holds_tables(self, conn: Connection) -> bool:
        """Whether any of the store's tables exists (a store downgraded to base keeps only an
        empty version table: it holds none)."""
        return not set(inspect(conn).get_table_names()).isdisjoint(self.metadata.tables)

    def _ships(self, revision: str) -> bool:
        try:
            return ScriptDirectory.from_config(self.config()).get_revision(revision) is not None
        except (CommandError, RevisionError):
            return False

    def _refusal(self, current: str | None, head: str) -> str:
        """The one line a store not at ``head`` is refused with."""
        if current is None:
            return (
                f"{self.what} schema has no revision, this build needs {head!r}: run the "
                f"migrations ({self.migrate_command})"
            )
        if not self._ships(current):
            return (
                f"{self.what} schema is at revision {current!r}, newer than this build's "
                f"{head!r}: run the build that migrated it ({self.migrate_command} of this "
                "build cannot take it back)"
            )
        return (
            f"{self.what} schema is at revision {current!r}, this build needs {head!r}: "
            f"run the migrations ({self.migrate_command})"
        )


@contextmanager
def _quiet_alembic() -> Iterator[None]:
    """Alembic's INFO lines (its context, each revision it runs) while a service starts: they
    would add lines to a start whose failure is one line, and say nothing an operator acts on."""
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
