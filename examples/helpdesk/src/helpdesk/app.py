"""The helpdesk's REST API (FastAPI). Every route but ``/healthz`` needs the bearer token.

===========================================================  =====================================
``GET  /api/tickets?customer_id=C&queue_id=Q``               ``{"tickets": [ticket, ...]}``
``GET  /api/tickets/{id}``                                   one ticket (404 when unknown)
``POST /api/tickets``                                        a new ticket (201); body: the fields
``PATCH /api/tickets/{id}``                                  change fields, stamp ``updated_at``
``POST /api/customers/{id}/clone``                           ``{"customer_id": NEW, "suffix": S}``
                                                             -> ``{"tickets": {old: new}}``
``GET  /api/tasks``                                          ``{"tasks": [task, ...]}`` (seeded)
``GET  /healthz``                                            ``{"status": "ok"}``
===========================================================  =====================================

A body with an unknown field, a field of the wrong type or a field that cannot be written is
422; an unknown customer, queue or ticket 404; a database that cannot be reached 503. Answers
never quote field values back.
"""

# No ``from __future__ import annotations``: FastAPI reads the route and dependency annotations
# at run time, and those naming the local ``bearer`` scheme cannot be resolved from a string.
import dataclasses
import secrets
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from helpdesk.store import NotFound, TicketStore
from rewardseal.core.errors import RewardSealError, Unavailable, ValidationError

__all__ = ["create_app"]

_ID = Field(min_length=1, max_length=300)
_TEXT = Field(default=None, max_length=4000)


class TicketIn(BaseModel):
    """A new ticket: only these fields, as strings."""

    model_config = ConfigDict(extra="forbid", strict=True)

    customer_id: str = _ID
    queue_id: str = _ID
    subject: str = Field(min_length=1, max_length=300)
    body: str | None = _TEXT
    priority: str | None = None
    status: str | None = None
    assignee: str | None = None
    channel: str | None = None


class TicketChange(BaseModel):
    """A change of a ticket: any of these fields."""

    model_config = ConfigDict(extra="forbid", strict=True)

    subject: str | None = Field(default=None, min_length=1, max_length=300)
    body: str | None = _TEXT
    priority: str | None = None
    status: str | None = None
    resolution: str | None = None
    assignee: str | None = None
    channel: str | None = None


class CloneIn(BaseModel):
    """A sandbox copy of a customer: its id and the suffix of its tickets' ids."""

    model_config = ConfigDict(extra="forbid", strict=True)

    customer_id: str = _ID
    suffix: str = Field(min_length=1, max_length=64)


def create_app(store: TicketStore, *, token: str) -> FastAPI:
    """The API over ``store``, guarded by ``token``."""
    app = FastAPI(title="helpdesk (synthetic)", docs_url=None, redoc_url=None, openapi_url=None)
    bearer = HTTPBearer(auto_error=False)
    expected = token.encode()

    def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        presented = credentials.credentials.encode() if credentials is not None else b""
        # compare_digest on every request: the time taken says nothing about the token.
        if not secrets.compare_digest(presented, expected):
            raise _Unauthorized

    guarded = [Depends(authorized)]

    @app.exception_handler(_Unauthorized)
    async def unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"detail": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(RewardSealError)
    async def store_error(request: Request, exc: RewardSealError) -> JSONResponse:
        if isinstance(exc, NotFound):
            status = 404
        elif isinstance(exc, Unavailable):
            status = 503
        elif isinstance(exc, ValidationError):
            status = 422
        else:
            status = 500
        return JSONResponse({"detail": exc.message}, status_code=status)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # Plain (non-async) handlers: FastAPI runs them in its thread pool, off the event loop.
    @app.get("/api/tickets", dependencies=guarded)
    def list_tickets(
        customer_id: Annotated[str, Query(min_length=1, max_length=300)],
        queue_id: Annotated[str, Query(min_length=1, max_length=64)],
    ) -> dict[str, Any]:
        return {"tickets": store.tickets_of(customer_id, queue_id)}

    @app.get("/api/tickets/{ticket_id}", dependencies=guarded)
    def get_ticket(ticket_id: str) -> dict[str, Any]:
        return store.ticket(ticket_id)

    @app.post("/api/tickets", dependencies=guarded, status_code=201)
    def create_ticket(body: TicketIn) -> dict[str, Any]:
        return store.create_ticket(body.model_dump(exclude_unset=True))

    @app.patch("/api/tickets/{ticket_id}", dependencies=guarded)
    def change_ticket(ticket_id: str, body: TicketChange) -> dict[str, Any]:
        return store.update_ticket(ticket_id, body.model_dump(exclude_unset=True))

    @app.post("/api/customers/{customer_id}/clone", dependencies=guarded)
    def clone_customer(customer_id: str, body: CloneIn) -> dict[str, Any]:
        return {"tickets": store.clone_customer(customer_id, body.customer_id, body.suffix)}

    @app.get("/api/tasks", dependencies=guarded)
    def list_tasks(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
        return {"tasks": [dataclasses.asdict(task) for task in store.tasks(limit)]}

    return app


class _Unauthorized(Exception):
    """A request without the right bearer token."""
