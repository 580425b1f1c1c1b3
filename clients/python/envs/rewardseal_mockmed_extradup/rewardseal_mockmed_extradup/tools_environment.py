"""The verifiers 0.4.0 taskset ``rewardseal-mockmed-tools``: a multi-turn tool agent on MockMed,
paid by a real worker's receipt.

verifiers resolves the id to the package ``rewardseal_mockmed_tools``, which re-exports this
module's taskset and harness. Per rollout:

1. :meth:`ToolsTask.setup` begins the episode at the worker
   (:class:`.worker_episodes.WorkerEpisodes`: a fresh episode id, the sandbox patient, the
   baseline read) before any tool call, and
   records it in ``trace.info["rewardseal"]["episode"]``;
2. :class:`ToolCallingHarness` runs the turns: chat completions through the rollout's
   interception endpoint with the tools offered (OpenAI function calling), each tool call
   carried out in-process by MockMed's tools (``rewardseal_kit.tools.mockmed``, issue 27
   item 2) in a session bound to the episode's patient, until the model answers
   without a call or ``max_turns`` is reached;
3. :meth:`ToolsTask.certified_reward` scores the episode at the worker and pays the receipt's
   scalar; ``trace.info["rewardseal"]["receipt"]`` gets the receipt id, outcome, certified and
   findings. An unscored episode **raises** :class:`~rewardseal.core.errors.Unscored`:
   verifiers records it as the trace's error (``trace.has_error``) and prime-rl drops that trace
   from its group; it is never paid 0.0.

Why the tools run in the harness rather than in a ``vf.Toolset``: a 0.4 ``Toolset`` is an MCP
server started per rollout as a subprocess, whose tools' arguments are validated by a pydantic
model built from each function's Python signature, which *ignores* arguments outside the
signature. The tools here are declared by JSON Schemas with ``additionalProperties: false``
(the framework-neutral protocol of issue 27 item 2): behind MCP, a model's ``patient_id`` for a
decoy would be silently dropped and the write would land on the episode's own patient, turning
a refused hack into a paid one. The harness offers the tools to the model exactly as a
toolset's would be offered (``tools=[...]``) and applies their schemas as written.

**The policy update of each rollout.** An async trainer scores rollouts of policy version k
after version k+1 began, so a taskset-wide setting cannot say which policy acted. prime-rl's
orchestrator dispatches each rollout with ``sampling.extra_body.cache_salt`` set to the policy
version its group was dispatched under (``str(policy_version_at_start)``, the inference
server's weight version, for every rollout of the live policy:
``Dispatcher.schedule_group_episode`` and ``Env._sampling``); verifiers hands that sampling to
the harness (``ModelContext.sampling``, ``extra_body`` flattened into its extra fields).
:func:`rollout_policy_update` reads it, and the receipt is asked for at that update, so R-W-7's
``--max-policy-lag`` window applies per rollout: a rollout within the window is scored at its
own version, one below it is refused ``policy_update_regressed``, which raises
:class:`~rewardseal.core.errors.Unscored` and drops the trace (never 0.0). Without a decimal
``cache_salt`` (``vf-eval``, a frozen-sourced rollout, another orchestrator) the taskset's
``worker.policy_update`` is used, else 0. Where it came from is
``trace.info["rewardseal"]["policy_update"]`` (``{"value": ..., "source": "cache_salt" |
"worker.policy_update" | "default"}``) (R-T-6).

Worker settings are the taskset's ``worker`` table (verl's ``reward_kwargs`` keys; see
:mod:`.worker_episodes`); MockMed is ``mockmed_url`` with its bearer token read from the
environment variable ``mockmed_token_env`` (a token never sits in a config that is saved with
the results).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import verifiers.v1 as vf
from pydantic import Field

from rewardseal.core.errors import Unscored, ValidationError
from rewardseal.trainers.tools import ToolProvider, call_tool, openai_tools, tools_by_name
from rewardseal_kit.tools.mockmed import mockmed_toolbox

from .tool_script import tool_rows
from .worker_episodes import OpenEpisode, WorkerEpisodes, receipt_info

__all__ = [
    "POLICY_VERSION_KEY",
    "TOOLS_ENV_ID",
    "ToolCallingHarness",
    "ToolCallingHarnessConfig",
    "ToolsData",
    "ToolsTask",
    "ToolsTaskset",
    "ToolsTasksetConfig",
    "rollout_policy_update",
    "tools_env_config",
]

TOOLS_ENV_ID: Final = "rewardseal-mockmed-tools"
"""The taskset id; verifiers imports it as ``rewardseal_mockmed_tools``."""
DEFAULT_TOKEN_ENV: Final = "REWARDSEAL_MOCKMED_TOKEN"
"""The environment variable MockMed's bearer token is read from by default."""
INFO_KEY: Final = "rewardseal"
"""The ``trace.info`` key this taskset writes."""
POLICY_VERSION_KEY: Final = "cache_salt"
"""The ``extra_body`` key prime-rl's orchestrator sets to a rollout's policy version."""
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,18}")


def rollout_policy_update(sampling: Any) -> int | None:
    """The policy version a rollout was dispatched under, from its sampling config.

    prime-rl sets ``extra_body["cache_salt"]`` to ``str(policy_version)`` (see the module
    docstring); verifiers 0.4's ``SamplingConfig`` flattens ``extra_body`` into its own extra
    fields, so the salt is read there (or under a mapping's ``extra_body``). Anything else (no
    salt, another use of the salt that is not a plain decimal) says nothing about the version
    and gives None.
    """
    if isinstance(sampling, Mapping):
        fields: Mapping[str, Any] = sampling
    else:
        fields = getattr(sampling, "model_extra", None) or {}
    extra = fields.get("extra_body")
    salt = extra.get(POLICY_VERSION_KEY) if isinstance(extra, Mapping) else None
    if salt is None:
        salt = fields.get(POLICY_VERSION_KEY)
    if isinstance(salt, bool) or not isinstance(salt, (str, int)):
        return None
    text = str(salt)
    return int(text) if _DECIMAL.fullmatch(text) else None


@dataclass
class _Rollout:
    """What the harness needs of a begun episode (kept in-process, keyed by trace id)."""

    episode: OpenEpisode
    provider: ToolProvider[Any]
    policy_update: int | None = None
    """The rollout's policy version (:func:`rollout_policy_update`), set by the harness."""


_OPEN: dict[str, _Rollout] = {}
"""Begun episodes by trace id: set by ``setup``, read by the harness, removed by scoring."""


class ToolsData(vf.TaskData):  # type: ignore[misc]
    """A task row: the prompt, and ``info`` with the dataset patient's identity."""

    info: dict[str, Any] = Field(default_factory=dict)


class ToolsTask(vf.Task[ToolsData]):  # type: ignore[misc]
    """One tool task; begun and scored at the worker."""

    episodes: WorkerEpisodes | None = None
    mockmed_url: str = ""
    mockmed_token: str = ""

    def _episodes(self) -> WorkerEpisodes:
        if self.episodes is None:
            raise ValidationError("the tools taskset has no worker settings (taskset.worker)")
        return self.episodes

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Begin the episode at the worker before the harness makes any call."""
        identity = self.data.info.get("identity")
        if not isinstance(identity, Mapping):
            raise ValidationError("a tool task row needs info.identity")
        episode = await self._episodes().begin(identity)
        trace.info[INFO_KEY] = {"episode": episode.to_info()}
        provider = mockmed_toolbox(self.mockmed_url, self.mockmed_token)
        _OPEN[trace.id] = _Rollout(episode, provider)

    @vf.reward  # type: ignore[untyped-decorator]
    async def certified_reward(self, trace: vf.Trace) -> float:
        """The worker receipt's scalar; raises ``Unscored`` so an unscored trace is dropped."""
        rollout = _OPEN.pop(trace.id, None)
        if rollout is None:
            raise ValidationError("the episode was never begun (task setup did not run)")
        episodes = self._episodes()
        update, source = episodes.policy_update_for(rollout.policy_update)
        if source == "sent":
            source = POLICY_VERSION_KEY  # the harness read it from the rollout's sampling
        trace.info.setdefault(INFO_KEY, {})["policy_update"] = {"value": update, "source": source}
        row = await episodes.score(rollout.episode, policy_update=update)
        trace.info[INFO_KEY]["receipt"] = receipt_info(row)
        if row.scalar is None:  # score() raises Unscored first; never pay a missing scalar
            raise Unscored(f"episode {row.episode_id} has no scalar: dropped")
        return float(row.scalar)


class ToolsTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    """Taskset knobs, under ``--env.taskset.*`` (TOML: ``[env.taskset]``)."""

    num_tasks: int = 4
    """Task rows (one dataset patient each)."""
    seed: int = 0
    """Which rows."""
    worker: dict[str, Any] = Field(default_factory=dict)
    """The worker: verl's ``reward_kwargs`` keys (``worker_ready_file`` or ``worker_target``,
    ``token_env``, ``worker_public_key``, ``reward_contract_digest``; ``policy_checkpoint_id``,
    ``policy_update``, ``require_certified``)."""
    mockmed_url: str = ""
    """MockMed's base URL (the API the tools call)."""
    mockmed_token_env: str = DEFAULT_TOKEN_ENV
    """The environment variable holding MockMed's bearer token."""


class ToolsTaskset(vf.Taskset[ToolsTask, ToolsTasksetConfig]):  # type: ignore[misc]
    """The MockMed tool tasks, begun and paid by one worker."""

    def __init__(self, config: ToolsTasksetConfig) -> None:
        super().__init__(config)
        self._worker = WorkerEpisodes.from_kwargs(config.worker) if config.worker else None

    def load(self) -> Iterator[ToolsTask]:
        """One task per row, each bound to the worker and MockMed."""
        token = os.environ.get(self.config.mockmed_token_env, "")
        for row in tool_rows(self.config.num_tasks, self.config.seed):
            task = ToolsTask(ToolsData(prompt=row["prompt"], info=row["info"]), self.config.task)
            task.episodes = self._worker
            task.mockmed_url = self.config.mockmed_url
            task.mockmed_token = token
            yield task


def _chat(endpoint: str, secret: str, body: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST one chat-completions request (stdlib HTTP); the first choice's message."""
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        payload = json.load(response)
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return {"role": "assistant", "content": ""}
    message = choices[0].get("message")
    return dict(message) if isinstance(message, Mapping) else {"role": "assistant", "content": ""}


class ToolCallingHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    """Harness knobs, under ``--env.agent.harness.*``."""

    max_turns: int = 8
    """Model calls per rollout at most."""


class ToolCallingHarness(vf.Harness[ToolCallingHarnessConfig]):  # type: ignore[misc]
    """The multi-turn tool loop through the interception endpoint, made in-process."""

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
        """Run the turns for the episode ``setup`` began; the last answer is the stdout."""
        rollout = _OPEN.get(trace.id)
        if rollout is None:
            raise ValidationError("no begun episode for this rollout (is the task a ToolsTask?)")
        rollout.policy_update = rollout_policy_update(ctx.sampling)
        system, prompt = self.resolve_prompt(data)
        if not isinstance(prompt, str):
            raise ValidationError("the tool-calling harness needs a text prompt")
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        tools = tools_by_name(rollout.provider.tools)
        offered = openai_tools(tools.values())
        answer = ""
        async with rollout.provider.session(rollout.episode.identity) as session:
            for _ in range(self.config.max_turns):
                body = {"model": ctx.model, "messages": messages, "tools": offered}
                message = await asyncio.to_thread(_chat, endpoint, secret, body, self.TIMEOUT_S)
                calls = message.get("tool_calls") or []
                messages.append(
                    {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
                    if calls
                    else {"role": "assistant", "content": message.get("content") or ""}
                )
                if not calls:
                    answer = str(message.get("content") or "")
                    break
                for call in calls:
                    function = call.get("function") or {}
                    result = await call_tool(
                        tools,
                        str(function.get("name", "")),
                        function.get("arguments"),
                        session,
                    )
                    messages.append(
                        {"role": "tool", "tool_call_id": call.get("id", ""), "content": result}
                    )
        return vf.ProgramResult(exit_code=0, stdout=answer, stderr="")


def tools_env_config(
    *,
    worker: Mapping[str, Any],
    mockmed_url: str,
    mockmed_token_env: str = DEFAULT_TOKEN_ENV,
    num_tasks: int = 4,
    seed: int = 0,
    max_turns: int = 8,
) -> vf.EnvConfig:
    """The validated env config of this taskset with the local (subprocess) runtime."""
    config: vf.EnvConfig = vf.resolve_env_config(
        {
            "taskset": {
                "id": TOOLS_ENV_ID,
                "num_tasks": num_tasks,
                "seed": seed,
                "worker": dict(worker),
                "mockmed_url": mockmed_url,
                "mockmed_token_env": mockmed_token_env,
            },
            "agent": {
                "runtime": {"type": "subprocess"},
                "harness": {"id": TOOLS_ENV_ID, "max_turns": max_turns},
            },
        }
    )
    return config
