"""Evaluate the environment through verifiers' own eval runner against an OpenAI endpoint.

:func:`evaluate_family` builds a verifiers ``EvalConfig`` (this environment, model
``scripted/<family>``, the given base URL) and runs ``verifiers.v1.cli.eval.runner.run_eval``:
the same path ``vf-eval`` takes, with no dashboard and no upload. Every rollout goes through the
single-turn harness, the interception server, the OpenAI-compatible endpoint and the task's
``@vf.reward``. :func:`evaluate_tools_family` does the same for the multi-turn tool taskset
(``rewardseal-mockmed-tools``, model ``scripted-tools/<family>``): its verdict is the worker
receipt's outcome, and an unscored episode is a rollout error (verifiers' ``trace.has_error``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

from .environment import env_config
from .scripted_policy import model_name, tools_model_name
from .tasks import STORES

__all__ = ["API_KEY_VAR", "FamilyEval", "evaluate_family", "evaluate_tools_family"]

API_KEY_VAR = "SCRIPTED_POLICY_KEY"
"""The environment variable the eval client reads its key from (unset sends a placeholder)."""


@dataclass(frozen=True)
class FamilyEval:
    """The rollouts of one family: rewards, verdicts, metrics and rollout errors."""

    family: str
    rewards: tuple[float, ...]
    verdicts: tuple[str, ...]
    errors: tuple[str, ...]
    metrics: tuple[dict[str, float | None], ...] = ()
    infos: tuple[dict[str, Any], ...] = ()
    """Each trace's ``info`` (the tool taskset's ``rewardseal`` entry: episode, policy update,
    receipt)."""

    @property
    def mean_reward(self) -> float:
        """The average reward (0.0 with no rollouts)."""
        return sum(self.rewards) / len(self.rewards) if self.rewards else 0.0


def _eval_config(
    base_url: str,
    model: str,
    output_dir: Path,
    env: dict[str, Any],
    max_concurrent: int,
    sampling: dict[str, Any] | None = None,
) -> EvalConfig:
    """The eval config: no dashboard, no upload, results under ``output_dir``."""
    fields: dict[str, Any] = {
        "env": env,
        "model": model,
        "client": {"base_url": base_url, "api_key_var": API_KEY_VAR},
        "rich": None,
        "push": False,
        "output_dir": str(output_dir),
        "max_concurrent": max_concurrent,
    }
    if sampling is not None:
        fields["sampling"] = sampling
    config: EvalConfig = EvalConfig.model_validate(fields)
    return config


def evaluate_family(
    base_url: str,
    family: str,
    *,
    num_tasks: int = 2,
    seed: int = 0,
    stores: Sequence[str] = STORES,
    max_concurrent: int = 16,
) -> FamilyEval:
    """Run ``num_tasks`` gold tasks per store with model ``scripted/<family>`` at ``base_url``."""
    env = env_config(num_tasks=num_tasks, seed=seed, stores=stores).model_dump(mode="json")
    return _run(base_url, model_name(family), family, env, max_concurrent)


def evaluate_tools_family(
    base_url: str,
    family: str,
    env: Any,
    *,
    max_concurrent: int = 4,
    sampling: dict[str, Any] | None = None,
) -> FamilyEval:
    """Run the tool taskset ``env`` (a ``tools_env_config``) with ``scripted-tools/<family>``;
    ``sampling`` is the rollouts' sampling config (e.g. ``{"extra_body": {"cache_salt": "3"}}``,
    as prime-rl's orchestrator sends a rollout's policy version)."""
    dumped = env.model_dump(mode="json")
    return _run(base_url, tools_model_name(family), family, dumped, max_concurrent, sampling)


def _verdict(info: Any) -> str:
    """The single-turn certification's verdict, or the tool taskset's receipt outcome."""
    certification = info.get("certification")
    if isinstance(certification, dict):
        return str(certification.get("verdict", "UNSCORED"))
    receipt = (info.get("rewardseal") or {}).get("receipt")
    return str(receipt.get("outcome", "UNSCORED")) if isinstance(receipt, dict) else "UNSCORED"


def _run(
    base_url: str,
    model: str,
    family: str,
    env: dict[str, Any],
    max_concurrent: int,
    sampling: dict[str, Any] | None = None,
) -> FamilyEval:
    """One eval of ``env`` with ``model``, collected into a :class:`FamilyEval`."""
    with tempfile.TemporaryDirectory(prefix="rewardseal-extradup-eval-") as scratch:
        config = _eval_config(base_url, model, Path(scratch), env, max_concurrent, sampling)
        episodes = asyncio.run(run_eval(config))
    rewards: list[float] = []
    verdicts: list[str] = []
    errors: list[str] = []
    metrics: list[dict[str, float | None]] = []
    infos: list[dict[str, Any]] = []
    for episode in episodes:
        errors.extend(error.message for error in episode.errors)
        for trace in episode.traces:
            verdicts.append(_verdict(trace.info))
            metrics.append(dict(trace.metrics))
            infos.append(dict(trace.info))
            errors.extend(error.message for error in trace.errors)
            if not trace.has_error:
                rewards.append(float(trace.reward))
    return FamilyEval(
        family, tuple(rewards), tuple(verdicts), tuple(errors), tuple(metrics), tuple(infos)
    )
