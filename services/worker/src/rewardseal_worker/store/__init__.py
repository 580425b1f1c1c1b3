"""The worker's durable store (R-W-3, R-W-7, R-W-8): open episodes, receipts, credits, ledger,
the outbox of receipts to forward to the control plane (R-C-5) and the dead letter of those
control refused for good (R-C-12).

SQLAlchemy 2 Core over SQLite (the default; WAL, ``synchronous=FULL``, ``busy_timeout``) or
PostgreSQL (``postgresql+psycopg://...``). Every write is one transaction and is durable when the
method returns.

The store is set-based: a scoring batch costs a constant number of statements, whatever its
size. Its hot path (the reads before judging, the receipt commit and the registration of
begins) is prebuilt driver SQL where a list of ids is one parameter (:mod:`.hot_sql`); elsewhere
lists are bound as ``IN``
parameters, in chunks of :data:`IN_CHUNK`. The batch
methods are :meth:`WorkerStore.lookup` (the read before judging: one statement, the
registrations' credited records included; :meth:`WorkerStore.credited_for` for identities
without a registration), :meth:`WorkerStore.commit_receipts` and
:meth:`WorkerStore.begin_episodes`; receipts are also read one at a time, by id or episode.

Concurrency model, which holds across threads, processes and replicas sharing one PostgreSQL:

* SQLite: every write transaction starts with ``BEGIN IMMEDIATE``, so writers are serialized by
  the database lock (waiting up to ``busy_timeout``) and a read-then-write never fails midway.
  Threads sharing one ``WorkerStore`` queue on an in-process lock first (the write gate of
  :class:`~rewardseal_server.sqlstore.StoreEngine`).
* PostgreSQL (READ COMMITTED): ``commit_receipts`` first locks (``SELECT ... ORDER BY ... FOR
  UPDATE``, creating missing rows) the policy-ledger row of every contract in the batch, in
  sorted order. Everything a receipt commit checks for a contract (existing receipts of its
  episodes, ledger, credited records) is read after that lock is held, so those reads are
  authoritative against every other writer of that contract. ``begin_episodes`` locks the open
  registrations it reads (``FOR UPDATE``).
* Both: rows are inserted with ``INSERT ... ON CONFLICT DO NOTHING`` and the number
  of rows inserted is checked against what was decided. A shortfall means a concurrent writer
  the locks do not cover won a row (the same episode id committed under another contract, or an
  open registration inserted between our read and our insert): the whole transaction is rolled
  back and run again, and its reads then see the winner. Nothing is ever stored partially.
  Deadlocks and serialization failures (SQLSTATE 40P01 / 40001) are retried the same way.

The store is made of parts, one module each, behind this facade: :mod:`.schema` (tables and
statements), :mod:`.migrating` (its Alembic migrations, R-W-17), :mod:`.hot_sql` (the hot
path's driver SQL), :mod:`.evidence_codec` (how evidence
is stored), :mod:`.episodes` (open registrations), :mod:`.receipts` (batch reads, the commit,
credits, the ledger), :mod:`.outbox` (receipts to forward to control, R-C-5),
:mod:`.dead_letter` (receipts control refused for good, R-C-12) and :mod:`.state` (named values
that only rise). Callers import from here.

The SQL plumbing (URLs, engine, transactions, error mapping) is :mod:`rewardseal_server.sqlstore`.
Only :mod:`rewardseal.core.errors` classes leave this package: a database that cannot be reached
becomes :class:`~rewardseal.core.errors.Unavailable`.
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from rewardseal_server.sqlstore import IN_CHUNK, StoreEngine
from rewardseal_worker.store.core import STORE_NAME
from rewardseal_worker.store.dead_letter import (
    DEAD_LETTER_MESSAGE_MAX,
    DeadLetter,
    DeadLetterStore,
    Refused,
)
from rewardseal_worker.store.episodes import (
    BeginDecision,
    BeginItem,
    EpisodeStore,
    KeptRegistration,
    OpenEpisode,
)
from rewardseal_worker.store.migrating import MIGRATIONS
from rewardseal_worker.store.outbox import OUTBOX_ERROR_MAX, OutboxItem, OutboxStore
from rewardseal_worker.store.receipts import (
    BatchLookup,
    CommitRefusal,
    CommitResult,
    Committed,
    CreditsTaken,
    Duplicate,
    Jumped,
    ReceiptStore,
    ReceiptToCommit,
    Regressed,
    StoredReceipt,
)
from rewardseal_worker.store.state import REVOCATION_VERSION, StateStore

__all__ = [
    "DEAD_LETTER_MESSAGE_MAX",
    "IN_CHUNK",
    "OUTBOX_ERROR_MAX",
    "REVOCATION_VERSION",
    "BatchLookup",
    "BeginDecision",
    "BeginItem",
    "CommitRefusal",
    "CommitResult",
    "Committed",
    "CreditsTaken",
    "DeadLetter",
    "Duplicate",
    "Jumped",
    "KeptRegistration",
    "OpenEpisode",
    "OutboxItem",
    "ReceiptToCommit",
    "Refused",
    "Regressed",
    "StoredReceipt",
    "WorkerStore",
]


class WorkerStore(EpisodeStore, ReceiptStore, OutboxStore, DeadLetterStore, StateStore):
    """Durable worker state on SQLite (default) or PostgreSQL, shared safely by many processes.

    Thread-safe: one instance may be used from many threads (a connection pool backs it). Its
    methods come from its parts: :class:`~.episodes.EpisodeStore`,
    :class:`~.receipts.ReceiptStore`, :class:`~.outbox.OutboxStore`,
    :class:`~.dead_letter.DeadLetterStore` and :class:`~.state.StateStore`.
    """

    def __init__(self, url: str, *, outbox: bool = False, migrate: bool = True) -> None:
        """Open the store at a SQLAlchemy URL.

        ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://user@host:port/db``
        (``postgresql://`` and ``postgres://`` select psycopg too). ``outbox``: every receipt
        :meth:`commit_receipts` stores also gets an outbox row, in the same transaction, for
        forwarding to the control plane (the outbox table exists either way).

        ``migrate``: bring the schema to the newest revision first (Alembic, one transaction,
        serialized against other processes; a store made before migrations is adopted, see
        :mod:`.migrating`). With ``migrate=False`` (how ``serve`` and the worker's commands
        open it, R-W-17) the schema must already be at the newest revision, else
        :class:`Unavailable` naming ``rewardseal-worker migrate``; a database holding none of
        the store's tables is created at the newest revision (a first start).

        Raises:
            ValidationError: the URL is not usable.
            Unavailable: the database cannot be reached, or its schema is not current (and
                ``migrate`` is off, or this build cannot migrate it).
        """
        if migrate:
            MIGRATIONS.upgrade(url)
        db = StoreEngine(url, what=STORE_NAME)
        super().__init__(db, outbox=outbox)
        try:
            if not migrate:
                MIGRATIONS.check(db, create_fresh=True)
        except BaseException:
            db.dispose()
            raise

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def outbox_enabled(self) -> bool:
        """True when :meth:`commit_receipts` writes outbox rows."""
        return self._outbox

    @property
    def engine(self) -> Engine:
        """The underlying engine (for diagnostics and tests)."""
        return self._db.engine

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self._db.ping()

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._db.dispose()
