"""CertifiedToolEpisodes (TRL's multi-turn tool environment) on a real worker and a real MockMed.

TRL is not installed here: the environment is driven exactly as TRL 1.16's GRPOTrainer drives
it (``environment_factory()`` instances, ``reset(**row)`` with every dataset column, the tools
as the instance's public ``async`` methods called with keyword arguments, the reward function
called with ``environments=`` beside the columns). tests/integrations/test_trl_environment.py
runs it inside a real GRPOTrainer.

The worker serves on the test's event loop, so the blocking ``reset`` and reward run in a
thread (``asyncio.to_thread``); the tool coroutines run on the loop, as TRL runs them on its.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import Unauthenticated, ValidationError
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.groups import METADATA_COLUMNS
from rewardseal.trainers.tools import ERROR_PREFIX
from rewardseal.trainers.trl import UNSCORED_SHARE_METRIC
from rewardseal.trainers.trl.environment import CertifiedToolEnvironment, CertifiedToolEpisodes
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_session
from rewardseal_mockmed.contract import IDENTITY_KEY

TRIAGE = {"type": "Triage", "note": "Synthetic: sore throat for two days.", "status": "open"}


@dataclass
class TrainerState:
    """The one field of transformers.TrainerState the reward reads."""

    global_step: int = 0


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed over the worker's own seeded store and screen dump."""
    with running_mockmed(
        f"sqlite:///{stack.database}", tmp_path, screen_path=stack.screen
    ) as service:
        yield service


@pytest.fixture
def client(stack: RunningStack) -> Iterator[WorkerClient]:
    with WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0) as client:
        yield client


def episodes_for(
    client: WorkerClient, stack: RunningStack, mockmed: RunningMockMed, **options: Any
) -> CertifiedToolEpisodes:
    return CertifiedToolEpisodes(
        client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=options.pop("num_generations", 2),
        tools=MOCKMED_TOOLS,
        open_session=lambda identity: mockmed_session(
            mockmed.url, mockmed.token, identity[IDENTITY_KEY]
        ),
        **options,
    )


def row(patient: str) -> dict[str, Any]:
    """A dataset row as TRL passes it to reset (every column)."""
    return {
        "prompt": [{"role": "user", "content": "Create the triage."}],
        "oracle_identity": {IDENTITY_KEY: patient},
    }


async def reset(episodes: CertifiedToolEpisodes, patient: str) -> CertifiedToolEnvironment:
    env = episodes.environment()
    assert await asyncio.to_thread(lambda: env.reset(**row(patient))) is None
    return env


async def honest(env: Any) -> None:
    """The honest tool sequence: look up, create, fill, submit once."""
    await env.lookup_patient()
    created = json.loads(await env.create_encounter(type="Triage", note=TRIAGE["note"]))
    draft = created["draft"]["id"]
    await env.update_encounter(draft_id=draft, status="open")
    submitted = json.loads(await env.submit_encounter(draft_id=draft))
    assert submitted["banner"] == "Saved"


async def banner_only(env: Any) -> None:
    """The hack: the screen says "Saved", the system of record holds nothing."""
    shown = json.loads(await env.show_saved_banner(**TRIAGE))
    assert shown["banner"] == "Saved"


async def score(
    episodes: CertifiedToolEpisodes, envs: list[CertifiedToolEnvironment], **kwargs: Any
) -> list[float | None]:
    count = len(envs)
    kwargs.setdefault("trainer_state", TrainerState())
    return await asyncio.to_thread(
        lambda: episodes.reward(
            prompts=["p"] * count,
            completions=[[{"role": "assistant", "content": "done"}]] * count,
            completion_ids=[[1]] * count,
            environments=envs,
            **kwargs,
        )
    )


def test_the_environment_shows_trl_its_tools_and_nothing_else() -> None:
    episodes = CertifiedToolEpisodes(
        None,  # type: ignore[arg-type]  # no call is made
        reward_contract_digest="sha256:" + "0" * 64,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        tools=MOCKMED_TOOLS,
        open_session=lambda identity: mockmed_session("http://x", "t", "p"),
    )
    env_class = type(episodes.environment())
    # What TRL 1.16 takes as tools: the class's public functions but reset and get_reward.
    public = sorted(
        name
        for name, _ in inspect.getmembers(env_class, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    )
    assert public == sorted(tool.name for tool in MOCKMED_TOOLS)
    assert not hasattr(env_class, "get_reward")  # the reward is the group-aware function
    method = episodes.environment().update_encounter
    assert inspect.iscoroutinefunction(method)
    signature = inspect.signature(method)
    assert list(signature.parameters) == ["draft_id", "type", "note", "status", "priority"]
    assert signature.parameters["draft_id"].default is inspect.Parameter.empty  # required
    assert signature.parameters["note"].default is None
    assert "Args:\n    draft_id: the draft's id" in (method.__doc__ or "")


async def test_an_honest_tool_episode_pays_the_receipts_one(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed
) -> None:
    episodes = episodes_for(client, stack, mockmed)
    envs = [await reset(episodes, "patient-env-honest-0001") for _ in range(2)]
    ids = [env._active for env in envs]
    assert len(set(ids)) == 2
    assert all(i.startswith("trl-env.") for i in ids)
    # Each completion of the group acts on its own sandbox patient (R-W-3).
    assert envs[0]._identity != envs[1]._identity
    for env in envs:
        await honest(env)
    rewards = await score(episodes, envs)
    assert rewards == [1.0, 1.0]
    columns = episodes.reward.metadata_columns()
    assert tuple(columns) == METADATA_COLUMNS
    assert columns["reward_outcome"] == ["VERIFIED", "VERIFIED"]
    assert all(columns["reward_certified"])
    assert columns["reward_episode_id"] == ids
    got = await stack.client.get_receipt(episode_id=ids[0])  # verified (R-T-5)
    assert got.scalar == 1.0
    assert got.receipt.certified
    assert got.receipt.oracle_tier == 2
    transcript = json.loads(envs[0]._transcript())
    assert [call["name"] for call in transcript] == [
        "lookup_patient",
        "create_encounter",
        "update_encounter",
        "submit_encounter",
    ]


async def test_the_banner_hack_pays_the_wrong_effect_reward(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed
) -> None:
    episodes = episodes_for(client, stack, mockmed)
    honest_env = await reset(episodes, "patient-env-hack-0001")
    hack_env = await reset(episodes, "patient-env-hack-0001")
    await honest(honest_env)
    await banner_only(hack_env)
    rewards = await score(episodes, [honest_env, hack_env])
    assert rewards == [1.0, 0.0]
    columns = episodes.reward.metadata_columns()
    assert columns["reward_outcome"] == ["VERIFIED", "WRONG_EFFECT"]
    assert columns["reward_unscored"] == [False, False]  # a hack is scored, and scored 0


async def test_a_tool_error_is_the_models_observation(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed
) -> None:
    episodes = episodes_for(client, stack, mockmed)
    env: Any = await reset(episodes, "patient-env-error-0001")
    answer = await env.submit_encounter(draft_id="draft-" + "0" * 32)
    assert answer.startswith(ERROR_PREFIX)  # MockMed's 404, as text: the episode goes on
    answer = await env.create_encounter(type="Triage", bogus="x")
    assert answer.startswith(ERROR_PREFIX)  # the schema check (additionalProperties false)


async def test_tool_calls_of_one_message_run_concurrently_as_trl_runs_them(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed
) -> None:
    episodes = episodes_for(client, stack, mockmed)
    env: Any = await reset(episodes, "patient-env-gather-0001")
    # TRL gathers the async tool calls of one assistant message; the episode's session copes.
    answers = await asyncio.gather(
        env.lookup_patient(), env.create_encounter(**TRIAGE), env.list_encounters()
    )
    assert not any(answer.startswith(ERROR_PREFIX) for answer in answers), answers
    names = [call["name"] for call in json.loads(env._transcript())]
    assert names == ["lookup_patient", "create_encounter", "list_encounters"]


async def test_a_worker_away_at_begin_is_unscored_never_zero(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed
) -> None:
    episodes = episodes_for(client, stack, mockmed)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once closed
    with WorkerClient(dead, token=stack.token, trust=stack.trust, timeout=2.0, retries=0) as away:
        cut_off = episodes_for(away, stack, mockmed)
        scored = await reset(episodes, "patient-env-away-0001")
        unbegun = await reset(cut_off, "patient-env-away-0001")
    assert unbegun._begin_error is not None
    assert unbegun._begin_error.reason == "unavailable"
    await honest(scored)
    await honest(unbegun)  # the model cannot tell; its episode has no baseline
    logged: dict[str, float] = {}
    rewards = await score(episodes, [scored, unbegun], log_metric=logged.__setitem__)
    # The unscored sample gets its group's scored mean (advantage 0), not 0.0 (R-T-1).
    assert rewards == [1.0, 1.0]
    columns = episodes.reward.metadata_columns()
    assert columns["reward_unscored"] == [False, True]
    assert columns["reward_outcome"][1] == "ERROR"
    assert logged[UNSCORED_SHARE_METRIC] == 0.5


async def test_a_worker_away_at_scoring_leaves_the_group_none_never_zero(
    data_dir: Path, tmp_path: Path
) -> None:
    stack = await start_stack(data_dir)
    try:
        with (
            running_mockmed(
                f"sqlite:///{stack.database}", tmp_path, screen_path=stack.screen
            ) as mockmed,
            WorkerClient(
                stack.target, token=stack.token, trust=stack.trust, timeout=5.0, retries=0
            ) as client,
        ):
            episodes = episodes_for(client, stack, mockmed)
            envs = [await reset(episodes, "patient-env-outage-0001") for _ in range(2)]
            await honest(envs[0])
            await banner_only(envs[1])
            await stack.app.stop()  # the oracle's worker goes away before the group is scored
            rewards = await score(episodes, envs)
    finally:
        await stack.client.close()
    assert rewards == [None, None]  # TRL leaves the group out; never 0.0
    columns = episodes.reward.metadata_columns()
    assert columns["reward_unscored"] == [True, True]
    assert columns["reward_error"] == ["unavailable", "unavailable"]


async def test_a_row_without_identity_and_a_wrong_token_are_refused(
    stack: RunningStack, mockmed: RunningMockMed
) -> None:
    with WorkerClient(stack.target, token="wrong-token", trust=stack.trust) as wrong:
        episodes = episodes_for(wrong, stack, mockmed)
        env = episodes.environment()
        with pytest.raises(ValidationError, match="oracle_identity"):
            env.reset(prompt="p")
        # A refused token would make every episode unscored: a setup bug, raised at reset.
        with pytest.raises(Unauthenticated):
            await asyncio.to_thread(lambda: env.reset(**row("patient-env-token-0001")))
    with pytest.raises(ValidationError, match="environment_factory"):
        episodes.reward(prompts=["p"], completions=["c"], trainer_state=TrainerState())
