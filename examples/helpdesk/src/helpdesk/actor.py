"""HelpdeskActor: carry out a policy's helpdesk action report on the helpdesk's REST API.

The second implementation of :class:`rewardseal.trainers.actors.EpisodeActor` (the first is the
kit's MockMed actor): a trainer adapter given one runs each completion's API calls before the
worker scores the episode, and knows nothing of tickets.

Sandboxes: a trainer samples several completions of one dataset row, and the worker allows one
open episode per identity (R-W-3). With ``sandbox=True`` (the default) :meth:`identity_for`
copies the row's customer and all their tickets to a sandbox customer
``<customer>~<12 hex of sha256(episode id)>`` (tickets ``<ticket id>~<same hex>``), so every
completion gets a fresh copy of the row's situation and its own identity; :meth:`act` redirects
the row's customer and the row's ticket ids to the copies. Other ids are used as written, so a
write on the wrong record still misses the identity the worker reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import quote

import httpx

from helpdesk.reports import CREATE, HelpdeskAction, parse_report
from rewardseal.core.errors import ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.v1.enums_pb2 import RuntimeSignal

__all__ = ["HelpdeskActor"]

_CUSTOMER: Final = "customer_id"
_QUEUE: Final = "queue_id"
_SERVER_ERROR: Final = 500
_MAX_PENDING_COPIES: Final = 4096
"""Sandbox copies remembered between identity_for and act (a trainer batch is far smaller)."""


class PlatformFailure(Exception):
    """The helpdesk refused service (5xx, unreachable): the run stops as FAILED_PLATFORM."""


class HelpdeskActor:
    """Executes helpdesk action reports (:mod:`helpdesk.reports`) on the helpdesk's API."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        sandbox: bool = True,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """An actor for the helpdesk at ``base_url`` (``http(s)://host:port``).

        Raises:
            ValidationError: not an http(s) URL, or no token.
        """
        if not base_url.startswith(("http://", "https://")):
            raise ValidationError("the helpdesk base URL must be http(s)")
        if not token:
            raise ValidationError("a helpdesk bearer token is required")
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
            transport=transport,
        )
        self._sandbox = sandbox
        self._copies: dict[str, dict[str, str]] = {}

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def identity_for(self, row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
        """The row's ``{customer_id, queue_id}``; with sandboxes, a fresh copy's customer.

        Raises:
            ValidationError: the row lacks a key, or the helpdesk refused the copy.
        """
        customer, queue = row_identity.get(_CUSTOMER, ""), row_identity.get(_QUEUE, "")
        if not customer or not queue:
            raise ValidationError("a helpdesk row names a customer_id and a queue_id")
        if not self._sandbox:
            return {_CUSTOMER: customer, _QUEUE: queue}
        copy = sandbox_identity(customer, episode_id)
        suffix = copy[len(customer) :]
        try:
            answer = self._client.post(
                f"/api/customers/{quote(customer, safe='')}/clone",
                json={"customer_id": copy, "suffix": suffix},
            )
        except httpx.HTTPError:
            raise ValidationError("the helpdesk could not be reached to copy the row") from None
        if answer.status_code != 200:
            raise ValidationError(
                f"the helpdesk refused to copy the row (HTTP {answer.status_code})"
            )
        self._copies[episode_id] = dict(answer.json()["tickets"])
        while len(self._copies) > _MAX_PENDING_COPIES:
            # An episode whose begin failed is never acted on: forget the oldest mapping.
            del self._copies[next(iter(self._copies))]
        return {_CUSTOMER: copy, _QUEUE: queue}

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
        *,
        task_parameters: Mapping[str, ParameterValue] | None = None,
    ) -> RuntimeSignal.ValueType:
        """Run the report's calls in order (the helpdesk contract declares no task parameters:
        ``task_parameters`` is accepted for the protocol and unused).

        An unparseable report writes nothing and completes (the read then finds nothing:
        WRONG_EFFECT). A 4xx answer is a refused call and the run goes on. A 5xx answer or an
        unreachable helpdesk stops the run: FAILED_PLATFORM. ``"halted": true`` gives
        HALTED_BEFORE_EFFECT after the calls.
        """
        try:
            report = parse_report(completion)
        except ValidationError:
            return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
        copies = self._copies.pop(episode_id, {})
        try:
            for action in report.actions:
                self._call(action, identity, row_identity, copies)
        except PlatformFailure:
            return RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM
        if report.halted:
            return RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT
        return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED

    def _call(
        self,
        action: HelpdeskAction,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        copies: Mapping[str, str],
    ) -> None:
        try:
            if action.op == CREATE:
                fields = {_CUSTOMER: identity[_CUSTOMER], _QUEUE: identity[_QUEUE]}
                fields.update({k: v for k, v in action.fields.items() if v is not None})
                if fields[_CUSTOMER] == row_identity.get(_CUSTOMER):
                    fields[_CUSTOMER] = identity[_CUSTOMER]
                answer = self._client.post("/api/tickets", json=fields)
            else:
                assert action.ticket_id is not None
                ticket = copies.get(action.ticket_id, action.ticket_id)
                path = f"/api/tickets/{quote(ticket, safe='')}"
                answer = self._client.patch(path, json=dict(action.fields))
        except httpx.HTTPError:
            raise PlatformFailure from None
        if answer.status_code >= _SERVER_ERROR:
            raise PlatformFailure
