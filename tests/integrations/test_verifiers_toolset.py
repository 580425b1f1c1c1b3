"""Why the tools taskset does not serve the kit's tools as a ``vf.Toolset`` (verifiers 0.4.0,
mcp 2.0.0): the test that shows it.

A 0.4 ``Toolset`` registers each ``@vf.tool`` method with MCP's ``MCPServer.add_tool``
(``verifiers/v1/mcp/toolset.py``), whose argument model is a pydantic model built from the
method's Python signature (``mcp/server/mcpserver/utilities/func_metadata.py``:
``ArgModelBase``, no ``extra="forbid"``). So, with the real libraries:

* the schema MCP advertises is the signature's, not the kit's JSON Schema: no
  ``additionalProperties: false``, and every optional argument also accepts null;
* an argument outside the signature is silently dropped: a model's decoy ``patient_id`` on
  ``create_encounter`` reaches the tool as if never written, and the call succeeds, where the
  kit's one dispatch (``rewardseal.trainers.tools.call_tool``, which the taskset's harness uses)
  answers ``error: ...`` and opens nothing;
* a method taking ``**arguments`` to forward them as written does not help: MCP turns it into
  one required argument named ``arguments``, so the kit's calls are refused outright.

So the taskset keeps its in-process harness (tools_environment.ToolCallingHarness), which
offers the same ``tools=[...]`` a toolset would and applies the kit's schemas as written.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1")
pytest.importorskip("mcp")

from mcp.server.mcpserver import MCPServer  # noqa: E402

from rewardseal.trainers.tools import call_tool, tools_by_name  # noqa: E402
from rewardseal_kit.tools.mockmed import CREATE_ENCOUNTER  # noqa: E402

DECOY = {"type": "Triage", "note": "Synthetic.", "status": "open", "patient_id": "P-decoy-0001"}


class _Refusing:
    """A session no valid call reaches (the kit's schema check runs before the session)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the kit's tool reached its session ({name}) with bad arguments")


def _kit_signature() -> inspect.Signature:
    """``create_encounter``'s arguments as a Python signature, from the kit's JSON Schema (the
    way a toolset method for it must declare them for MCP)."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name in CREATE_ENCOUNTER.parameters["properties"]:
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None
            )
        )
    return inspect.Signature(parameters, return_annotation=str)


class KitToolset(vf.Toolset[vf.ToolsetConfig]):  # type: ignore[misc]
    """A ``vf.Toolset`` with the kit's ``create_encounter`` and a ``**arguments`` forwarder;
    each keeps the arguments it received."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.received: list[dict[str, Any]] = []

    @vf.tool  # type: ignore[untyped-decorator]
    async def create_encounter(self, **arguments: Any) -> str:
        self.received.append(dict(arguments))
        return "draft opened"

    @vf.tool  # type: ignore[untyped-decorator]
    async def forward(self, **arguments: Any) -> str:
        """Forward the arguments as written."""
        self.received.append(dict(arguments))
        return "forwarded"


KitToolset.create_encounter.__signature__ = _kit_signature()  # type: ignore[attr-defined]
KitToolset.create_encounter.__doc__ = CREATE_ENCOUNTER.description


def _served() -> tuple[KitToolset, MCPServer]:
    toolset = KitToolset(vf.ToolsetConfig())
    server = MCPServer("kit")
    toolset.register(server)
    return toolset, server


async def test_a_toolset_drops_an_argument_the_kits_schema_refuses() -> None:
    toolset, server = _served()
    received = toolset.received
    advertised = {tool.name: tool.input_schema for tool in await server.list_tools()}

    # What the model is shown is the signature's schema, not the kit's.
    assert CREATE_ENCOUNTER.parameters["additionalProperties"] is False
    assert "additionalProperties" not in advertised["create_encounter"]
    assert set(advertised["create_encounter"]["properties"]) == set(
        CREATE_ENCOUNTER.parameters["properties"]
    )

    # The decoy patient is dropped without a word: the call succeeds as if it were not there.
    result = await server.call_tool("create_encounter", dict(DECOY))
    assert result.is_error is False
    (seen,) = received
    assert "patient_id" not in seen
    assert seen["type"] == "Triage"

    # The kit's dispatch (the taskset harness's) refuses the same call before any session use.
    answer = await call_tool(
        tools_by_name([CREATE_ENCOUNTER]), "create_encounter", dict(DECOY), _Refusing()
    )
    assert answer.startswith("error: ")
    assert "patient_id" in answer


async def test_a_forwarding_toolset_method_is_not_the_kits_schema_either() -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    toolset, server = _served()
    received = toolset.received
    advertised = {tool.name: tool.input_schema for tool in await server.list_tools()}
    # ``**arguments`` becomes one required argument named "arguments".
    assert advertised["forward"]["required"] == ["arguments"]
    assert set(advertised["forward"]["properties"]) == {"arguments"}
    with pytest.raises(ToolError, match="arguments"):
        await server.call_tool("forward", {"type": "Triage", "note": "Synthetic."})
    assert received == []
