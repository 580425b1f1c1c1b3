"""The agent's tools over the helpdesk's REST API, for one episode's customer and queue.

=================  ==========================================================================
``list_tickets``    ``GET /api/tickets?customer_id=C&queue_id=Q``: the queue's tickets
``get_ticket``      ``GET /api/tickets/T``: one ticket of this customer's queue
``create_ticket``   ``POST /api/tickets``: file a ticket in this customer's queue
``update_ticket``   ``PATCH /api/tickets/T``: change a ticket of this customer's queue
=================  ==========================================================================

The customer ``C`` and queue ``Q`` (the oracle identity) come from the session, never from the
model: no schema names them, and a ticket of another customer or queue is answered as unknown
(the tool reads it first and refuses it, the same text as a ticket that does not exist, so the
answer says nothing about other customers). Within the queue a policy may still misbehave (file
twice, set a field the contract forbids, touch the closed ticket): the reward's business.

The tools are :class:`rewardseal_kit.tools.base.Tool` objects, so they satisfy
:class:`rewardseal.trainers.tools.AgentTool` like MockMed's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from helpdesk.bundles import IDENTITY_KEYS
from rewardseal_kit.tools.base import (
    DEFAULT_TIMEOUT_SECONDS,
    Tool,
    ToolBox,
    ToolError,
    ToolSession,
    object_schema,
)

__all__ = [
    "CREATE_TICKET",
    "GET_TICKET",
    "HELPDESK_TOOLS",
    "LIST_TICKETS",
    "UPDATE_TICKET",
    "helpdesk_session",
    "helpdesk_toolbox",
]

_TEXT: Final = {"type": "string", "maxLength": 4000}
_SHORT: Final = {"type": "string", "maxLength": 300}
_COMMON: Final = {
    "body": {**_TEXT, "description": "the ticket's text (synthetic only)"},
    "priority": {**_SHORT, "description": 'e.g. "low", "normal", "high"'},
    "status": {**_SHORT, "description": 'e.g. "open", "closed"'},
    "assignee": {**_SHORT, "description": "who works on it (leave it out unless asked)"},
    "channel": {**_SHORT, "description": 'how the customer wrote, e.g. "email"'},
}
_SUBJECT: Final = {"type": "string", "minLength": 1, "maxLength": 300, "description": "the subject"}
_TICKET_ID: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 300,
    "description": "the ticket's id, as list_tickets shows it",
}
_RESOLUTION: Final = {**_SHORT, "description": 'why it was closed, e.g. "superseded"'}


def helpdesk_session(
    base_url: str,
    token: str,
    customer_id: str,
    queue_id: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> ToolSession:
    """A session of the helpdesk's tools for the episode of ``customer_id`` in ``queue_id``."""
    identity = dict(zip(IDENTITY_KEYS, (customer_id, queue_id), strict=True))
    return helpdesk_toolbox(base_url, token, timeout=timeout).session(identity)


def helpdesk_toolbox(
    base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> ToolBox:
    """:data:`HELPDESK_TOOLS` with their sessions (``toolbox.session(task.identity)``)."""
    return ToolBox(HELPDESK_TOOLS, base_url, token, IDENTITY_KEYS, "the helpdesk", timeout)


def _fields(arguments: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: arguments[name] for name in names if name in arguments}


def _ticket_path(arguments: Mapping[str, Any]) -> str:
    return f"/api/tickets/{quote(str(arguments['ticket_id']), safe='')}"


async def _own_ticket(arguments: Mapping[str, Any], session: ToolSession) -> Any:
    """The ticket, if it is in the session's customer's queue; else the "unknown" error."""
    unknown = ToolError("the helpdesk refused (404): no such ticket in this customer's queue")
    try:
        ticket = await session.request("GET", _ticket_path(arguments))
    except ToolError as exc:
        raise unknown if "(404)" in exc.message else exc from None
    if any(ticket.get(key) != value for key, value in session.identity.items()):
        raise unknown
    return ticket


async def _list(arguments: Mapping[str, Any], session: ToolSession) -> Any:
    return await session.request("GET", "/api/tickets", params=dict(session.identity))


async def _create(arguments: Mapping[str, Any], session: ToolSession) -> Any:
    body = {**session.identity, **_fields(arguments, "subject", *_COMMON)}
    return await session.request("POST", "/api/tickets", json_body=body)


async def _update(arguments: Mapping[str, Any], session: ToolSession) -> Any:
    await _own_ticket(arguments, session)
    changes = _fields(arguments, "subject", "resolution", *_COMMON)
    return await session.request("PATCH", _ticket_path(arguments), json_body=changes)


LIST_TICKETS: Final = Tool(
    "list_tickets",
    "List the tickets of this episode's customer in this queue, by id.",
    object_schema({}),
    _list,
)
GET_TICKET: Final = Tool(
    "get_ticket",
    "Read one ticket of this customer's queue.",
    object_schema({"ticket_id": _TICKET_ID}, required=("ticket_id",)),
    _own_ticket,
)
CREATE_TICKET: Final = Tool(
    "create_ticket",
    "File a new ticket for this episode's customer in this queue.",
    object_schema({"subject": _SUBJECT, **_COMMON}, required=("subject",)),
    _create,
)
UPDATE_TICKET: Final = Tool(
    "update_ticket",
    "Change fields of a ticket of this customer's queue (the fields given; the rest stay).",
    object_schema(
        {"ticket_id": _TICKET_ID, "subject": _SUBJECT, "resolution": _RESOLUTION, **_COMMON},
        required=("ticket_id",),
    ),
    _update,
)

HELPDESK_TOOLS: Final[tuple[Tool, ...]] = (LIST_TICKETS, GET_TICKET, CREATE_TICKET, UPDATE_TICKET)
"""Every helpdesk tool, in the order a model is shown them."""
