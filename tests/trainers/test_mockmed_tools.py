"""MockMed's agent tools (rewardseal_kit.tools.mockmed) against the real MockMed HTTP server.

Each tool's happy and error paths; schema mismatches and refusals come back as the agent's
text (never an exception); the session's patient scopes every call; the banner tool stores
nothing; the protocol the trainer integrations take (rewardseal.trainers.tools) holds.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_service import RunningMockMed, running_mockmed

from rewardseal.trainers.tools import (
    ERROR_PREFIX,
    AgentTool,
    ToolProvider,
    argument_error,
    call_tool,
    openai_tools,
    tools_by_name,
)
from rewardseal_kit.tools.base import Tool, ToolSession, tools_markdown
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_session, mockmed_toolbox

PATIENT = "patient-tools-0001"
OTHER = "patient-tools-0002"
READ_TOKEN = secrets.token_urlsafe(24)
TOOLS = tools_by_name(MOCKMED_TOOLS)
TRIAGE = {"type": "Triage", "note": "Synthetic: mild headache; vitals stable.", "status": "open"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"


@pytest.fixture
def mockmed(tmp_path: Path) -> Iterator[RunningMockMed]:
    url = f"sqlite:///{tmp_path / 'mockmed.sqlite'}"
    with running_mockmed(url, tmp_path, read_token=READ_TOKEN) as running:
        yield running


@pytest.fixture
async def session(mockmed: RunningMockMed) -> AsyncIterator[ToolSession]:
    async with mockmed_session(mockmed.url, mockmed.token, PATIENT) as opened:
        yield opened


async def call(session: ToolSession, name: str, arguments: Any = None) -> Any:
    """Call through the integrations' one dispatch; the answer parsed when it is not an error."""
    text = await call_tool(TOOLS, name, arguments, session)
    assert isinstance(text, str)
    return text if text.startswith(ERROR_PREFIX) else json.loads(text)


def stored(mockmed: RunningMockMed, patient_id: str = PATIENT) -> list[dict[str, Any]]:
    response = mockmed.client.get("/api/encounters", params={"patient_id": patient_id})
    rows: list[dict[str, Any]] = response.json()["encounters"]
    return rows


# ------------------------------------------------------------------ the protocol and the schemas


def test_every_tool_satisfies_the_integrations_protocol() -> None:
    assert [tool.name for tool in MOCKMED_TOOLS] == [
        "lookup_patient",
        "list_encounters",
        "create_encounter",
        "update_encounter",
        "submit_encounter",
        "show_saved_banner",
    ]
    for tool in MOCKMED_TOOLS:
        assert isinstance(tool, AgentTool)
        schema = tool.parameters
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        # The identity is the session's: no schema lets the model name a patient.
        assert "patient_id" not in schema["properties"]


async def test_the_toolbox_is_a_provider_that_opens_one_identity(mockmed: RunningMockMed) -> None:
    toolbox = mockmed_toolbox(mockmed.url, mockmed.token)
    assert isinstance(toolbox, ToolProvider)
    assert toolbox.tools == MOCKMED_TOOLS
    assert mockmed.token not in repr(toolbox)
    for wrong in ({}, {"patient": PATIENT}, {"patient_id": PATIENT, "queue_id": "q"}):
        with pytest.raises(ValueError, match="identity keys"):
            toolbox.session(wrong)
    async with toolbox.session({"patient_id": PATIENT}) as session:
        assert session.identity == {"patient_id": PATIENT}
        text = await call_tool(tools_by_name(toolbox.tools), "lookup_patient", None, session)
        assert json.loads(text)["patient_id"] == PATIENT


def test_openai_tools_lists_every_function() -> None:
    listed = openai_tools(MOCKMED_TOOLS)
    assert [entry["type"] for entry in listed] == ["function"] * len(MOCKMED_TOOLS)
    assert [entry["function"]["name"] for entry in listed] == [t.name for t in MOCKMED_TOOLS]
    assert listed[3]["function"]["parameters"]["required"] == ["draft_id"]
    json.dumps(listed)  # plain JSON
    with pytest.raises(ValueError, match="two tools are named"):
        openai_tools([MOCKMED_TOOLS[0], MOCKMED_TOOLS[0]])


def test_argument_error_names_the_path_and_cuts_long_values() -> None:
    schema = MOCKMED_TOOLS[2].parameters
    assert argument_error("create_encounter", schema, {"type": "Triage"}) is None
    problem = argument_error("create_encounter", schema, {"type": 7, "note": "x" * 20_000})
    assert problem is not None
    assert problem.startswith("error: invalid arguments for create_encounter: note: ")
    assert "type: 7 is not of type 'string'" in problem
    assert len(problem) < 400
    assert argument_error("create_encounter", schema, ["a"]) == (
        "error: the arguments of create_encounter must be a JSON object"
    )


def test_the_docs_list_exactly_the_codes_tools() -> None:
    assert tools_markdown(MOCKMED_TOOLS) in DOCS.read_text(encoding="utf-8")


# ------------------------------------------------------------------ each tool, happy path


async def test_lookup_and_list_read_only_the_sessions_patient(
    mockmed: RunningMockMed, session: ToolSession
) -> None:
    mockmed.client.post("/api/encounters", json={"patient_id": OTHER, **TRIAGE})
    assert await call(session, "lookup_patient") == {
        "patient_id": PATIENT,
        "encounter_count": 0,
        "open_encounter_count": 0,
        "last_encounter_at": None,
    }
    assert await call(session, "list_encounters", "{}") == {"encounters": []}
    mine = mockmed.client.post("/api/encounters", json={"patient_id": PATIENT, **TRIAGE}).json()
    assert (await call(session, "lookup_patient"))["encounter_count"] == 1
    listed = await call(session, "list_encounters", {})
    assert [row["id"] for row in listed["encounters"]] == [mine["id"]]


async def test_create_update_submit_stores_one_record(
    mockmed: RunningMockMed, session: ToolSession
) -> None:
    created = await call(session, "create_encounter", {"type": "Triage", "note": "draft note"})
    draft = created["draft"]
    assert created["submitted"] is False
    assert draft["patient_id"] == PATIENT
    assert stored(mockmed) == []  # a draft is not a record
    updated = await call(
        session,
        "update_encounter",
        {"draft_id": draft["id"], "note": TRIAGE["note"], "status": "open"},
    )
    assert updated["draft"] == {**draft, "note": TRIAGE["note"], "status": "open"}
    assert stored(mockmed) == []
    record = await call(session, "submit_encounter", json.dumps({"draft_id": draft["id"]}))
    assert record["banner"] == "Saved"
    assert stored(mockmed) == [{k: v for k, v in record.items() if k != "banner"}]
    assert {k: record[k] for k in TRIAGE} == TRIAGE


async def test_the_banner_tool_stores_nothing_but_the_screen_says_saved(
    mockmed: RunningMockMed, session: ToolSession
) -> None:
    shown = await call(session, "show_saved_banner", TRIAGE)
    assert shown["banner"] == "Saved"
    assert shown["id"].startswith("screen-")
    assert stored(mockmed) == []
    assert await call(session, "list_encounters") == {"encounters": []}
    screen = mockmed.client.get("/screen.json", params={"patient_id": PATIENT}).json()
    assert screen["banner"] == {PATIENT: "Saved"}
    assert [row["id"] for row in screen["collections"]["encounters"]] == [shown["id"]]


# ------------------------------------------------------------------ errors are the agent's text


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("create_encounter", {"patient_id": OTHER}, "Additional properties are not allowed"),
        ("create_encounter", {"type": ["Triage"]}, "type: ['Triage'] is not of type 'string'"),
        ("update_encounter", {"note": "x"}, "'draft_id' is a required property"),
        ("submit_encounter", {"draft_id": "../../admin/faults"}, "does not match"),
        ("lookup_patient", {"patient": OTHER}, "Additional properties are not allowed"),
        ("list_encounters", "[1, 2]", "must be a JSON object"),
        ("list_encounters", "{not json", "are not valid JSON"),
        ("delete_everything", {}, "there is no tool named 'delete_everything'"),
    ],
)
async def test_a_bad_call_is_error_text_and_changes_nothing(
    mockmed: RunningMockMed, session: ToolSession, name: str, arguments: Any, expected: str
) -> None:
    text = await call(session, name, arguments)
    assert isinstance(text, str)
    assert text.startswith(ERROR_PREFIX)
    assert expected in text
    assert stored(mockmed, PATIENT) == []
    assert stored(mockmed, OTHER) == []


async def test_an_unknown_draft_is_error_text(session: ToolSession) -> None:
    missing = {"draft_id": "draft-" + "0" * 32}
    assert await call(session, "submit_encounter", missing) == (
        "error: MockMed refused (404): no such draft for this patient"
    )
    assert (await call(session, "update_encounter", {**missing, "note": "x"})).startswith(
        "error: MockMed refused (404)"
    )


async def test_another_patients_draft_is_out_of_reach(
    mockmed: RunningMockMed, session: ToolSession
) -> None:
    async with mockmed_session(mockmed.url, mockmed.token, OTHER) as theirs:
        draft_id = (await call(theirs, "create_encounter", TRIAGE))["draft"]["id"]
    text = await call(session, "submit_encounter", {"draft_id": draft_id})
    assert text == "error: MockMed refused (404): no such draft for this patient"
    assert (await call(session, "update_encounter", {"draft_id": draft_id})).startswith(
        "error: MockMed refused (404)"
    )
    assert stored(mockmed, OTHER) == []
    assert stored(mockmed, PATIENT) == []


async def test_the_read_token_reads_and_every_write_tool_is_403_text(
    mockmed: RunningMockMed,
) -> None:
    async with mockmed_session(mockmed.url, READ_TOKEN, PATIENT) as reader:
        assert (await call(reader, "lookup_patient"))["patient_id"] == PATIENT
        assert await call(reader, "list_encounters") == {"encounters": []}
        for name, arguments in [
            ("create_encounter", TRIAGE),
            ("update_encounter", {"draft_id": "draft-" + "1" * 32}),
            ("submit_encounter", {"draft_id": "draft-" + "1" * 32}),
            ("show_saved_banner", TRIAGE),
        ]:
            assert await call(reader, name, arguments) == (
                "error: MockMed refused (403): the read token may only read"
            ), name
    assert stored(mockmed) == []


async def test_a_wrong_token_and_a_gone_service_are_error_text(mockmed: RunningMockMed) -> None:
    async with mockmed_session(mockmed.url, "not-the-token", PATIENT) as wrong:
        assert await call(wrong, "lookup_patient") == (
            "error: MockMed refused (401): missing or invalid bearer token"
        )
    mockmed.set_fault("down")
    async with mockmed_session(mockmed.url, mockmed.token, PATIENT) as down:
        assert (await call(down, "list_encounters")).startswith("error: MockMed refused (503)")
    mockmed.set_fault("none")
    async with mockmed_session("http://127.0.0.1:9", mockmed.token, PATIENT) as nowhere:
        assert await call(nowhere, "lookup_patient") == "error: MockMed could not be reached"


async def test_a_tool_needs_an_entered_session_and_an_identity() -> None:
    with pytest.raises(ValueError, match="identity"):
        ToolSession({}, "http://127.0.0.1:9", "t")
    tool: Tool = MOCKMED_TOOLS[0]
    with pytest.raises(RuntimeError, match="async context manager"):
        await tool.call({}, mockmed_session("http://127.0.0.1:9", "t", PATIENT))
