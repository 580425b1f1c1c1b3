"""Capture from the verl batch reward manager and the reward-loop scorer (R-I-3, R-I-5), off by
default, on a real worker and a real control plane, without verl or torch (``score_batch`` and
``score_one`` with the responses' texts): the same played batch pays the same with and without
capture, and the rows carry the optimizer's own numbers (None for the unscored sample, never
its group fill)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.control import ControlStack
from support.integrity_trainer import create_binding, make_capture
from support.integrity_trainer import trainer_client as control_client
from support.verl_episodes import manager_kwargs, play_batch
from support.worker_stack import RunningStack

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.verl import CertifiedRewardManager
from rewardseal.trainers.verl.loop import LoopScorer, settings_from_config


def _plain(extra_info: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {name: values for name, values in extra_info.items() if name != "reward_episode_id"}


async def test_the_verl_manager_feeds_a_capture_without_changing_a_reward(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack))
    assert manager.capture is None  # off by default
    texts = [f"response {index}" for index in range(4)]
    try:
        played = await play_batch(stack, "plain")
        plain = await asyncio.to_thread(
            manager.score_batch, played.extra_infos, played.uids, {"global_steps": 6}
        )
        with control_client(integrity_control) as client:
            manager.capture = make_capture(client, binding, tmp_path / "buffer")
            captured_batch = await play_batch(stack, "capt")
            with pytest.raises(ValidationError, match="response text"):
                await asyncio.to_thread(
                    manager.score_batch,
                    captured_batch.extra_infos,
                    captured_batch.uids,
                    {"global_steps": 6},
                )
            again = await play_batch(stack, "again")
            captured = await asyncio.to_thread(
                lambda: manager.score_batch(
                    again.extra_infos, again.uids, {"global_steps": 6}, texts=texts
                )
            )
            rows = manager.capture.last_rows
            shard_id = await asyncio.to_thread(manager.capture.seal, 6)
    finally:
        manager.close()
    assert plain.rewards == captured.rewards == played.expected
    assert _plain(plain.extra_info) == _plain(captured.extra_info)
    assert [row.optimizer_raw for row in rows] == [1.0, None, 1.0, -1.0]
    # -1.0 lies outside the mapping's [0, 1]: a row without a mapped value, not an exception.
    assert [row.optimizer_mapped for row in rows] == [1.0, None, 1.0, None]
    assert [row.group_id for row in rows] == again.uids
    assert [row.output_digest for row in rows] == [output_digest(text) for text in texts]
    assert all(row.policy_update == 6 and row.sentinel is None for row in rows)
    assert shard_id is not None


async def test_the_reward_loop_scorer_feeds_a_capture_one_sample_at_a_time(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    scorer = LoopScorer()
    scorer._init_scorer(settings_from_config(None, manager_kwargs(stack)))
    assert scorer.capture is None  # off by default
    step = {"global_steps": 2}
    try:
        played = await play_batch(stack, "loop-plain")
        plain = [
            await scorer.score_one(info, uid, step)
            for info, uid in zip(played.extra_infos, played.uids, strict=True)
        ]
        with control_client(integrity_control) as client:
            scorer.capture = make_capture(client, binding, tmp_path / "buffer")
            again = await play_batch(stack, "loop-capt")
            captured = []
            for index, (info, uid) in enumerate(zip(again.extra_infos, again.uids, strict=True)):
                captured.append(await scorer.score_one(info, uid, step, text=f"response {index}"))
                assert [row.episode_id for row in scorer.capture.last_rows] == [info["episode_id"]]
            shard_id = await asyncio.to_thread(scorer.capture.seal, 2)
            shard = await asyncio.to_thread(client.verify_signal_shard, shard_id or "")
    finally:
        await scorer.aclose()
    assert [a["reward_score"] for a in plain] == [a["reward_score"] for a in captured]
    assert [_loop_columns(a) for a in plain] == [_loop_columns(a) for a in captured]
    assert shard.captured == 4


def _loop_columns(answer: dict[str, Any]) -> dict[str, Any]:
    skip = {"reward_episode_id", "reward_receipt_id"}
    return {k: v for k, v in answer["reward_extra_info"].items() if k not in skip}
