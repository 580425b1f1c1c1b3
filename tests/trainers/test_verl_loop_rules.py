"""The verl reward-loop manager's rules without verl or torch (R-T-1, R-T-3, R-T-4, R-T-5).

The pure group fill that ``assemble_rm_scores`` runs on the driver, the batch-wide episode id
check, where the settings come from in verl 0.9.1's config, and the per-sample answer of
``run_single`` when the worker cannot be reached. The verl class itself is exercised in
tests/integrations/test_verl_reward_loop.py.
"""

from __future__ import annotations

import importlib.util
import math
import socket
from types import SimpleNamespace
from typing import Any

import pytest

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.trainers.groups import METADATA_COLUMNS
from rewardseal.trainers.verl import ALL_UNSCORED_GROUP_REWARD
from rewardseal.trainers.verl import loop as verl_loop
from rewardseal.trainers.verl.loop import (
    LOOP_EXTRA_COLUMNS,
    LoopScorer,
    check_episode_ids,
    fill_loop_scores,
    register_with_verl_reward_loop,
    reward_loop_manager_class,
    settings_from_config,
)

DIGEST = "sha256:" + "0" * 64
BASE: dict[str, Any] = {
    "worker_target": "127.0.0.1:1",
    "token": "t",
    "worker_public_key": "ab" * 32,
    "reward_contract_digest": DIGEST,
    "policy_checkpoint_id": "policy.checkpoint.loop.0001",
}


def test_unscored_samples_take_their_uid_groups_scored_mean() -> None:
    # uid groups interleaved, as verl's balance_batch may leave them.
    scores = [1.0, None, -1.0, float("nan"), 0.5]
    uids = ["a", "b", "a", "b", "b"]
    assert fill_loop_scores(scores, uids) == [1.0, 0.5, -1.0, 0.5, 0.5]


def test_a_group_with_no_scored_member_is_group_constant() -> None:
    filled = fill_loop_scores([None, float("nan"), 1.0, None], ["x", "x", "y", "y"])
    assert filled == [ALL_UNSCORED_GROUP_REWARD, ALL_UNSCORED_GROUP_REWARD, 1.0, 1.0]
    # Every member equals the group's mean: zero advantage under GRPO/RLOO.
    group = filled[:2]
    assert all(value - sum(group) / len(group) == 0.0 for value in group)
    assert not any(math.isnan(value) for value in filled)


def test_fill_refuses_misaligned_columns_and_accepts_unhashable_uids() -> None:
    with pytest.raises(ValidationError, match="3 reward scores for 2 uids"):
        fill_loop_scores([1.0, None, 0.0], ["a", "a"])
    assert fill_loop_scores([None, 2.0], [["u"], ["u"]]) == [2.0, 2.0]


def test_a_repeated_episode_id_in_the_batch_is_refused() -> None:
    check_episode_ids([{"episode_id": "e.1"}, {"episode_id": "e.2"}, None])
    shared = {"episode_id": "episode.from.dataset.row.3"}
    with pytest.raises(ValidationError, match="R-T-4") as caught:
        check_episode_ids([shared, shared])
    assert caught.value.reason == "duplicate_episode_id"


def test_settings_come_from_reward_reward_kwargs() -> None:
    # verl 0.9.1: config.reward.reward_kwargs (a DictConfig is a Mapping; a namespace works too).
    config = SimpleNamespace(reward={"reward_kwargs": {**BASE, "policy_update": 4}})
    settings = settings_from_config(
        config, {"reward_router_address": None, "reward_model_tokenizer": None}
    )
    assert settings.target == "127.0.0.1:1"
    assert settings.policy_update == 4
    assert settings.require_certified
    # Keyword arguments given to the constructor win over the config.
    assert settings_from_config(config, {"policy_update": 9}).policy_update == 9
    assert settings_from_config(None, BASE).policy_checkpoint_id == BASE["policy_checkpoint_id"]
    with pytest.raises(ValidationError, match="unknown reward_kwargs"):
        settings_from_config({"reward": {"reward_kwargs": {**BASE, "url": "x"}}}, {})
    with pytest.raises(ValidationError, match="token"):
        settings_from_config({"reward": {}}, {})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_unreachable_worker_gives_none_and_aligned_columns() -> None:
    scorer = LoopScorer()
    kwargs = {**BASE, "worker_target": f"127.0.0.1:{free_port()}", "timeout_seconds": 2.0}
    scorer._init_scorer(settings_from_config(None, kwargs))
    try:
        answer = await scorer.score_one(
            {"episode_id": "episode.loop.gone.0"}, "uid-0", {"global_steps": 1}
        )
    finally:
        await scorer.aclose()
    assert answer["reward_score"] is None
    info = answer["reward_extra_info"]
    assert set(info) == set(METADATA_COLUMNS) | set(LOOP_EXTRA_COLUMNS)
    assert info["reward_receipt_id"] == ""
    assert info["reward_outcome"] == "ERROR"
    assert info["reward_error"] == "unavailable"
    assert info["reward_unscored"] is True
    assert info["reward_episode_id"] == "episode.loop.gone.0"


async def test_a_sample_without_its_own_episode_id_or_step_is_refused() -> None:
    scorer = LoopScorer()
    scorer._init_scorer(settings_from_config(None, BASE))
    with pytest.raises(ValidationError, match="R-T-4"):
        await scorer.score_one({"oracle_identity": {}}, "uid-0", {"global_steps": 1})
    with pytest.raises(ValidationError, match="no policy update"):
        await scorer.score_one({"episode_id": "episode.loop.nostep"}, "uid-0", {})


def test_without_verl_the_class_and_registration_say_so() -> None:
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here; tests/integrations/test_verl_reward_loop.py runs it")
    for build in (reward_loop_manager_class, register_with_verl_reward_loop):
        with pytest.raises(RewardSealError, match="verl is not installed") as caught:
            build()
        assert caught.value.reason == "verl_missing"
    with pytest.raises(AttributeError):
        verl_loop.NoSuchThing  # noqa: B018 (the lazy attribute hook refuses other names)
