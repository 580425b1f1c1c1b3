"""The helpdesk's storage over SQLite or PostgreSQL, and its synthetic seed.

Engine creation, transactions and error mapping are the shared server plumbing's
(:class:`rewardseal_server.sqlstore.StoreEngine`): a database that cannot be reached raises
:class:`~rewardseal.core.errors.Unavailable`; a bad request (an unknown customer, a field that
cannot be written) raises :class:`~rewardseal.core.errors.ValidationError` or :class:`NotFound`,
whose messages name ids, never field values.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import insert, select, text, update
from sqlalchemy.engine import Connection

from helpdesk.schema import (
    TICKET_COLUMNS,
    WRITABLE_ON_CREATE,
    WRITABLE_ON_UPDATE,
    customers,
    metadata,
    queues,
    tickets,
)
from rewardseal.core.errors import ValidationError
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "DEFAULT_SEED",
    "PRIORITIES",
    "QUEUES",
    "STATUSES",
    "NotFound",
    "Task",
    "TicketStore",
    "timestamp",
]

Record = dict[str, str | None]

DEFAULT_SEED: Final = 20261201
MAX_CUSTOMERS: Final = 100_000
QUEUES: Final[Mapping[str, str]] = {
    "billing": "Billing",
    "technical": "Technical support",
    "accounts": "Accounts and access",
    "shipping": "Shipping",
}
PRIORITIES: Final = ("low", "normal", "high", "urgent")
STATUSES: Final = ("open", "pending", "closed")
_PLANS: Final = ("free", "team", "business")
_SUBJECTS: Final = (
    "Invoice shows the wrong amount",
    "Cannot log in after password reset",
    "Parcel marked delivered but not received",
    "Export to CSV times out",
    "Card declined on renewal",
    "Two-factor codes arrive late",
)
_RESOLUTIONS: Final = ("fixed", "answered", "no_reply")
_EPOCH: Final = datetime(2024, 1, 1, tzinfo=UTC)
"""Seeded tickets are created within 120 days after this moment (well before any clock now)."""
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")
_SCHEMA_LOCK_KEY: Final = 0x48454C504445534B  # "HELPDESK"


class NotFound(ValidationError):
    """A customer, queue or ticket that does not exist."""


def timestamp(moment: datetime | None = None) -> str:
    """``moment`` (default now) as stored: UTC, microseconds, ``Z``."""
    moment = datetime.now(UTC) if moment is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Task:
    """One seeded task: a customer and a queue where they have an open and a closed ticket.

    ``other_queue_id`` is a queue where the customer also has tickets (the wrong queue).
    """

    customer_id: str
    queue_id: str
    open_ticket_id: str
    closed_ticket_id: str
    other_queue_id: str

    @property
    def identity(self) -> dict[str, str]:
        """The oracle identity of an episode on this task."""
        return {"customer_id": self.customer_id, "queue_id": self.queue_id}


def _record(row: Mapping[Any, Any]) -> Record:
    return {name: (None if row[name] is None else str(row[name])) for name in TICKET_COLUMNS}


class TicketStore:
    """The helpdesk's tables. Thread-safe (a pooled engine backs it)."""

    def __init__(self, url: str) -> None:
        """Open ``url`` (``sqlite:///path`` or ``postgresql://...``); no schema is made yet.

        Raises:
            ValidationError: the URL is malformed, unsupported, in-memory SQLite or lacks a
                driver. The message never repeats the URL.
        """
        self._db = StoreEngine(url, what="helpdesk database")
        self._ids = random.SystemRandom()

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def display_url(self) -> str:
        """The database URL with any password hidden (safe to print)."""
        return self._db.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        """Close every pooled connection."""
        self._db.dispose()

    # ------------------------------------------------------------------ schema and seed

    def create_schema(self) -> None:
        """Create the tables where missing; existing rows are kept."""

        def work(conn: Connection) -> None:
            self._db.advisory_lock(conn, _SCHEMA_LOCK_KEY)
            metadata.create_all(conn, checkfirst=True)

        self._db.write(work)

    def seed_if_empty(self, customer_count: int, seed: int = DEFAULT_SEED) -> int:
        """Seed the queues and ``customer_count`` synthetic customers with their tickets when
        the database was never seeded (it has no queue); return how many customers were added.

        Each customer has tickets in two queues: in each, one open ticket and one or two closed
        ones, so every (customer, queue) pair of the seed is a :class:`Task`.
        """
        if not 0 <= customer_count <= MAX_CUSTOMERS:
            raise ValidationError(f"the customer count must be in 0..{MAX_CUSTOMERS}")
        rng = random.Random(f"helpdesk.seed/{seed}")
        people: list[dict[str, str]] = []
        rows: list[Record] = []
        for index in range(customer_count):
            customer_id = f"cust-{index + 1:05d}"
            people.append(
                {
                    "id": customer_id,
                    "name": f"Synthetic Customer {index + 1}",
                    "email": f"customer{index + 1}@example.invalid",
                    "plan": rng.choice(_PLANS),
                }
            )
            for queue_id in rng.sample(sorted(QUEUES), 2):
                for number, status in enumerate(["open"] + ["closed"] * rng.randint(1, 2)):
                    created = _EPOCH + timedelta(minutes=rng.randrange(0, 60 * 24 * 120))
                    rows.append(
                        {
                            "id": f"tkt-{customer_id[5:]}-{queue_id}-{number}",
                            "customer_id": customer_id,
                            "queue_id": queue_id,
                            "subject": rng.choice(_SUBJECTS),
                            "body": "Synthetic ticket body; no real customer data.",
                            "priority": rng.choice(PRIORITIES),
                            "status": status,
                            "resolution": rng.choice(_RESOLUTIONS) if status == "closed" else None,
                            "assignee": None,
                            "channel": rng.choice(("email", "web", "phone")),
                            "created_at": timestamp(created),
                            "updated_at": timestamp(created),
                        }
                    )

        def work(conn: Connection) -> int:
            self._db.advisory_lock(conn, _SCHEMA_LOCK_KEY)
            # The queues are seeded every time: a database that has them was seeded before.
            if conn.execute(select(queues.c.id).limit(1)).first() is not None:
                return 0
            conn.execute(insert(queues), [{"id": k, "name": v} for k, v in QUEUES.items()])
            if people:
                conn.execute(insert(customers), people)
                conn.execute(insert(tickets), rows)
            return len(people)

        return self._db.write(work)

    def grant_reader(self, role: str, password: str | None = None) -> None:
        """Make ``role`` a PostgreSQL login that may read ``tickets`` and nothing else.

        The sql bundle reads through such a role (the worker's sessions are read-only as well,
        but a role that cannot write is the database's own guarantee). An existing role gets
        the grant again (and the password, when given).

        Raises:
            ValidationError: not PostgreSQL, or a role name that is not a plain identifier.
        """
        if self.backend != "postgresql":
            raise ValidationError("a reader role needs PostgreSQL")
        if not _ROLE_NAME.match(role):
            raise ValidationError("the role name must match [a-z_][a-z0-9_]{0,62}")

        def work(conn: Connection) -> None:
            exists = conn.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}
            ).first()
            if exists is None:
                conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            if password is not None:
                # PASSWORD takes no bind parameter; the literal is quoted by the server's rules.
                literal = conn.execute(text("SELECT quote_literal(:p)"), {"p": password})
                conn.execute(text(f"ALTER ROLE {role} PASSWORD {literal.scalar_one()}"))
            database = conn.execute(text("SELECT current_database()")).scalar_one()
            conn.execute(text(f'GRANT CONNECT ON DATABASE "{database}" TO {role}'))
            conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {role}"))
            conn.execute(text(f"GRANT SELECT ON tickets TO {role}"))

        self._db.write(work)

    # ------------------------------------------------------------------ reads

    def tickets_of(self, customer_id: str, queue_id: str) -> list[Record]:
        """Every ticket of ``customer_id`` in ``queue_id``, by id."""
        query = (
            select(tickets)
            .where(tickets.c.customer_id == customer_id, tickets.c.queue_id == queue_id)
            .order_by(tickets.c.id)
        )
        rows = self._db.read(lambda conn: conn.execute(query).mappings().all())
        return [_record(row) for row in rows]

    def ticket(self, ticket_id: str) -> Record:
        """One ticket. Raises :class:`NotFound`."""
        query = select(tickets).where(tickets.c.id == ticket_id)
        row = self._db.read(lambda conn: conn.execute(query).mappings().first())
        if row is None:
            raise NotFound("no such ticket")
        return _record(row)

    def tasks(self, limit: int = 1000) -> list[Task]:
        """Seeded tasks: (customer, queue) pairs with exactly one open ticket and a closed one,
        where the customer has tickets in another queue too; by customer, then queue."""
        query = select(
            tickets.c.id, tickets.c.customer_id, tickets.c.queue_id, tickets.c.status
        ).order_by(tickets.c.customer_id, tickets.c.queue_id, tickets.c.id)
        rows = self._db.read(lambda conn: conn.execute(query).all())
        by_pair: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for ticket_id, customer_id, queue_id, status in rows:
            by_pair.setdefault((customer_id, queue_id), []).append((ticket_id, status))
        found: list[Task] = []
        for (customer_id, queue_id), held in by_pair.items():
            opened = [t for t, s in held if s == "open"]
            closed = [t for t, s in held if s == "closed"]
            others = sorted(q for c, q in by_pair if c == customer_id and q != queue_id)
            if len(opened) == 1 and closed and others:
                found.append(Task(customer_id, queue_id, opened[0], closed[0], others[0]))
            if len(found) >= limit:
                break
        return found

    # ------------------------------------------------------------------ writes

    def create_ticket(self, fields: Mapping[str, str | None]) -> Record:
        """Store a new ticket; the id and both timestamps are set here.

        Raises:
            ValidationError: a field that cannot be written, a missing subject.
            NotFound: the customer or the queue does not exist.
        """
        unknown = sorted(set(fields) - WRITABLE_ON_CREATE)
        if unknown:
            raise ValidationError(f"fields that cannot be written: {', '.join(unknown)}")
        if not fields.get("subject"):
            raise ValidationError("a ticket needs a subject")
        now = timestamp()
        record: Record = dict.fromkeys(TICKET_COLUMNS)
        record.update({"priority": "normal", "status": "open"})
        record.update(fields)
        record.update(id=f"tkt-{self._ids.getrandbits(64):016x}", created_at=now, updated_at=now)

        def work(conn: Connection) -> None:
            self._require(conn, str(record["customer_id"]), str(record["queue_id"]))
            conn.execute(insert(tickets), record)

        self._db.write(work)
        return record

    def update_ticket(self, ticket_id: str, fields: Mapping[str, str | None]) -> Record:
        """Change ``fields`` of a ticket and stamp ``updated_at`` (a request that changes
        nothing still touches the ticket, as in the ticketing systems this one stands for).

        Raises:
            ValidationError: a field that cannot be changed.
            NotFound: no such ticket.
        """
        unknown = sorted(set(fields) - WRITABLE_ON_UPDATE)
        if unknown:
            raise ValidationError(f"fields that cannot be changed: {', '.join(unknown)}")
        values = {**fields, "updated_at": timestamp()}

        def work(conn: Connection) -> None:
            done = conn.execute(update(tickets).where(tickets.c.id == ticket_id).values(values))
            if done.rowcount != 1:
                raise NotFound("no such ticket")

        self._db.write(work)
        return self.ticket(ticket_id)

    def clone_customer(self, source_id: str, clone_id: str, suffix: str) -> dict[str, str]:
        """Copy a customer and every one of their tickets to a sandbox customer ``clone_id``;
        each copy's id is the original's plus ``suffix``. Return original -> copy ticket ids.

        Idempotent: a clone that exists already is answered with its mapping, unchanged (its
        tickets may have moved on since).

        Raises:
            NotFound: no customer ``source_id``.
            ValidationError: an empty id or suffix.
        """
        if not clone_id or not suffix or clone_id == source_id:
            raise ValidationError("a clone needs its own customer id and a ticket id suffix")

        def work(conn: Connection) -> dict[str, str]:
            person = conn.execute(select(customers).where(customers.c.id == source_id)).first()
            if person is None:
                raise NotFound("no such customer")
            owned = conn.execute(
                select(tickets).where(tickets.c.customer_id == source_id).order_by(tickets.c.id)
            ).mappings()
            copies = [
                {**row, "id": f"{row['id']}{suffix}", "customer_id": clone_id} for row in owned
            ]
            mapping = {str(row["id"])[: -len(suffix)]: str(row["id"]) for row in copies}
            if conn.execute(select(customers.c.id).where(customers.c.id == clone_id)).first():
                return mapping
            conn.execute(insert(customers), {**person._mapping, "id": clone_id})
            if copies:
                conn.execute(insert(tickets), copies)
            return mapping

        return self._db.write(work)

    def _require(self, conn: Connection, customer_id: str, queue_id: str) -> None:
        known = select(customers.c.id).where(customers.c.id == customer_id)
        if conn.execute(known).first() is None:
            raise NotFound("no such customer")
        if conn.execute(select(queues.c.id).where(queues.c.id == queue_id)).first() is None:
            raise NotFound("no such queue")
