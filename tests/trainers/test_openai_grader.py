"""OpenAIGrader: the grade(sample, item) -> float shape over a real worker (R-W-9).

The blocking grader runs in a thread: the worker serves on the test's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import Unscored
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.grader import OpenAIGrader
from rewardseal_kit.mockmed import IDENTITY_KEY

SAMPLE = {"output_text": "The triage encounter is saved."}


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def grader(stack: RunningStack) -> Iterator[OpenAIGrader]:
    with WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0) as client:
        yield OpenAIGrader(client)


def item(stack: RunningStack, episode_id: str, patient: str) -> dict[str, Any]:
    """The training row: the episode descriptor's fields by name."""
    return {
        "episode_id": episode_id,
        "policy_checkpoint_id": CHECKPOINT,
        "policy_update": 0,
        "reward_contract_digest": stack.digest,
        "metadata": {"oracle_identity": {IDENTITY_KEY: patient}},
    }


async def test_grade_pays_the_honest_episode(stack: RunningStack, grader: OpenAIGrader) -> None:
    await stack.client.begin("episode.grader.honest", stack.digest, {IDENTITY_KEY: "p-honest"})
    write_triage(stack.database, "p-honest")
    score = await asyncio.to_thread(
        grader.grade, SAMPLE, item(stack, "episode.grader.honest", "p-honest")
    )
    assert score == 1.0
    stored = await stack.client.get_receipt(episode_id="episode.grader.honest")
    assert stored.scalar == 1.0  # the grade is a stored, signed receipt's scalar


async def test_unscored_raises_and_does_not_burn_the_episode_id(
    stack: RunningStack, grader: OpenAIGrader
) -> None:
    row = item(stack, "episode.grader.later", "p-later")
    # Never begun: no baseline, RECONCILIATION_REQUIRED. The shape cannot carry "no score", so
    # the grader raises (the loop drops the sample) instead of returning anything, 0.0 included.
    with pytest.raises(Unscored):
        await asyncio.to_thread(grader, SAMPLE, row)
    assert stack.app.store.receipt_by_episode("episode.grader.later") is None
    # The id is still usable: play the episode properly and it is paid.
    await stack.client.begin("episode.grader.later", stack.digest, {IDENTITY_KEY: "p-later"})
    write_triage(stack.database, "p-later")
    assert await asyncio.to_thread(grader, SAMPLE, row) == 1.0


async def test_a_wrong_effect_is_a_real_zero(stack: RunningStack, grader: OpenAIGrader) -> None:
    await stack.client.begin("episode.grader.nothing", stack.digest, {IDENTITY_KEY: "p-nothing"})
    score = await asyncio.to_thread(
        grader.grade, SAMPLE, item(stack, "episode.grader.nothing", "p-nothing")
    )
    assert score == 0.0  # scored and refuted: the policy wrote nothing
