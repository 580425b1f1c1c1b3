"""The helpdesk's tables: customers, queues and tickets (SQLAlchemy Core).

A ticket belongs to one customer and one queue; the pair is the oracle identity of the example's
contracts (a two-key identity), so ``(customer_id, queue_id)`` is indexed. Every column a reader
sees is text: ids, timestamps (ISO 8601, UTC) included.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Column, ForeignKey, Index, MetaData, String, Table, Text

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
    Column("name", String(200), nullable=False),
    Column("email", String(200), nullable=False),
    Column("plan", String(32), nullable=False),
)

queues = Table(
    "queues",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), nullable=False),
)

tickets = Table(
    "tickets",
    metadata,
    Column("id", String(300), primary_key=True),
    Column("customer_id", String(300), ForeignKey("customers.id"), nullable=False),
    Column("queue_id", String(64), ForeignKey("queues.id"), nullable=False),
    Column("subject", String(300), nullable=False),
    Column("body", Text),
    Column("priority", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("resolution", String(32)),
    Column("assignee", String(64)),
    Column("channel", String(16)),
    Column("created_at", String(32), nullable=False),
    Column("updated_at", String(32), nullable=False),
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
