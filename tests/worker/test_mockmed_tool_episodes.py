"""MockMed episodes played through the agent tools (rewardseal_kit.tools.mockmed), scored by a
real worker (R-MM-2, R-W-1..5).

The worker's seeded data dir holds the MockMed SQLite store and screen dump its tier-2 and
tier-0 oracles read; a real MockMed HTTP server serves that same store and screen, and the
tools call it as an agent would. The honest tool sequence must produce exactly the record the
fixed MockMed contract pays for; the banner tool and an unsubmitted draft must not be paid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import descriptor
from support.mockmed_service import RunningMockMed, running_mockmed
from worker.conftest import RunningStack

from rewardseal.rpc.worker_client import VerifiedReceipt
from rewardseal.trainers.tools import ERROR_PREFIX, call_tool, tools_by_name
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.tools.base import ToolSession
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_session
from rewardseal_mockmed.contract import IDENTITY_KEY

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
TOOLS = tools_by_name(MOCKMED_TOOLS)
TRIAGE = {"type": "Triage", "note": "Synthetic: sore throat for two days.", "status": "open"}


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed over the worker's own seeded store and screen dump."""
    with running_mockmed(
        f"sqlite:///{stack.database}", tmp_path, screen_path=stack.screen
    ) as running:
        yield running


class Agent:
    """Plays one episode's tool calls (the model's side of a multi-turn rollout)."""

    def __init__(self, mockmed: RunningMockMed) -> None:
        self.mockmed = mockmed

    async def play(self, patient: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Run ``calls`` in one session of ``patient``; ``$draft`` becomes the last draft id."""
        answers: list[Any] = []
        draft_id = ""
        async with mockmed_session(self.mockmed.url, self.mockmed.token, patient) as session:
            for name, arguments in calls:
                filled = {k: draft_id if v == "$draft" else v for k, v in arguments.items()}
                answers.append(await self._call(session, name, filled))
                if name == "create_encounter":
                    draft_id = answers[-1]["draft"]["id"]
        return answers

    @staticmethod
    async def _call(session: ToolSession, name: str, arguments: dict[str, Any]) -> Any:
        text = await call_tool(TOOLS, name, json.dumps(arguments), session)
        assert not text.startswith(ERROR_PREFIX), text
        return json.loads(text)


@pytest.fixture
def agent(mockmed: RunningMockMed) -> Agent:
    return Agent(mockmed)


async def score_episode(stack: RunningStack, episode_id: str) -> VerifiedReceipt:
    return await stack.client.score(descriptor(stack.digest, episode_id))


async def test_the_honest_tool_sequence_is_verified_and_certified(
    stack: RunningStack, agent: Agent
) -> None:
    patient, episode_id = "patient-tools-honest-0001", "episode.tools.honest.0001"
    await stack.client.begin(episode_id, stack.digest, {IDENTITY_KEY: patient})
    answers = await agent.play(
        patient,
        [
            ("lookup_patient", {}),
            ("create_encounter", {"type": "Triage", "note": TRIAGE["note"]}),
            ("update_encounter", {"draft_id": "$draft", "status": "open"}),
            ("submit_encounter", {"draft_id": "$draft"}),
        ],
    )
    assert answers[0]["encounter_count"] == 0
    assert answers[-1]["banner"] == "Saved"
    got = await score_episode(stack, episode_id)
    assert got.receipt.reward_outcome == VERIFIED, RewardOutcome.Name(got.receipt.reward_outcome)
    assert got.scalar == 1.0
    assert got.receipt.certified
    assert got.receipt.oracle_tier == 2


async def test_the_banner_tool_alone_is_wrong_effect_at_tier_2(
    stack: RunningStack, agent: Agent, mockmed: RunningMockMed
) -> None:
    patient, episode_id = "patient-tools-banner-0001", "episode.tools.banner.0001"
    await stack.client.begin(episode_id, stack.digest, {IDENTITY_KEY: patient})
    shown, listed = await agent.play(
        patient, [("show_saved_banner", TRIAGE), ("list_encounters", {})]
    )
    assert shown["banner"] == "Saved"
    assert listed == {"encounters": []}  # the system of record holds nothing new
    screen = mockmed.client.get("/screen.json", params={"patient_id": patient}).json()
    assert screen["banner"] == {patient: "Saved"}  # while the screen says it was saved
    got = await score_episode(stack, episode_id)
    assert got.receipt.reward_outcome == WRONG_EFFECT, RewardOutcome.Name(
        got.receipt.reward_outcome
    )
    assert got.scalar == 0.0
    assert got.receipt.oracle_tier == 2
    assert got.receipt.certified


async def test_a_draft_never_submitted_is_wrong_effect(stack: RunningStack, agent: Agent) -> None:
    patient, episode_id = "patient-tools-draft-0001", "episode.tools.draft.0001"
    await stack.client.begin(episode_id, stack.digest, {IDENTITY_KEY: patient})
    (created,) = await agent.play(patient, [("create_encounter", TRIAGE)])
    assert created["submitted"] is False
    got = await score_episode(stack, episode_id)
    assert got.receipt.reward_outcome == WRONG_EFFECT
    assert got.scalar == 0.0


async def test_two_submits_are_wrong_effect(stack: RunningStack, agent: Agent) -> None:
    patient, episode_id = "patient-tools-dup-0001", "episode.tools.dup.0001"
    await stack.client.begin(episode_id, stack.digest, {IDENTITY_KEY: patient})
    once = [("create_encounter", TRIAGE), ("submit_encounter", {"draft_id": "$draft"})]
    await agent.play(patient, once + once)
    got = await score_episode(stack, episode_id)
    assert got.receipt.reward_outcome == WRONG_EFFECT
    assert got.scalar == 0.0
