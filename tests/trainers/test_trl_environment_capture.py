"""CertifiedToolEpisodes with the integrity capture (R-I-3, R-I-5) on real parts: the optimizer
worker (``sql``), an independent sentinel worker (``rest`` channel, its own data directory and
key) reading the same MockMed, a real control plane, and the MockMed tools played as TRL plays
an environment's methods.

``reset`` opens each episode on the sentinel at the bound trainer's step, before the first tool
call; the scored batch reaches the capture with the optimizer's own rewards, and each row's
sentinel observation is the sentinel's signed receipt for the same episode. That is what
``IntegrityGate`` audits (its boundaries read the capture), so the gate needs nothing more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import create_binding, make_capture
from support.integrity_trainer import trainer_client as control_client
from support.mockmed_service import RunningMockMed
from support.worker_stack import RunningStack
from trainers.test_integrity_capture import mockmed, optimizer, sentinel
from trainers.test_trl_environment import (
    TrainerState,
    banner_only,
    episodes_for,
    honest,
    reset,
    score,
)

from rewardseal.core.errors import ValidationError
from rewardseal.rpc.worker_client import WorkerClient

__all__ = ["mockmed", "optimizer", "sentinel"]  # the fixtures, shared with the capture tests


@dataclass
class Trainer:
    """What ``CertifiedToolEpisodes.bind`` reads of a trainer."""

    state: TrainerState


def _worker(stack: RunningStack) -> WorkerClient:
    return WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=5.0)


async def test_tool_episodes_feed_the_capture_and_the_sentinel_judges_the_same_episodes(
    optimizer: RunningStack,
    mockmed: RunningMockMed,
    sentinel: RunningStack,
    integrity_control: ControlStack,
    tmp_path: Path,
) -> None:
    binding = await create_binding(integrity_control)
    with (
        _worker(optimizer) as client,
        _worker(sentinel) as guard,
        control_client(integrity_control) as cc,
    ):
        capture = make_capture(
            cc, binding, tmp_path / "buffer", sentinel=guard, sentinel_digest=sentinel.digest
        )
        episodes = episodes_for(client, optimizer, mockmed, capture=capture)
        with pytest.raises(ValidationError, match="bind"):
            episodes.environment().reset(oracle_identity={"patient_id": "patient-cap-0000"})
        episodes.bind(Trainer(TrainerState(global_step=2)))
        envs = [
            await reset(episodes, patient)
            for patient in (
                "patient-cap-0001",
                "patient-cap-0001",
                "patient-cap-0002",
                "patient-cap-0002",
            )
        ]
        for env, play in zip(envs, (honest, banner_only, honest, banner_only), strict=True):
            await play(env)
        rewards = await score(episodes, envs, trainer_state=TrainerState(global_step=2))
        rows = capture.last_rows
        shard_id = await asyncio.to_thread(capture.seal, 2)
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    episode_ids = episodes.reward.metadata_columns()["reward_episode_id"]
    assert [row.episode_id for row in rows] == episode_ids
    assert [row.optimizer_raw for row in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [row.group_id for row in rows] == ["2:0", "2:0", "2:1", "2:1"]
    # The sentinel opened the same episodes at reset and judged them with its own key.
    outcomes = [row.sentinel.outcome if row.sentinel else None for row in rows]
    assert outcomes == ["accepted", "refused", "accepted", "refused"]
    for row, episode_id in zip(rows, episode_ids, strict=True):
        assert row.sentinel is not None
        got = await sentinel.client.get_receipt(episode_id=episode_id)
        assert got.receipt.receipt_id == row.sentinel.receipt_id
    assert shard_id is not None
