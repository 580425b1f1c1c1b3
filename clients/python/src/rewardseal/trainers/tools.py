"""Agent tools as trainer integrations see them: a protocol, the OpenAI tool list, one dispatch.

A multi-turn integration (verl's agent loop, TRL's environment, a verifiers toolset) takes its
tools as plain objects that satisfy :class:`AgentTool`: a ``name``, a ``description``, a JSON
Schema ``parameters`` object (OpenAI function-calling style) and ``async call(arguments,
session) -> str``, the text the agent sees. The *session* is whatever the tools' provider binds
to one episode (its sandbox identity, the system of record's URL and credential); the
integration opens one per episode and passes it through unread, so nothing here knows a system
of record. ``rewardseal_kit.tools`` provides MockMed's tools; the helpdesk example its own.

The rule every integration shares: **a tool error is the agent's observation**, never an
exception that ends the episode. A call with a name no tool has, arguments that are not a JSON
object or do not match the schema, or a refusal by the system of record comes back as text that
starts with :data:`ERROR_PREFIX`. :func:`call_tool` applies it for the name and the JSON;
:func:`argument_error` is the schema check a tool's ``call`` runs first. A
:class:`ToolProvider` pairs the tools with the session an integration opens per episode.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from jsonschema import Draft202012Validator

from rewardseal.core.errors import preview

__all__ = [
    "ERROR_PREFIX",
    "AgentTool",
    "ToolProvider",
    "argument_error",
    "call_tool",
    "openai_tools",
    "tools_by_name",
]

ERROR_PREFIX: Final = "error: "
"""How the text of a failed tool call starts (the agent reads it as the call's result)."""
_MAX_SHOWN_ERRORS: Final = 3

SessionT = TypeVar("SessionT", contravariant=True)
SessionV = TypeVar("SessionV")


@runtime_checkable
class AgentTool(Protocol[SessionT]):
    """One tool an agent may call, bound to nothing until ``call`` is given a session."""

    @property
    def name(self) -> str:
        """The function name the model calls (``[A-Za-z0-9_-]{1,64}``, unique in a tool set)."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def parameters(self) -> Mapping[str, Any]:
        """The arguments' JSON Schema: an ``object`` schema (``{}`` of properties for none)."""
        ...

    async def call(self, arguments: Mapping[str, Any], session: SessionT) -> str:
        """Run the tool for the episode ``session`` is bound to; the text the agent sees.

        Never raises for the agent's mistakes or the system of record's refusals: those are
        returned as text starting with :data:`ERROR_PREFIX`.
        """
        ...


@runtime_checkable
class ToolProvider(Protocol[SessionV]):
    """A system of record's tools and how to open their session for one episode.

    An integration holds one provider; per episode it enters ``session(identity)`` (the row's
    oracle identity, the same mapping BeginEpisode binds) and calls ``tools`` with it.
    """

    @property
    def tools(self) -> Sequence[AgentTool[SessionV]]:
        """Every tool, in the order the model is shown them."""
        ...

    def session(self, identity: Mapping[str, str]) -> AbstractAsyncContextManager[SessionV]:
        """A session bound to ``identity`` (enter it with ``async with``; exit closes it).

        Raises:
            ValueError: ``identity`` does not have exactly the keys the tools need.
        """
        ...


def openai_tools(tools: Iterable[AgentTool[Any]]) -> list[dict[str, Any]]:
    """``tools=[{"type": "function", "function": {name, description, parameters}}, ...]``.

    Raises:
        ValueError: two tools share a name (the model could not tell them apart).
    """
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": json.loads(json.dumps(tool.parameters)),  # a plain, fresh copy
            },
        }
        for tool in tools_by_name(tools).values()
    ]


def tools_by_name(tools: Iterable[AgentTool[SessionT]]) -> dict[str, AgentTool[SessionT]]:
    """The tools keyed by name, in their order.

    Raises:
        ValueError: two tools share a name.
    """
    named: dict[str, AgentTool[SessionT]] = {}
    for tool in tools:
        if tool.name in named:
            raise ValueError(f"two tools are named {tool.name!r}")
        named[tool.name] = tool
    return named


def argument_error(tool_name: str, schema: Mapping[str, Any], arguments: object) -> str | None:
    """Why ``arguments`` do not match ``schema`` (the text for the agent), or None when they do.

    At most three problems are named, each with its argument path; values are quoted through
    :func:`rewardseal.core.errors.preview`, so a huge argument cannot flood the transcript.
    """
    if not isinstance(arguments, Mapping):
        return f"{ERROR_PREFIX}the arguments of {tool_name} must be a JSON object"
    validator = Draft202012Validator(dict(schema))
    problems = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    if not problems:
        return None
    shown = []
    for problem in problems[:_MAX_SHOWN_ERRORS]:
        where = ".".join(str(part) for part in problem.absolute_path)
        shown.append(
            f"{where}: {preview(problem.message, quoted=False)}"
            if where
            else preview(problem.message, quoted=False)
        )
    more = len(problems) - len(shown)
    tail = f" (and {more} more)" if more else ""
    return f"{ERROR_PREFIX}invalid arguments for {tool_name}: {'; '.join(shown)}{tail}"


async def call_tool(
    tools: Mapping[str, AgentTool[SessionT]],
    name: str,
    arguments: str | Mapping[str, Any] | None,
    session: SessionT,
) -> str:
    """Call the tool named ``name`` with ``arguments`` (a JSON object, or its text as a model
    wrote it; None for no arguments) for ``session``'s episode; the text the agent sees.

    An unknown name or arguments that are not a JSON object are answered as error text, as the
    tool itself answers a schema mismatch or a refusal.
    """
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"{ERROR_PREFIX}there is no tool named {preview(name)}; the tools are: {known}"
    if arguments is None:
        parsed: object = {}
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f"{ERROR_PREFIX}the arguments of {tool.name} are not valid JSON"
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        return f"{ERROR_PREFIX}the arguments of {tool.name} must be a JSON object"
    return await tool.call(parsed, session)
