"""The verifiers 0.4.0 plugin: taskset, task, single-turn harness and ``load_environment``.

verifiers 0.4.0 (``verifiers.v1``) has no ``SingleTurnEnv`` or ``Rubric``: an environment is a
``Taskset`` package (resolved by id, dashes to underscores, exporting its classes via
``__all__``) whose ``Task`` carries ``@vf.reward`` and ``@vf.metric`` methods, played by a
``Harness`` in the default ``SingleAgentEnv``. This module provides the single-turn case:

* :class:`ExtraDupTaskset` yields one :class:`ExtraDupTask` per row of :mod:`.tasks`;
* :class:`ExtraDupTask` pays :func:`.reward.certified_reward` on the last reply (the tier-2
  read; weight 1) against the row's task, :func:`.reward.certify_row` (its ``task_parameters``),
  and records :meth:`.reward.Certification.metrics` as metrics and
  :meth:`.reward.Certification.to_info` as ``trace.info["certification"]``;
* :class:`SingleTurnHarness` makes exactly one chat-completions call through the rollout's
  interception endpoint, in-process with stdlib HTTP (no program, no ``uv``, no container).

Only this module and :mod:`.evaluation` import verifiers.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import verifiers.v1 as vf
from pydantic import Field

from rewardseal.core.errors import ValidationError

from .reward import certify_row, refuse_screen_scoring
from .tasks import STORES, eval_rows, train_rows

__all__ = [
    "ENV_ID",
    "ExtraDupData",
    "ExtraDupTask",
    "ExtraDupTaskset",
    "ExtraDupTasksetConfig",
    "SingleTurnHarness",
    "SingleTurnHarnessConfig",
    "env_config",
    "load_environment",
]

ENV_ID = "rewardseal-mockmed-extradup"
"""The environment (taskset) id; verifiers imports it as ``rewardseal_mockmed_extradup``."""
LOCAL_RUNTIME: dict[str, Any] = {"type": "subprocess"}
"""The runtime :func:`env_config` pins: the harness runs nothing, so no sandbox is needed."""


class ExtraDupData(vf.TaskData):  # type: ignore[misc]
    """A task row: the prompt, and ``info`` with the spec, the store, and any family label."""

    info: dict[str, Any] = Field(default_factory=dict)


class ExtraDupTask(vf.Task[ExtraDupData]):  # type: ignore[misc]
    """One CREATE task; scored only by replaying the last reply on a fresh store."""

    def _certify(self, trace: vf.Trace) -> dict[str, Any]:
        # The row's own task: its parameters, checked against the spec its prompt showed.
        certification = certify_row(trace.last_reply, self.data.info)
        details = certification.to_info()
        trace.info["certification"] = details
        return {"metrics": certification.metrics(), "reward": certification.reward}

    @vf.metric  # type: ignore[untyped-decorator]
    async def certification(self, trace: vf.Trace) -> dict[str, float]:
        """Rollout metrics of the tier-2 read (and ``trace.info["certification"]``)."""
        metrics: dict[str, float] = self._certify(trace)["metrics"]
        return metrics

    @vf.reward  # type: ignore[untyped-decorator]
    async def certified_reward(self, trace: vf.Trace) -> float:
        """1.0 when the store read verifies the spec's effect, else 0.0."""
        reward: float = self._certify(trace)["reward"]
        return reward


class ExtraDupTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    """Taskset knobs, under ``--env.taskset.*``."""

    num_tasks: int = 8
    """Gold tasks per store."""
    seed: int = 0
    """Seed of ``extradup.variants``."""
    stores: list[Literal["mockmed", "openemr"]] = Field(default_factory=lambda: list(STORES))
    """Which stores to draw specs from."""
    split: Literal["train", "eval"] = "train"
    """``train``: gold tasks only; ``eval``: labeled family rows first, then gold tasks."""
    include_hacking_eval: bool = True
    """Label one row per hacking family (R-MM-3) in the ``eval`` split."""
    score_from_screen: bool = False
    """Refused when True: a screen is not proof (see ``reward.SCREEN_REFUSAL``)."""


class ExtraDupTaskset(vf.Taskset[ExtraDupTask, ExtraDupTasksetConfig]):  # type: ignore[misc]
    """The MockMed/ExtraDup CREATE tasks."""

    def __init__(self, config: ExtraDupTasksetConfig) -> None:
        refuse_screen_scoring(config.score_from_screen)
        super().__init__(config)

    def rows(self) -> list[dict[str, Any]]:
        """The task rows of the configured split (see :mod:`.tasks`)."""
        config = self.config
        if config.split == "train":
            return train_rows(config.num_tasks, config.seed, config.stores)
        return eval_rows(
            config.num_tasks,
            config.seed,
            config.stores,
            include_hacking_eval=config.include_hacking_eval,
        )

    def load(self) -> Iterator[ExtraDupTask]:
        """One task per row; labeled rows are named ``<store>/<family>``."""
        for row in self.rows():
            info = row["info"]
            family = info.get("family")
            name = f"{info['store']}/{family}" if family else None
            data = ExtraDupData(prompt=row["prompt"], name=name, info=info)
            yield ExtraDupTask(data, self.config.task)


def _chat_once(endpoint: str, secret: str, body: Mapping[str, Any], timeout_s: float) -> str:
    """POST one chat-completions request (stdlib HTTP) and return the first choice's text."""
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        payload = json.load(response)
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not isinstance(choices, list) or not choices:
        return ""
    message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) else ""


class SingleTurnHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    """No knobs beyond verifiers' own."""


class SingleTurnHarness(vf.Harness[SingleTurnHarnessConfig]):  # type: ignore[misc]
    """One chat-completions call through the interception endpoint, made in-process."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    TIMEOUT_S = 120.0
    """Seconds one chat-completions call may take."""

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        """Send the prompt once; the reply lands in the trace through the interception."""
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, str]] = []
        if system:
            messages.append({"role": "system", "content": system})
        if not isinstance(prompt, str):
            raise ValidationError("the single-turn harness needs a text prompt")
        messages.append({"role": "user", "content": prompt})
        body = {"model": ctx.model, "messages": messages}
        text = await asyncio.to_thread(_chat_once, endpoint, secret, body, self.TIMEOUT_S)
        return vf.ProgramResult(exit_code=0, stdout=text, stderr="")


def env_config(
    num_tasks: int = 8,
    seed: int = 0,
    stores: Sequence[str] = STORES,
    include_hacking_eval: bool = True,
    score_from_screen: bool = False,
    split: Literal["train", "eval"] = "train",
    **kwargs: Any,
) -> vf.EnvConfig:
    """The validated env config: this taskset, the local runtime unless ``agent`` says else.

    ``kwargs`` are further env-config fields (e.g. ``agent={"max_turns": 1}``); a given
    ``agent.runtime`` wins over :data:`LOCAL_RUNTIME`.
    """
    refuse_screen_scoring(score_from_screen)
    agent: dict[str, Any] = dict(kwargs.pop("agent", None) or {})
    agent.setdefault("runtime", dict(LOCAL_RUNTIME))
    taskset: dict[str, Any] = {
        "id": ENV_ID,
        "num_tasks": num_tasks,
        "seed": seed,
        "stores": list(stores),
        "split": split,
        "include_hacking_eval": include_hacking_eval,
        "score_from_screen": score_from_screen,
    }
    extra = kwargs.pop("taskset", None)
    if isinstance(extra, Mapping):
        taskset.update(extra)
    config: vf.EnvConfig = vf.resolve_env_config({**kwargs, "taskset": taskset, "agent": agent})
    return config


def load_environment(
    num_tasks: int = 8,
    seed: int = 0,
    stores: Sequence[str] = STORES,
    include_hacking_eval: bool = True,
    score_from_screen: bool = False,
    split: Literal["train", "eval"] = "train",
    **kwargs: Any,
) -> vf.Env:
    """The environment, built through verifiers' own loader (``vf.load_environment``).

    ``score_from_screen=True`` raises :class:`~rewardseal.core.errors.ValidationError`: there is no
    tier-0 path.
    """
    config = env_config(
        num_tasks, seed, stores, include_hacking_eval, score_from_screen, split, **kwargs
    )
    env: vf.Env = vf.load_environment(config)
    return env
