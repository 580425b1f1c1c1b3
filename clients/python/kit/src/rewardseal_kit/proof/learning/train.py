"""The learning proof's training: a supervised warm start, then two GRPO runs from it.

:func:`warm_start` fits the tiny policy (:func:`rewardseal_kit.tiny_models.tiny_llama`, a
character-level tokenizer) to a synthetic mix of honest writes and hacks
(:data:`~rewardseal_kit.proof.learning.task.WARM_START_MIX`) with a plain cross-entropy loop on
the completion tokens. :func:`grpo_run` trains a copy of the warm-started policy with TRL's real
``GRPOTrainer`` on the given reward, the same seed, tasks and step count for both runs.

Everything here is fixed by :class:`LearningConfig` before a run; nothing is chosen from
results. Needs torch, transformers, trl and datasets (the integrations venv).
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.rpc.worker_client import WorkerClient
from rewardseal_kit.proof.learning.config import LearningConfig
from rewardseal_kit.proof.learning.rewards import LearningReward, Pays, RecordingReward
from rewardseal_kit.proof.learning.task import TaskRow, task_rows, warm_start_examples
from rewardseal_kit.proof.ui_actor import MockMedUIActor
from rewardseal_mockmed.contract import IDENTITY_KEY

__all__ = ["CHECKPOINT", "RunResult", "grpo_run", "warm_start"]

CHECKPOINT: Final = "policy_checkpoint_learning_0"
_IGNORE: Final = -100


def _encode(tokenizer: Any, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    ids = [*prompt_ids, *completion_ids, tokenizer.eos_token_id]
    labels = [_IGNORE] * len(prompt_ids) + [*completion_ids, tokenizer.eos_token_id]
    return ids, labels


def warm_start(config: LearningConfig) -> tuple[Any, Any, dict[str, Any]]:
    """The tiny policy and its tokenizer after the supervised warm start; what it trained on.

    Seeded by ``config.seed`` (torch and the mix); its own task rows (seed + 1), not the GRPO
    runs' rows.
    """
    import torch

    from rewardseal_kit.tiny_models import char_tokenizer, tiny_llama

    started = time.monotonic()
    tokenizer = char_tokenizer(padding_side="left")
    longest = 128 + config.max_completion_length
    model = tiny_llama(
        tokenizer,
        max_position_embeddings=longest,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.layers,
    )
    rows = task_rows(config.warm_start_rows, config.seed + 1)
    examples = warm_start_examples(rows, config.seed + 1)
    encoded = [_encode(tokenizer, prompt, completion) for prompt, completion, _ in examples]
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warm_start_learning_rate)
    model.train()
    losses: list[float] = []
    for _ in range(config.warm_start_steps):
        chosen = rng.sample(encoded, config.warm_start_batch)
        width = max(len(ids) for ids, _ in chosen)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in chosen])
        labels = torch.tensor([lab + [_IGNORE] * (width - len(lab)) for _, lab in chosen])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in chosen])
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    families: dict[str, int] = {}
    for _, _, family in examples:
        families[family] = families.get(family, 0) + 1
    summary = {
        "examples": len(examples),
        "families": dict(sorted(families.items())),
        "steps": config.warm_start_steps,
        "batch": config.warm_start_batch,
        "learning_rate": config.warm_start_learning_rate,
        "first_loss": round(losses[0], 4) if losses else None,
        "final_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4) if losses else None,
        "seconds": round(time.monotonic() - started, 3),
    }
    return model, tokenizer, summary


@dataclass
class RunResult:
    """One GRPO run: its reward's step records and how long it took."""

    name: str
    pays: str
    reward: LearningReward
    seconds: float
    log_history: list[dict[str, Any]]


def _dataset(rows: Sequence[TaskRow], run: str) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": row.prompt,
                "oracle_identity": {IDENTITY_KEY: row.patient},
                "task_parameters": row.task_parameters,
                # The prefix of every completion's minted episode id (R-T-4).
                "episode_id": f"learn-{run}-r{index:04d}",
            }
            for index, row in enumerate(rows)
        ]
    )


def grpo_run(
    name: str,
    pays: Pays,
    *,
    config: LearningConfig,
    model: Any,
    tokenizer: Any,
    worker: WorkerClient,
    contract_digest: str,
    mockmed_url: str,
    mockmed_token: str,
    output_dir: Path,
    policy_update_offset: int = 0,
) -> RunResult:
    """Train a copy of ``model`` with GRPO for ``config.steps`` steps, paid as ``pays`` says.

    ``policy_update_offset``: where this run's policy updates start on the worker (see
    :class:`~rewardseal_kit.proof.learning.rewards.RecordingReward`)."""
    from trl import GRPOTrainer

    from rewardseal_kit.tiny_models import tiny_grpo_config

    started = time.monotonic()
    rows = task_rows(config.steps * config.prompts_per_step, config.seed)
    actor = MockMedUIActor(mockmed_url, mockmed_token)
    certified = RecordingReward(
        worker,
        reward_contract_digest=contract_digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=config.num_generations,
        require_certified=True,
        actor=actor,
        name=f"certified_{name}",
    )
    certified.policy_update_offset = policy_update_offset
    reward = LearningReward(certified, actor, pays=pays)
    args = tiny_grpo_config(
        output_dir,
        max_steps=config.steps,
        batch=config.batch,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        learning_rate=config.learning_rate,
        seed=config.seed,
    )
    trainer = GRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=[reward],
        args=args,
        train_dataset=_dataset(rows, name),
        processing_class=tokenizer,
    )
    try:
        trainer.train()
    finally:
        actor.close()
    return RunResult(
        name=name,
        pays=pays,
        reward=reward,
        seconds=round(time.monotonic() - started, 3),
        log_history=list(trainer.state.log_history),
    )
