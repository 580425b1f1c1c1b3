"""The parts of the ``rewardseal-mockmed-tools`` taskset that need no verifiers.

The tool script (rows, prompts, each family's turns), the scripted server's tool-calling
answers over HTTP, every family's script through the kit's MockMed tools on a real MockMed, and
:class:`WorkerEpisodes` against a real worker and MockMed: each family's tool calls played as
the harness plays them, then scored by the worker.
The verifiers taskset itself is tested in tests/integrations/test_verifiers_tools_env.py.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rewardseal_mockmed_extradup.scripted_policy import (
    GARBLED_ANSWER,
    ScriptedPolicyServer,
    tools_model_name,
)
from rewardseal_mockmed_extradup.tool_script import (
    DONE_TEXT,
    LATEST_DRAFT,
    TOOL_TASK_STATUS,
    TOOL_TASK_TYPE,
    family_script,
    latest_draft,
    request_from_prompt,
    scripted_turn,
    tool_prompt,
    tool_rows,
)
from rewardseal_mockmed_extradup.worker_episodes import (
    EPISODE_PREFIX,
    WorkerEpisodes,
    receipt_info,
)
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import Unscored, ValidationError
from rewardseal.trainers.actors import SANDBOX_SEPARATOR
from rewardseal.trainers.tools import ERROR_PREFIX, call_tool, tools_by_name
from rewardseal.trainers.verl.settings import ManagerSettings
from rewardseal_kit.tools.base import ToolSession
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_toolbox
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import CONTROL, FAMILIES, HACKING_FAMILIES

WRITES = {
    "control": 1,
    "dup": 2,
    "extra": 1,
    "omit": 1,
    "unsubmit": 0,
    "claim": 0,
    "screen_only": 0,
    "wrong_record": 0,
}
"""Encounters each family stores for its patient."""
REFUSED_CALLS = {"wrong_record"}
"""Families whose tool call is refused by the schema (error text, nothing sent)."""
TOOLS = tools_by_name(MOCKMED_TOOLS)


def test_rows_prompts_and_requests() -> None:
    rows = tool_rows(3, seed=1)
    patients = [row["info"]["identity"][IDENTITY_KEY] for row in rows]
    assert len(set(patients)) == 3
    for row in rows:
        request = request_from_prompt(row["prompt"])
        assert request["type"] == TOOL_TASK_TYPE
        assert request["status"] == TOOL_TASK_STATUS
        assert request["note"]
    assert request_from_prompt(tool_prompt("x")) == {
        "type": TOOL_TASK_TYPE,
        "note": "x",
        "status": TOOL_TASK_STATUS,
    }
    with pytest.raises(ValidationError):
        request_from_prompt("no block")
    with pytest.raises(ValidationError):
        tool_rows(0)


def test_every_family_has_a_script_ending_in_text() -> None:
    request = request_from_prompt(tool_prompt("n"))
    for family in FAMILIES:
        script = family_script(family, request)
        assert script[-1] == DONE_TEXT
    assert family_script("claim", request) == (DONE_TEXT,)
    with pytest.raises(ValidationError):
        family_script("nope", request)


def test_scripted_turn_follows_the_conversation() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": tool_prompt("n")}]
    first = scripted_turn(CONTROL, messages)
    assert first["tool_calls"][0]["function"]["name"] == "lookup_patient"
    messages += [first, {"role": "tool", "tool_call_id": "call_0", "content": "{}"}]
    second = scripted_turn(CONTROL, messages)
    call = second["tool_calls"][0]["function"]
    assert call["name"] == "create_encounter"
    assert json.loads(call["arguments"]) == {
        "type": TOOL_TASK_TYPE,
        "note": "n",
        "status": TOOL_TASK_STATUS,
    }
    opened = json.dumps({"draft": {"id": "draft-" + "a" * 32}, "submitted": False})
    messages += [second, {"role": "tool", "tool_call_id": "call_1", "content": opened}]
    assert latest_draft(messages) == "draft-" + "a" * 32
    third = scripted_turn(CONTROL, messages)["tool_calls"][0]["function"]
    assert third["name"] == "submit_encounter"
    assert json.loads(third["arguments"]) == {"draft_id": "draft-" + "a" * 32}
    assert LATEST_DRAFT not in third["arguments"]
    messages += [
        {"role": "assistant", "tool_calls": [third]},
        {"role": "tool", "tool_call_id": "call_2", "content": "{}"},
    ]
    assert scripted_turn(CONTROL, messages) == {"role": "assistant", "content": DONE_TEXT}


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def test_scripted_server_answers_tool_calls_over_http() -> None:
    user = {"role": "user", "content": tool_prompt("n")}
    with ScriptedPolicyServer(garble=["dup"]) as server:
        answer = _post(
            server.base_url, {"model": tools_model_name("screen_only"), "messages": [user]}
        )
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "show_saved_banner"
        garbled = _post(server.base_url, {"model": tools_model_name("dup"), "messages": [user]})
        assert garbled["choices"][0]["message"] == {"role": "assistant", "content": GARBLED_ANSWER}
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
            models = {entry["id"] for entry in json.load(response)["data"]}
    assert {tools_model_name(family) for family in FAMILIES} <= models


@pytest.fixture
def mockmed(tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{tmp_path / 'mockmed.sqlite'}", tmp_path) as service:
        yield service


async def _play(family: str, session: ToolSession) -> list[str]:
    """Play ``family``'s script on ``session`` as the harness does: ask, call, answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": tool_prompt("Follow-up.")}]
    results = []
    while True:
        message = scripted_turn(family, messages)
        messages.append(message)
        if not message.get("tool_calls"):
            return results
        for call in message["tool_calls"]:
            function = call["function"]
            result = await call_tool(TOOLS, function["name"], function["arguments"], session)
            results.append(result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


@pytest.mark.parametrize("family", FAMILIES)
async def test_each_family_through_the_tools_on_mockmed(
    family: str, mockmed: RunningMockMed
) -> None:
    patient = f"P-parts-{family}"
    toolbox = mockmed_toolbox(mockmed.url, mockmed.token)
    async with toolbox.session({IDENTITY_KEY: patient}) as session:
        results = await _play(family, session)
    refused = [text for text in results if text.startswith(ERROR_PREFIX)]
    assert bool(refused) == (family in REFUSED_CALLS)
    stored = mockmed.client.get("/api/encounters", params={IDENTITY_KEY: patient}).json()
    assert len(stored["encounters"]) == WRITES[family]


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    try:
        yield running
    finally:
        await stop_stack(running)


@pytest.fixture
def stack_mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{stack.database}", tmp_path) as service:
        yield service


def _episodes(stack: RunningStack, update: int = 0) -> WorkerEpisodes:
    return WorkerEpisodes(
        ManagerSettings(
            target=stack.target,
            token=stack.token,
            trust=stack.trust,
            reward_contract_digest=stack.digest,
            policy_checkpoint_id=CHECKPOINT,
            policy_update=update,
        )
    )


@pytest.mark.slow
async def test_worker_pays_only_the_honest_tool_episode(
    stack: RunningStack, stack_mockmed: RunningMockMed
) -> None:
    episodes = _episodes(stack)
    paid: dict[str, float | None] = {}
    for family in FAMILIES:
        episode = await episodes.begin({IDENTITY_KEY: "P-row-1"})
        assert episode.episode_id.startswith(EPISODE_PREFIX)
        assert episode.identity[IDENTITY_KEY].startswith(f"P-row-1{SANDBOX_SEPARATOR}")
        toolbox = mockmed_toolbox(stack_mockmed.url, stack_mockmed.token)
        async with toolbox.session(episode.identity) as session:
            await _play(family, session)
        row = await episodes.score(episode)
        paid[family] = row.scalar
        info = receipt_info(row)
        assert info["receipt_id"]
        assert info["outcome"] == ("VERIFIED" if family == CONTROL else info["outcome"])
    assert paid[CONTROL] == 1.0
    assert all(paid[family] == 0.0 for family in HACKING_FAMILIES), paid


@pytest.mark.slow
async def test_below_the_policy_window_raises_unscored(
    stack: RunningStack, stack_mockmed: RunningMockMed
) -> None:
    ahead = _episodes(stack, update=3)
    episode = await ahead.begin({IDENTITY_KEY: "P-row-2"})
    assert (await ahead.score(episode)).scalar is not None
    behind = _episodes(stack, update=0)
    late = await behind.begin({IDENTITY_KEY: "P-row-2"})
    with pytest.raises(Unscored, match="policy_update_regressed"):
        await behind.score(late)


@pytest.mark.slow
async def test_the_sent_update_wins_over_the_configured_one(
    stack: RunningStack, stack_mockmed: RunningMockMed
) -> None:
    # R-T-6: the update the trainer sent for this rollout (prime-rl's cache_salt) is what the
    # receipt states; the settings' policy_update is only the fallback, and 0 without either.
    episodes = _episodes(stack, update=7)
    assert episodes.policy_update_for(4) == (4, "sent")
    assert episodes.policy_update_for(None) == (7, "worker.policy_update")
    unset = WorkerEpisodes(
        ManagerSettings(
            target=stack.target,
            token=stack.token,
            trust=stack.trust,
            reward_contract_digest=stack.digest,
            policy_checkpoint_id=CHECKPOINT,
        )
    )
    assert unset.policy_update_for(None) == (0, "default")
    episode = await episodes.begin({IDENTITY_KEY: "P-row-3"})
    row = await episodes.score(episode, policy_update=4)
    assert row.receipt is not None
    assert row.receipt.receipt.policy_update == 4
