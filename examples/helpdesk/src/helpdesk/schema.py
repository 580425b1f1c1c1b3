"""The helpdesk's tables: customers, queues and tickets (SQLAlchemy Core).

A ticket belongs to one customer and one queue; the pair is the oracle identity of the example's
contracts (a two-key identity), so ``(customer_id, queue_id)`` is indexed. Every column a reader
sees is text: ids, timestamps (ISO 8601, UTC) included.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column, Index, MetaData, String, Table, Text

__all__ = [
    "TICKET_COLUMNS",
    "WRITABLE_ON_CREATE",
    "WRITABLE_ON_UPDATE",
    "customers",
    "metadata",
    "queues",
    "tickets",
]

metadata = MetaData()

customers = Table(
    "customers",
    metadata,
    Column("id", String(300), primary_key=True),
    Column("name", Text),
    Column("email", Text),
    Column("plan", Text),
)

queues = Table(
    "queues",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", Text),
)

# Only the id and the identity columns are NOT NULL, and there is no foreign key: the service
# checks what a ticket needs (a known customer and queue, a subject) itself, and a sandbox copy
# of this schema must hold the partial rows a calibration writes (synthetic customers, records
# carrying only the fields the contract's effects name; ``rewardseal-worker calibrate``).
tickets = Table(
    "tickets",
    metadata,
    Column("id", String(300), primary_key=True),
    Column("customer_id", String(300), nullable=False),
    Column("queue_id", String(64), nullable=False),
    Column("subject", Text),
    Column("body", Text),
    Column("priority", Text),
    Column("status", Text),
    Column("resolution", Text),
    Column("assignee", Text),
    Column("channel", Text),
    Column("created_at", Text),
    Column("updated_at", Text),
    Index("ix_tickets_customer_queue", "customer_id", "queue_id"),
)

TICKET_COLUMNS: Final = tuple(column.name for column in tickets.columns)
WRITABLE_ON_CREATE: Final = frozenset(
    {"customer_id", "queue_id", "subject", "body", "priority", "status", "assignee", "channel"}
)
"""What a client may set on a new ticket (id and timestamps are the service's)."""
WRITABLE_ON_UPDATE: Final = frozenset(
    {"subject", "body", "priority", "status", "resolution", "assignee", "channel"}
)
"""What a client may change on a ticket; a ticket never moves to another customer or queue."""
