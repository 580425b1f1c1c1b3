"""A real ``trl.GRPOTrainer`` run on CPU, paid by CertifiedRewardFunction (docs/spec.md §11).

Nothing is downloaded: the model is a two-layer Llama with hidden size 32 and a character-level
tokenizer, both built here. The policy's completions are therefore noise; the MockMed actor
executes them (an unparseable report writes nothing), the worker reads its seeded SQLite system
of record through the tier-2 oracle, and the trainer is paid the verified receipts. The test
checks what the trainer got, not what the noise policy learned: the steps ran, the reward
function saw TRL's trainer_state, every reward is a verified receipt's scalar (or its group's
fill for an unscored sample, never 0.0), the metadata columns are aligned and episode ids unique.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.groups import METADATA_COLUMNS
from rewardseal.trainers.trl import (
    PAID_SHARE_METRIC,
    SCORED_SHARE_METRIC,
    CertifiedRewardFunction,
)
from rewardseal_kit.actors import MockMedActor
from rewardseal_kit.tiny_models import char_tokenizer, tiny_grpo_config, tiny_llama
from rewardseal_mockmed.contract import IDENTITY_KEY

# Only the integrations venv has trl (and torch, transformers, datasets, tokenizers).
pytest.importorskip("trl")

MAX_STEPS = 2
NUM_GENERATIONS = 2
BATCH = 4  # completions per step: two prompts, two generations each


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub: everything is built in code, and a download attempt fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def tiny_tokenizer() -> Any:
    """The character-level tokenizer, left-padded as TRL generates."""
    return char_tokenizer(padding_side="left")


@dataclass
class Call:
    """What one reward call saw and returned."""

    step: int
    rewards: list[float | None]
    columns: dict[str, list[Any]]


class RecordingReward(CertifiedRewardFunction):
    """The real reward function, recording each call's step, rewards and columns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[Call] = []

    def __call__(self, prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        from transformers import TrainerState

        state = kwargs["trainer_state"]
        assert isinstance(state, TrainerState)  # TRL handed over its own state
        rewards = super().__call__(prompts, completions, **kwargs)
        self.calls.append(Call(state.global_step, list(rewards), self.metadata_columns()))
        return rewards


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{stack.database}", tmp_path) as service:
        yield service


@pytest.fixture
def client(stack: RunningStack) -> Iterator[WorkerClient]:
    """The blocking client the trainer's reward function calls from the training thread."""
    with WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0) as client:
        yield client


@pytest.mark.slow
async def test_grpo_trainer_is_paid_verified_receipts(
    stack: RunningStack, client: WorkerClient, mockmed: RunningMockMed, tmp_path: Path
) -> None:
    from datasets import Dataset
    from trl import GRPOTrainer

    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer)
    rows = [f"patient-grpo-{index:04d}" for index in range(4)]
    dataset = Dataset.from_list(
        [
            {
                "prompt": f"Create one Triage encounter for {patient}. Answer with JSON:",
                "oracle_identity": {IDENTITY_KEY: patient},
                "episode_id": f"grpo-row-{index:04d}",
            }
            for index, patient in enumerate(rows)
        ]
    )
    reward = RecordingReward(
        client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=NUM_GENERATIONS,
        actor=MockMedActor(mockmed.url, mockmed.token),
        name="mockmed_certified",
    )
    args = tiny_grpo_config(
        tmp_path / "grpo", max_steps=MAX_STEPS, batch=BATCH, num_generations=NUM_GENERATIONS
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    # The worker serves on this event loop; the trainer (and its blocking reward calls) runs in a
    # thread beside it.
    await asyncio.to_thread(trainer.train)

    assert trainer.state.global_step == MAX_STEPS
    assert [call.step for call in reward.calls] == list(range(MAX_STEPS))
    # TRL logged our reward under its name, and the paid share pushed through log_metric.
    mean_key = "rewards/mockmed_certified/mean"
    logged = [entry for entry in trainer.state.log_history if mean_key in entry]
    assert len(logged) == MAX_STEPS
    for entry, call in zip(logged, reward.calls, strict=True):
        paid = [value for value in call.rewards if value is not None]
        assert entry[mean_key] == pytest.approx(sum(paid) / len(paid))
        # Paid: a receipt's own positive scalar (never a fill); scored: any receipt scalar.
        paid_receipts = sum(
            1
            for value, unscored in zip(call.rewards, call.columns["reward_unscored"], strict=True)
            if not unscored and value
        )
        assert entry[PAID_SHARE_METRIC] == pytest.approx(paid_receipts / BATCH)
        assert entry[SCORED_SHARE_METRIC] == pytest.approx(
            1.0 - sum(call.columns["reward_unscored"]) / BATCH
        )

    episode_ids: list[str] = []
    for call in reward.calls:
        columns = call.columns
        assert tuple(columns) == METADATA_COLUMNS
        assert all(len(values) == BATCH for values in columns.values())
        assert columns["reward_error"] == [""] * BATCH  # every completion opened and was scored
        assert all(columns["reward_certified"])
        for index, episode_id in enumerate(columns["reward_episode_id"]):
            got = await stack.client.get_receipt(episode_id=episode_id)  # verified (R-T-5)
            assert got.receipt.policy_update == call.step
            assert got.receipt.certified
            if got.unscored:
                # Never 0.0: the group's scored mean, or None for a group with none scored.
                group = index // NUM_GENERATIONS
                mates = [
                    value
                    for offset, value in enumerate(call.rewards)
                    if offset // NUM_GENERATIONS == group
                    and not columns["reward_unscored"][offset]
                    and value is not None
                ]
                assert call.rewards[index] == (sum(mates) / len(mates) if mates else None)
            else:
                assert call.rewards[index] == got.scalar
        episode_ids += columns["reward_episode_id"]
    assert len(set(episode_ids)) == len(episode_ids) == MAX_STEPS * BATCH
    assert all(episode_id.startswith("grpo-row-") for episode_id in episode_ids)
