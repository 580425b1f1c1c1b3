"""The framework-neutral tool base: a :class:`Tool` over a REST system of record, and the
:class:`ToolSession` that binds its calls to one episode's sandbox identity.

A :class:`Tool` satisfies :class:`rewardseal.trainers.tools.AgentTool` (what the trainer
integrations take). Its ``call`` checks the arguments against the tool's JSON Schema first, then
runs its handler with the session; a schema mismatch, an HTTP refusal (401, 403, 404, 422,
5xx) or an unreachable service becomes the agent's observation, text starting with
``"error: "``, never an exception that ends the episode.

The session, not the model, names the identity: handlers read ``session.identity`` for the
patient (or customer and queue), and the schemas declare no identity argument (with
``additionalProperties: false`` a model that tries to name one is told so).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

import httpx

from rewardseal.core.errors import preview
from rewardseal.trainers.tools import ERROR_PREFIX, argument_error

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "Handler",
    "Tool",
    "ToolBox",
    "ToolError",
    "ToolSession",
    "object_schema",
    "tools_markdown",
]

DEFAULT_TIMEOUT_SECONDS: Final = 10.0
_DETAIL_LIMIT: Final = 300


class ToolError(Exception):
    """A tool call the agent must be told failed (caught by :meth:`Tool.call`, never beyond)."""

    def __init__(self, message: str) -> None:
        """``message``: what the agent reads after ``"error: "``."""
        super().__init__(message)
        self.message = message


def _detail(response: httpx.Response) -> str:
    """The service's own reason for a refusal, short (FastAPI's 422 list as ``field: msg``)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    if isinstance(detail, list):
        parts = []
        for item in detail[:3]:
            if isinstance(item, Mapping):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{where}: {item.get('msg', '')}".strip(": "))
        detail = "; ".join(parts)
    return preview(detail, _DETAIL_LIMIT, quoted=False) if isinstance(detail, str) else ""


class ToolSession:
    """One episode's tool context: its sandbox identity and a client for the service's API.

    Use as ``async with ToolSession(identity, base_url, token) as session:``; the HTTP client is
    opened on entry and closed on exit. One session serves one episode (one identity).
    """

    def __init__(
        self,
        identity: Mapping[str, str],
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        service: str = "the service",
    ) -> None:
        """Bind to ``identity`` (e.g. ``{"patient_id": P}``) on the API at ``base_url``, which
        ``token`` (a bearer token) opens. ``service`` names it in error text."""
        if not identity or not all(isinstance(v, str) and v for v in identity.values()):
            raise ValueError("a tool session needs a non-empty identity of non-empty strings")
        self.identity: Mapping[str, str] = MappingProxyType(dict(identity))
        self.base_url = base_url.rstrip("/")
        self.service = service
        self._token = token
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Self:
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=self._timeout,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client (a closed session can be entered again)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Mapping[str, Any] | None = None,
    ) -> Any:
        """The JSON answer of ``method path``; any answer but 2xx raises :class:`ToolError`.

        Path segments are the caller's to quote (``urllib.parse.quote(x, safe="")``).
        """
        if self._client is None:
            raise RuntimeError("use the ToolSession as an async context manager")
        try:
            response = await self._client.request(
                method, path, params=dict(params or {}), json=json_body
            )
        except httpx.TimeoutException as exc:
            raise ToolError(f"{self.service} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"{self.service} could not be reached") from exc
        if response.is_success:
            try:
                return response.json()
            except ValueError as exc:
                raise ToolError(f"{self.service} answered with a body that is not JSON") from exc
        detail = _detail(response)
        reason = f": {detail}" if detail else ""
        raise ToolError(f"{self.service} refused ({response.status_code}){reason}")


Handler = Callable[[Mapping[str, Any], ToolSession], Awaitable[Any]]
"""What a tool does with checked arguments; its JSON-able result is what the agent reads."""


def object_schema(
    properties: Mapping[str, Mapping[str, Any]], *, required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """An arguments schema: an object of ``properties``, ``required`` ones, nothing else."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: dict(spec) for name, spec in properties.items()},
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


@dataclass(frozen=True)
class Tool:
    """A tool (an :class:`~rewardseal.trainers.tools.AgentTool` over :class:`ToolSession`)."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(repr=False)
    handler: Handler = field(repr=False, compare=False)

    async def call(self, arguments: Mapping[str, Any], session: ToolSession) -> str:
        """Check ``arguments``, run the handler; its result as JSON text, or the error text."""
        problem = argument_error(self.name, self.parameters, arguments)
        if problem is not None:
            return problem
        try:
            result = await self.handler(arguments, session)
        except ToolError as exc:
            return f"{ERROR_PREFIX}{exc.message}"
        return result if isinstance(result, str) else json.dumps(result, sort_keys=True)


@dataclass(frozen=True)
class ToolBox:
    """Tools over one service and the sessions they need (a
    :class:`~rewardseal.trainers.tools.ToolProvider` over :class:`ToolSession`)."""

    tools: tuple[Tool, ...]
    base_url: str
    token: str = field(repr=False)
    identity_keys: tuple[str, ...]
    service: str = "the service"
    timeout: float = DEFAULT_TIMEOUT_SECONDS

    def session(self, identity: Mapping[str, str]) -> ToolSession:
        """A session for the episode of ``identity`` (exactly :attr:`identity_keys`).

        Raises:
            ValueError: a key is missing or extra, or a value is not a non-empty string.
        """
        if sorted(identity) != sorted(self.identity_keys):
            raise ValueError(
                f"the {self.service} tools need the identity keys {list(self.identity_keys)}, "
                f"not {sorted(identity)}"
            )
        return ToolSession(
            identity, self.base_url, self.token, timeout=self.timeout, service=self.service
        )


def tools_markdown(tools: tuple[Tool, ...]) -> str:
    """The tools as a Markdown table (name, arguments, description) for docs/trainers.md.

    A test compares the page with this text, so the page lists exactly the code's tools.
    """
    lines = ["| tool | arguments | what it does |", "|---|---|---|"]
    for tool in tools:
        properties: Mapping[str, Any] = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", ()))
        arguments = ", ".join(
            f"`{name}`{'' if name in required else '?'}: {spec.get('type', 'any')}"
            for name, spec in properties.items()
        )
        lines.append(f"| `{tool.name}` | {arguments or '(none)'} | {tool.description} |")
    return "\n".join(lines) + "\n"
