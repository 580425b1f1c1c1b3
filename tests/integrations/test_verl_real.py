"""CertifiedRewardManager through verl 0.9's real classes, against a real worker.

The manager is registered with verl's batch reward-manager registry, looked up by name the
way a batch caller does, built with verl's constructor arguments and called on a real
``verl.DataProto`` (left-padded prompts, right-padded responses of different lengths, uid and
extra_info columns, ``meta_info["global_steps"]``). Runs in .venv-integrations
(``make test-integrations``); skipped where verl is not installed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.verl_episodes import (
    Played,
    check_extra_info,
    manager_kwargs,
    play_batch,
    start_default_scoring_stack,
)
from support.worker_stack import RunningStack, stop_stack

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.verl import DEFAULT_NAME, CertifiedRewardManager, register_with_verl

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
from support.verl_batches import RESPONSE_LENGTHS, verl_batch  # noqa: E402
from verl.workers.reward_manager import get_reward_manager_cls  # noqa: E402


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """A worker over the default-scoring MockMed bundle."""
    running = await start_default_scoring_stack(data_dir)
    yield running
    await stop_stack(running)


def from_registry(stack: RunningStack) -> Any:
    """Register (twice: idempotent), then build the class verl's registry hands back."""
    assert register_with_verl() is CertifiedRewardManager
    assert register_with_verl() is CertifiedRewardManager
    cls = get_reward_manager_cls(DEFAULT_NAME)
    assert cls is CertifiedRewardManager
    return cls(
        tokenizer=None,
        num_examine=1,
        compute_score=None,
        reward_fn_key="data_source",
        **manager_kwargs(stack),
    )


async def test_reward_tensor_from_the_registry_on_a_real_dataproto(stack: RunningStack) -> None:
    manager = from_registry(stack)
    played = await play_batch(stack, "real")
    batch = verl_batch(played, global_steps=2)
    try:
        out = await asyncio.to_thread(manager, batch, return_dict=True)
    finally:
        manager.close()
    reward_tensor = out["reward_tensor"]
    assert reward_tensor.shape == batch.batch["responses"].shape
    assert reward_tensor.dtype == torch.float32
    # Each reward sits on its sample's last valid response token; every other entry is 0.
    for row, length in enumerate(RESPONSE_LENGTHS):
        assert reward_tensor[row, length - 1].item() == played.expected[row]
        others = torch.cat([reward_tensor[row, : length - 1], reward_tensor[row, length:]])
        assert torch.count_nonzero(others).item() == 0
    assert reward_tensor.sum(dim=-1).tolist() == [1.0, 1.0, 1.0, -1.0]
    check_extra_info(out["reward_extra_info"], played)


async def test_plain_call_returns_the_tensor(stack: RunningStack) -> None:
    manager = from_registry(stack)
    played = await play_batch(stack, "plain")
    try:
        reward_tensor = await asyncio.to_thread(manager, verl_batch(played, global_steps=1))
    finally:
        manager.close()
    assert isinstance(reward_tensor, torch.Tensor)
    assert reward_tensor.sum(dim=-1).tolist() == played.expected


async def test_verl_repeated_rows_with_a_dataset_id_are_refused(stack: RunningStack) -> None:
    # A dataset column copied to every rollout.n sample by verl's own repeat (R-T-4).
    manager = from_registry(stack)
    rows = Played(
        extra_infos=[{"episode_id": "episode.dataset.row.0"}, {"episode_id": "episode.row.1"}],
        uids=["uid-0", "uid-1"],
        expected=[],
        unscored=[],
        group_unscored=[],
    )
    batch = verl_batch(rows, global_steps=1).repeat(repeat_times=2, interleave=True)
    assert len(batch) == 4
    try:
        with pytest.raises(ValidationError, match=r"rollout\.n"):
            await asyncio.to_thread(manager, batch)
    finally:
        manager.close()
