"""The worker store's tables and the statements its parts run (R-W-3, R-W-7, R-W-8, R-C-5).

Tables: ``open_episodes`` (one registration per contract and identity), ``receipts``,
``credited_records`` (one credit per contract and record), ``policy_ledger`` (the highest policy
update committed per contract), ``outbox`` (receipts waiting for control), ``dead_letter``
(receipts control refused for good, R-C-12) and ``worker_state`` (named values that only rise).
They are the schema at the newest revision of the store's Alembic migrations
(``rewardseal_worker/migrations``, run by :mod:`.migrating`); a test checks that the two agree.

Statements are built here once and shared by the parts of
:class:`~rewardseal_worker.store.WorkerStore`; the backend-specific ``INSERT ... ON CONFLICT DO
NOTHING`` statements are built per store by :class:`Inserts`. The hot path (the reads before
judging, the receipt commit, the registration of begins) runs driver SQL instead: :mod:`.hot_sql`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Insert,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    delete,
    func,
    select,
    update,
)

from rewardseal_server.sqlstore import StoreEngine, UTCDateTime

metadata = MetaData()

open_episodes = Table(
    "open_episodes",
    metadata,
    Column("contract_digest", String, primary_key=True),
    Column("identity_key", String, primary_key=True),
    Column("episode_id", String, nullable=False, unique=True),
    Column("identity", JSON, nullable=False),
    Column("baseline", JSON(none_as_null=True), nullable=True),
    Column("begun_at", UTCDateTime, nullable=False),
    # The task parameters bound at begin, {name: value} (R-W-18); NULL when the contract
    # declares none.
    Column("task_parameters", JSON(none_as_null=True), nullable=True),
)

receipts = Table(
    "receipts",
    metadata,
    Column("receipt_id", String, primary_key=True),
    Column("episode_id", String, nullable=False, unique=True),
    Column("contract_digest", String, nullable=False),
    Column("policy_update", BigInteger, nullable=False),
    Column("envelope", LargeBinary, nullable=False),
    Column("evidence", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

credited_records = Table(
    "credited_records",
    metadata,
    Column("contract_digest", String, primary_key=True),
    Column("record_id", String, primary_key=True),
    Column("receipt_id", String, ForeignKey("receipts.receipt_id"), nullable=False),
    # The identity the crediting episode was judged for (None when the item carried none).
    Column("identity_key", String, nullable=True),
    Index("ix_credited_records_identity", "contract_digest", "identity_key"),
)

policy_ledger = Table(
    "policy_ledger",
    metadata,
    Column("contract_digest", String, primary_key=True),
    # NULL: the row exists (it serves as the contract's lock) but nothing was committed yet.
    Column("highest_update", BigInteger, nullable=True),
)

# Receipts waiting to be forwarded to the control plane (R-C-5); a row is deleted once control
# has recorded its receipt.
outbox = Table(
    "outbox",
    metadata,
    Column("receipt_id", String, ForeignKey("receipts.receipt_id"), primary_key=True),
    Column("envelope", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # The receipt's place among those its commit stored: orders rows of one commit (they share
    # created_at) as the batch did.
    Column("batch_index", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    # Why the last attempt failed: text the forwarder wrote, never record contents.
    Column("last_error", String, nullable=True),
    Index("ix_outbox_due", "next_attempt_at"),
    Index("ix_outbox_age", "created_at", "batch_index"),
)

# Receipts control refused permanently (R-C-12): moved here from the outbox, in one transaction,
# so forwarding stops resending them; the receipt itself stays in ``receipts``. A receipt is in
# the outbox or here, never both. ``created_at`` and ``batch_index`` are its outbox row's, so a
# retry puts it back in its place.
dead_letter = Table(
    "dead_letter",
    metadata,
    Column("receipt_id", String, ForeignKey("receipts.receipt_id"), primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("batch_index", Integer, nullable=False),
    # Failed forwarding attempts, the refusal included.
    Column("attempts", Integer, nullable=False),
    # The refusal: google.rpc code, ErrorInfo reason, and control's message (never record
    # contents: control's wire messages carry ids and rules, not records).
    Column("code", Integer, nullable=False),
    Column("reason", String, nullable=False),
    Column("message", String, nullable=False),
    Column("refused_at", UTCDateTime, nullable=False),
    Index("ix_dead_letter_refused", "refused_at"),
)

# Small facts the worker keeps across restarts, by name (e.g. the highest revocation-list version
# it accepted, so a restart cannot be fed an older list). Values only ever rise.
worker_state = Table(
    "worker_state",
    metadata,
    Column("name", String, primary_key=True),
    Column("int_value", BigInteger, nullable=False),
)

# ---------------------------------------------------------------------- statements
#
# Built once: SQLAlchemy caches a statement's compiled form, and reusing the same object skips
# building the expression and its cache key on every call. Lists are expanding bind parameters.

RECEIPT_BY_EPISODE = select(
    receipts.c.receipt_id,
    receipts.c.episode_id,
    receipts.c.contract_digest,
    receipts.c.envelope,
    receipts.c.evidence,
).where(receipts.c.episode_id == bindparam("episode_id"))

RECEIPT_BY_ID = select(
    receipts.c.receipt_id,
    receipts.c.episode_id,
    receipts.c.contract_digest,
    receipts.c.envelope,
    receipts.c.evidence,
).where(receipts.c.receipt_id == bindparam("receipt_id"))

OPEN_EPISODES = select(
    open_episodes.c.episode_id,
    open_episodes.c.identity_key,
    open_episodes.c.identity,
    open_episodes.c.baseline,
    open_episodes.c.begun_at,
    open_episodes.c.task_parameters,
).where(
    open_episodes.c.contract_digest == bindparam("contract_digest"),
    open_episodes.c.episode_id.in_(bindparam("episode_ids", expanding=True)),
)

HIGHEST = select(policy_ledger.c.highest_update).where(
    policy_ledger.c.contract_digest == bindparam("contract_digest")
)

OUTBOX_DUE = (
    select(outbox.c.receipt_id, outbox.c.envelope, outbox.c.attempts)
    .where(outbox.c.next_attempt_at <= bindparam("now", type_=UTCDateTime))
    .order_by(outbox.c.created_at, outbox.c.batch_index, outbox.c.receipt_id)
    .limit(bindparam("limit", type_=Integer))
)

OUTBOX_BACKLOG = select(
    func.count().label("depth"), func.min(outbox.c.created_at).label("oldest")
).select_from(outbox)

OUTBOX_DONE = delete(outbox).where(
    outbox.c.receipt_id.in_(bindparam("receipt_ids", expanding=True))
)

OUTBOX_LATER = (
    update(outbox)
    .where(outbox.c.receipt_id.in_(bindparam("receipt_ids", expanding=True)))
    .values(
        attempts=outbox.c.attempts + 1,
        next_attempt_at=bindparam("b_next", type_=UTCDateTime),
        last_error=bindparam("b_error", type_=String),
    )
)

DEAD_LETTER_TAKE = (
    delete(outbox)
    .where(outbox.c.receipt_id.in_(bindparam("receipt_ids", expanding=True)))
    .returning(outbox.c.receipt_id, outbox.c.created_at, outbox.c.batch_index, outbox.c.attempts)
)

DEAD_LETTER_LIST = (
    select(
        dead_letter.c.receipt_id,
        receipts.c.episode_id,
        receipts.c.contract_digest,
        dead_letter.c.code,
        dead_letter.c.reason,
        dead_letter.c.message,
        dead_letter.c.attempts,
        dead_letter.c.refused_at,
    )
    .join(receipts, receipts.c.receipt_id == dead_letter.c.receipt_id)
    .order_by(dead_letter.c.refused_at, dead_letter.c.receipt_id)
)

DEAD_LETTER_COUNTS = select(dead_letter.c.reason, func.count().label("n")).group_by(
    dead_letter.c.reason
)

DEAD_LETTER_RELEASE_ALL = delete(dead_letter).returning(
    dead_letter.c.receipt_id,
    dead_letter.c.created_at,
    dead_letter.c.batch_index,
    dead_letter.c.attempts,
    dead_letter.c.reason,
)

DEAD_LETTER_RELEASE = DEAD_LETTER_RELEASE_ALL.where(
    dead_letter.c.receipt_id.in_(bindparam("receipt_ids", expanding=True))
)

ENVELOPES = select(receipts.c.receipt_id, receipts.c.envelope).where(
    receipts.c.receipt_id.in_(bindparam("receipt_ids", expanding=True))
)

STATE_VALUE = select(worker_state.c.int_value).where(worker_state.c.name == bindparam("name"))
# Raise only: a lower value (an older run, a slower replica) never lowers what is stored.
STATE_RAISE = (
    update(worker_state)
    .where(worker_state.c.name == bindparam("b_name"))
    .where(worker_state.c.int_value < bindparam("b_value"))
    .values(int_value=bindparam("b_value"))
)


# ---------------------------------------------------------------------- per backend


@dataclass(frozen=True)
class Inserts:
    """The ``INSERT ... ON CONFLICT DO NOTHING`` statements of one store's backend (the hot
    path's, registrations included, are :mod:`.hot_sql`'s)."""

    state: Insert

    @classmethod
    def for_engine(cls, db: StoreEngine) -> Inserts:
        """Build the statements once for ``db``'s backend."""
        return cls(
            state=db.insert_ignore(worker_state),
        )
