"""The helpdesk's agent tools (helpdesk.tools) against the real helpdesk (PostgreSQL) and, for
whole episodes, a real worker serving its tier-2 sql bundle.

Happy and error paths of each tool; errors are the agent's text; the session's customer and
queue scope every call; the honest tool sequence is paid, doing nothing or filing twice is not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.helpdesk_stack import CHECKPOINT, running_helpdesk, serving_bundle

from helpdesk.store import Task
from helpdesk.tools import HELPDESK_TOOLS, helpdesk_session, helpdesk_toolbox
from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.trainers.tools import (
    ERROR_PREFIX,
    AgentTool,
    ToolProvider,
    call_tool,
    tools_by_name,
)
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.tools.base import ToolSession

TOOLS = tools_by_name(HELPDESK_TOOLS)
FILED = {
    "subject": "Follow-up: the issue is still not solved",
    "body": "Synthetic follow-up written by a tool-calling policy.",
    "priority": "high",
    "channel": "email",
}
CLOSED = {"status": "closed", "resolution": "superseded"}


@pytest.fixture(scope="module")
def helpdesk(postgres_server):
    with running_helpdesk(postgres_server) as running:
        yield running


@pytest.fixture(scope="module")
def tasks(helpdesk) -> list[Task]:
    found = helpdesk.server.store.tasks()
    assert len(found) >= 8
    return found


@pytest.fixture(scope="module")
def worker(helpdesk, tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        tmp = tmp_path_factory.mktemp("helpdesk-tools")
        with serving_bundle("sql", helpdesk, tmp, monkeypatch) as running:
            client = running.client()
            try:
                yield running, client
            finally:
                client.close()


def session_for(helpdesk, task: Task, token: str | None = None) -> ToolSession:
    return helpdesk_session(helpdesk.url, token or helpdesk.token, task.customer_id, task.queue_id)


async def call(session: ToolSession, name: str, arguments: Any = None) -> Any:
    text = await call_tool(TOOLS, name, arguments, session)
    return text if text.startswith(ERROR_PREFIX) else json.loads(text)


def test_every_tool_satisfies_the_protocol_and_names_no_identity() -> None:
    assert [tool.name for tool in HELPDESK_TOOLS] == [
        "list_tickets",
        "get_ticket",
        "create_ticket",
        "update_ticket",
    ]
    for tool in HELPDESK_TOOLS:
        assert isinstance(tool, AgentTool)
        assert tool.parameters["additionalProperties"] is False
        assert not {"customer_id", "queue_id"} & set(tool.parameters["properties"])


async def test_each_tool_works_in_its_queue(helpdesk, tasks) -> None:
    task = tasks[0]
    toolbox = helpdesk_toolbox(helpdesk.url, helpdesk.token)
    assert isinstance(toolbox, ToolProvider)
    with pytest.raises(ValueError, match="identity keys"):
        toolbox.session({"customer_id": task.customer_id})
    async with toolbox.session(task.identity) as session:
        listed = await call(session, "list_tickets")
        ids = {ticket["id"] for ticket in listed["tickets"]}
        assert {task.open_ticket_id, task.closed_ticket_id} <= ids
        ticket = await call(session, "get_ticket", {"ticket_id": task.open_ticket_id})
        assert ticket["status"] == "open"
        filed = await call(session, "create_ticket", FILED)
        assert (filed["customer_id"], filed["queue_id"]) == (task.customer_id, task.queue_id)
        changed = await call(session, "update_ticket", {"ticket_id": filed["id"], **CLOSED})
        assert changed["status"] == "closed"
        assert filed["id"] in {t["id"] for t in (await call(session, "list_tickets"))["tickets"]}


async def test_another_customers_ticket_is_unknown_and_untouched(helpdesk, tasks) -> None:
    mine, theirs = tasks[1], tasks[2]
    assert mine.customer_id != theirs.customer_id
    before = helpdesk.server.store.ticket(theirs.open_ticket_id)
    unknown = "error: the helpdesk refused (404): no such ticket in this customer's queue"
    async with session_for(helpdesk, mine) as session:
        assert await call(session, "get_ticket", {"ticket_id": theirs.open_ticket_id}) == unknown
        assert (
            await call(session, "update_ticket", {"ticket_id": theirs.open_ticket_id, **CLOSED})
            == unknown
        )
        assert await call(session, "get_ticket", {"ticket_id": "no-such-ticket"}) == unknown
        assert await call(session, "get_ticket", {"ticket_id": "../tasks"}) == unknown
    assert helpdesk.server.store.ticket(theirs.open_ticket_id) == before


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("create_ticket", {"body": "x"}, "'subject' is a required property"),
        ("create_ticket", {**FILED, "queue_id": "other"}, "Additional properties are not allowed"),
        ("update_ticket", {"status": "closed"}, "'ticket_id' is a required property"),
        ("update_ticket", {"ticket_id": "t", "priority": 3}, "priority: 3 is not of type"),
    ],
)
async def test_a_bad_call_is_error_text(helpdesk, tasks, name, arguments, expected) -> None:
    task = tasks[3]
    before = helpdesk.server.store.tickets_of(task.customer_id, task.queue_id)
    async with session_for(helpdesk, task) as session:
        text = await call(session, name, arguments)
    assert text.startswith(ERROR_PREFIX)
    assert expected in text
    assert helpdesk.server.store.tickets_of(task.customer_id, task.queue_id) == before


async def test_a_wrong_token_is_error_text(helpdesk, tasks) -> None:
    async with session_for(helpdesk, tasks[3], token="not-the-token") as session:
        assert await call(session, "list_tickets") == (
            "error: the helpdesk refused (401): missing or invalid bearer token"
        )


VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT


@pytest.mark.parametrize(
    ("play", "index", "outcome", "scalar"),
    [
        ("honest", 4, VERIFIED, 1.0),
        ("nothing", 5, WRONG_EFFECT, 0.0),
        ("twice", 6, WRONG_EFFECT, 0.0),
    ],
)
async def test_tool_episodes_through_the_worker(
    helpdesk, tasks, worker, play, index, outcome, scalar
) -> None:
    running, client = worker
    task = tasks[index]
    episode_id = f"ep-tools-{play}"
    client.begin(episode_id, running.digest, task.identity)
    async with session_for(helpdesk, task) as session:
        await call(session, "list_tickets")
        for _ in range({"honest": 1, "nothing": 0, "twice": 2}[play]):
            assert "id" in await call(session, "create_ticket", FILED)
        if play != "nothing":
            closed = {"ticket_id": task.open_ticket_id, **CLOSED}
            assert (await call(session, "update_ticket", closed))["status"] == "closed"
    got = client.score(
        make_descriptor(
            episode_id=episode_id,
            policy_checkpoint_id=CHECKPOINT,
            policy_update=0,
            reward_contract_digest=running.digest,
            oracle_identity=task.identity,
        )
    )
    assert got.receipt.reward_outcome == outcome, RewardOutcome.Name(got.receipt.reward_outcome)
    assert got.scalar == scalar
    assert got.receipt.oracle_tier == 2
