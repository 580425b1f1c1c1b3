"""Multi-turn tool episodes for TRL's ``GRPOTrainer`` (``environment_factory=``), paid by receipts.

Usage (docs/trainers.md, *TRL: multi-turn tool environments*)::

    episodes = CertifiedToolEpisodes(
        WorkerClient(target, token=token, trust=trust),
        reward_contract_digest=digest,
        policy_checkpoint_id="policy.checkpoint.0001",
        num_generations=8,
        tools=MOCKMED_TOOLS,                               # rewardseal_kit.tools.mockmed
        open_session=lambda identity: mockmed_session(url, token, identity["patient_id"]),
    )
    trainer = GRPOTrainer(
        model=model, args=args, train_dataset=dataset,     # rows carry "oracle_identity"
        environment_factory=episodes.environment,
        reward_funcs=[episodes.reward],
    )
    episodes.bind(trainer)        # only needed with capture= (the sentinel opens at the step)
    trainer.train()

The protocol, as TRL 1.16 implements it (``GRPOTrainer.__init__`` and
``_generate_and_score_completions``):

* ``environment_factory`` is a zero-argument callable. TRL builds one instance to read its tools,
  then keeps a *pool*: each batch draws one instance per completion (making more when a batch
  needs more) and calls ``reset(**row)`` on it with the completion's dataset row (every column,
  ``prompt`` included). Instances are reused across batches, so everything an episode owns is
  set in ``reset``.
* The environment's tools are the public functions of its class other than ``reset`` and
  ``get_reward``. TRL renders each one's schema with transformers' ``get_json_schema`` (its
  name, docstring and type hints), parses the model's tool calls, and calls
  ``method(**arguments)``; an ``async`` method runs on TRL's own event loop, and an exception
  becomes ``{"error": ...}`` text for the model. So this module builds, per tool set, a class
  with one ``async`` method per :class:`~rewardseal.trainers.tools.AgentTool`, its signature
  and docstring made from the tool's JSON Schema (the tool's ``call`` still checks the full
  schema). Every other member of :class:`CertifiedToolEnvironment` is private, because a public
  one would be shown to the model as a tool.
* A reward function gets ``environments=`` (the batch's instances, aligned with the
  completions) beside the usual columns. :attr:`CertifiedToolEpisodes.reward` reads the episode
  ids and identities from them and scores the batch in one ``ScoreEpisodes`` call.

Why no ``get_reward``: TRL calls it per environment and turns a None into NaN that is
``nansum``-ed as 0.0 beside any other reward function, and it cannot see the group. The
reward function instead applies the single-turn adapter's group rule (R-T-1,
:mod:`rewardseal.trainers.trl.rewards`): an unscored episode (the oracle could not read, the
worker was away at begin or score, RECONCILIATION_REQUIRED) is paid its scored group-mates'
mean, so its advantage is exactly zero, and a group with no scored member returns None
throughout, which TRL leaves out of the group statistics. Unscored is dropped from the group's
learning signal; it is never paid 0. The ``reward_unscored`` column and the
``rewardseal/unscored_share`` metric show it.

What an episode is: ``reset`` mints a fresh episode id (never derived from the row: TRL copies
a row to every completion of its group, R-T-4), derives the completion's sandbox identity from
the row's ``oracle_identity`` (:func:`rewardseal.trainers.actors.sandbox_identity` per value,
or ``identity_for=``: the worker allows one open episode per identity, R-W-3), and begins the
episode at the worker (the baseline read, R-W-1) before the model's first tool call. Each tool
call runs the tool in a session bound to that identity (``open_session``). A begin the worker
refused for a setup reason (wrong token, unknown contract) is raised; a transient refusal is
kept and the episode is scored as unscored (its tool calls still run: the model cannot tell).

Reward integrity (R-I-3, R-I-5): with ``capture=`` the episode also opens on the sentinel
worker in ``reset``, at the trainer's current step, so :meth:`bind` the trainer (or give
``policy_update=``); the scored batch goes to the capture as the single-turn function's does, so
``IntegrityGate`` (:mod:`rewardseal.trainers.trl.gate`) audits these runs unchanged.

This module imports neither ``trl``, ``transformers`` nor ``torch``: TRL needs no base class.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.core.validation import validate_id
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.trainers.groups import is_setup_error
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.task_parameters import PARAMETERS_KEY, row_parameters
from rewardseal.trainers.tools import AgentTool, call_tool, tools_by_name
from rewardseal.trainers.trl.rewards import (
    DEFAULT_MAX_BATCH,
    CertifiedRewardFunction,
    _Batch,
    _identity,
)
from rewardseal.v1.enums_pb2 import RuntimeSignal

__all__ = [
    "CertifiedToolEnvironment",
    "CertifiedToolEpisodes",
    "EnvironmentReward",
    "ToolCall",
    "sandbox_identities",
]

_DEFAULT_PREFIX: Final = "trl-env"
_JSON_TYPES: Final[Mapping[str, Any]] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
    "array": list,
}

SessionFactory = Callable[[Mapping[str, str]], AbstractAsyncContextManager[Any]]
"""``open_session(identity)``: the tools' session for one episode, an async context manager
entered around each tool call (a ``rewardseal_kit.tools.base.ToolSession`` can be entered
again after it closed)."""
IdentityFor = Callable[[Mapping[str, str], str], Mapping[str, str]]
"""``identity_for(row_identity, episode_id)``: the completion's own oracle identity."""


class ToolCall:
    """One tool call of an episode: what the model asked and what it was told."""

    __slots__ = ("arguments", "name", "result")

    def __init__(self, name: str, arguments: Mapping[str, Any], result: str) -> None:
        self.name = name
        self.arguments = dict(arguments)
        self.result = result

    def as_dict(self) -> dict[str, Any]:
        """``{"name", "arguments", "result"}`` (JSON-able)."""
        return {"name": self.name, "arguments": self.arguments, "result": self.result}


def sandbox_identities(row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
    """The default ``identity_for``: every value of the row's identity made the completion's own
    sandbox (:func:`~rewardseal.trainers.actors.sandbox_identity`), as ``MockMedActor`` does."""
    return {key: sandbox_identity(value, episode_id) for key, value in row_identity.items()}


class CertifiedToolEnvironment:
    """One pooled TRL environment: an episode per ``reset``, its tools, its begin answer.

    Built by :attr:`CertifiedToolEpisodes.environment` (a subclass with one method per tool);
    framework-neutral: ``reset`` is plain Python and the tool methods are coroutines, so a test
    or another trainer drives it as TRL does.
    """

    _episodes: CertifiedToolEpisodes

    def __init__(self) -> None:
        self._episode_id: str | None = None
        self._row_identity: dict[str, str] = {}
        self._identity: dict[str, str] = {}
        self._parameters: dict[str, ParameterValue] = {}
        self._record_id: Any = None
        self._session: AbstractAsyncContextManager[Any] | None = None
        self._begin_error: RewardSealError | None = None
        self._calls: list[ToolCall] = []
        self._lock = asyncio.Lock()

    def reset(self, **row: Any) -> str | None:
        """Begin a fresh episode for ``row`` (TRL passes the dataset row's columns).

        Returns None: the task is the row's prompt; nothing is appended to it.

        Raises:
            ValidationError: the row has no usable identity column.
            RewardSealError: the worker refused the begin for a setup reason.
        """
        episodes = self._episodes
        column = episodes.identity_column
        if row.get(column) is None:
            raise ValidationError(
                f"a tool episode needs the dataset's {column!r} column (the row identity)"
            )
        row_identity = _identity(row[column], 0)
        episode_id = validate_id(f"{episodes.episode_prefix}.{secrets.token_hex(12)}", "episode_id")
        identity = dict(episodes.identity_for(row_identity, episode_id))
        self._episode_id = episode_id
        self._row_identity = row_identity
        self._identity = identity
        # The row's task parameters (R-W-18), bound at the begin and repeated by the descriptor.
        self._parameters = row_parameters(row.get(PARAMETERS_KEY), 0)
        self._record_id = row.get(episodes.record_column)
        self._calls = []
        self._begin_error = None
        self._session = episodes.open_session(identity)
        # A fresh lock per episode: it binds to the loop that first waits on it (TRL's own).
        self._lock = asyncio.Lock()
        episodes._begin(self)
        return None

    # -- what the reward function and tests read (private: a public name would be a tool) ---

    @property
    def _active(self) -> str:
        if self._episode_id is None:
            raise ValidationError("the environment was not reset: no episode is open")
        return self._episode_id

    def _transcript(self) -> str:
        """The episode's tool calls as JSON text (what the integrity capture samples)."""
        return json.dumps([call.as_dict() for call in self._calls], sort_keys=True)

    async def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run tool ``name`` for this episode; the text the model reads (never raises for the
        model's mistakes or the system of record's refusals: the tool answers them as text)."""
        self._active  # noqa: B018 (refuses a call before reset)
        assert self._session is not None
        # TRL runs the tool calls of one assistant message concurrently (asyncio.gather); the
        # episode's one session is entered around each call, so its calls take turns, in the
        # order the model wrote them.
        async with self._lock, self._session as session:
            result = await call_tool(self._episodes.tools, name, dict(arguments), session)
            self._calls.append(ToolCall(name, arguments, result))
        return result


def _tool_method(tool: AgentTool[Any]) -> Callable[..., Any]:
    """An ``async`` method named for ``tool`` whose signature and Google-style docstring carry
    its JSON Schema, as transformers' ``get_json_schema`` reads them."""
    schema = tool.parameters
    properties: Mapping[str, Any] = schema.get("properties", {}) or {}
    required = set(schema.get("required", ()) or ())
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = [tool.description or tool.name]
    if properties:
        lines += ["", "Args:"]
    for name, spec in properties.items():
        if not name.isidentifier():
            raise ValidationError(
                f"tool {tool.name!r}: argument {name!r} is not a Python identifier, so TRL "
                "cannot pass it as a keyword"
            )
        kind = _JSON_TYPES.get(str(spec.get("type", "string")), str)
        hint: Any = kind if name in required else kind | None
        annotations[name] = hint
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if name in required else None,
                annotation=hint,
            )
        )
        description = " ".join(str(spec.get("description", name)).split())
        lines.append(f"    {name}: {description}")
    annotations["return"] = str
    tool_name = tool.name

    async def method(self: CertifiedToolEnvironment, **arguments: Any) -> str:
        # None is how TRL (and the signature's default) spells "not given": leave it out, so
        # the tool's schema (additionalProperties false, no nulls) sees only what was given.
        given = {key: value for key, value in arguments.items() if value is not None}
        return await self._call(tool_name, given)

    method.__name__ = method.__qualname__ = tool_name
    method.__doc__ = "\n".join(lines)
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


class EnvironmentReward(CertifiedRewardFunction):
    """The reward function of :class:`CertifiedToolEpisodes`: scores TRL's ``environments``.

    The rules are :class:`~rewardseal.trainers.trl.rewards.CertifiedRewardFunction`'s (verified
    receipts, the certified check, the group fill, the metadata columns, ``log_metric`` and
    ``log_extra``, the capture); only where the batch comes from differs.
    """

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        """Score one TRL batch of tool episodes; a reward (or None for an all-unscored group)
        per completion."""
        environments = kwargs.get("environments")
        count = len(completions)
        if not isinstance(environments, Sequence) or len(environments) != count:
            raise ValidationError(
                "no tool episodes to score: pass CertifiedToolEpisodes.environment as the "
                "trainer's environment_factory (TRL hands the reward one environment per "
                "completion)"
            )
        envs: list[CertifiedToolEnvironment] = []
        for env in environments:
            if not isinstance(env, CertifiedToolEnvironment):
                raise ValidationError(
                    f"environment {type(env).__name__} is not a CertifiedToolEnvironment"
                )
            envs.append(env)
        if len(prompts) != count:
            raise ValidationError(f"{len(prompts)} prompts for {count} completions")
        step = self._step(kwargs)
        batch = _Batch(
            episode_ids=[env._active for env in envs],
            texts=[env._transcript() for env in envs],
            row_identities=[dict(env._row_identity) for env in envs],
            identities=[dict(env._identity) for env in envs],
            signals=[RuntimeSignal.RUNTIME_SIGNAL_COMPLETED] * count,
            policy_update=step,
            parameters=[dict(env._parameters) for env in envs],
        )
        for index, env in enumerate(envs):
            if env._begin_error is not None:  # never begun: unscored, kept out of the call
                batch.answers[index] = env._begin_error
        for chunk in self._chunks(batch):
            try:
                answers = self.client.score_many(self._descriptor(batch, i) for i in chunk)
            except RewardSealError as exc:
                self._record_outage(batch, chunk, exc)
                continue
            self._record(batch, chunk, answers)
        rewards = self._finish(batch, kwargs)
        records = {self.record_column: [env._record_id for env in envs]}
        self._capture_rows(batch, records)
        return rewards


class CertifiedToolEpisodes:
    """A run's multi-turn tool episodes: the ``environment_factory`` and the reward for TRL.

    Args:
        client: the blocking worker client (``reset`` and the reward call it from TRL's
            training thread).
        reward_contract_digest / policy_checkpoint_id / num_generations / require_certified /
            max_batch / capture / policy_update: as :class:`CertifiedRewardFunction`'s.
        tools: the agent's tools (:class:`~rewardseal.trainers.tools.AgentTool`), e.g.
            ``rewardseal_kit.tools.mockmed.MOCKMED_TOOLS``.
        open_session: the tools' session for an episode's identity.
        identity_for: the completion's identity from the row's (default
            :func:`sandbox_identities`).
        identity_column: the dataset column with the row's oracle identity (a mapping or its
            JSON text).
        record_column: the dataset column with a stable record id for the integrity capture
            (optional; default: the row identity).
        episode_prefix: how minted episode ids start.
        name: the reward's name in TRL's metrics (``rewards/<name>/mean``).
    """

    def __init__(
        self,
        client: WorkerClient,
        *,
        reward_contract_digest: str,
        policy_checkpoint_id: str,
        num_generations: int,
        tools: Sequence[AgentTool[Any]],
        open_session: SessionFactory,
        identity_for: IdentityFor = sandbox_identities,
        identity_column: str = "oracle_identity",
        record_column: str = "record_id",
        require_certified: bool = True,
        policy_update: int | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        capture: IntegrityCapture | None = None,
        episode_prefix: str = _DEFAULT_PREFIX,
        name: str = "certified_tool_episode",
    ) -> None:
        self.tools: dict[str, AgentTool[Any]] = tools_by_name(tools)
        if not self.tools:
            raise ValidationError("a tool episode needs at least one tool")
        reserved = {"reset", "get_reward"} & set(self.tools)
        hidden = [tool for tool in self.tools if tool.startswith("_")]
        if reserved or hidden:
            raise ValidationError(
                f"tool names {sorted(reserved | set(hidden))} cannot be TRL environment methods"
            )
        self.open_session = open_session
        self.identity_for = identity_for
        self.identity_column = identity_column
        self.record_column = record_column
        self.episode_prefix = episode_prefix
        validate_id(f"{episode_prefix}.{'0' * 24}", "episode_prefix")
        self.capture = capture
        self.policy_update = policy_update
        self.reward = EnvironmentReward(
            client,
            reward_contract_digest=reward_contract_digest,
            policy_checkpoint_id=policy_checkpoint_id,
            num_generations=num_generations,
            require_certified=require_certified,
            identity_column=identity_column,
            policy_update=policy_update,
            max_batch=max_batch,
            name=name,
            capture=capture,
            record_column=record_column,
        )
        """The reward function to pass in ``reward_funcs`` (it scores the environments)."""
        namespace: dict[str, Any] = {name: _tool_method(tool) for name, tool in self.tools.items()}
        namespace["_episodes"] = self
        namespace["__module__"] = __name__
        self.environment_class: type[CertifiedToolEnvironment] = type(
            "ToolEnvironment", (CertifiedToolEnvironment,), namespace
        )
        """The environment class (one ``async`` method per tool)."""
        self._trainer: Any = None

    def environment(self) -> CertifiedToolEnvironment:
        """TRL's ``environment_factory``: a new, not yet reset environment."""
        return self.environment_class()

    def bind(self, trainer: Any) -> None:
        """Read the policy update from ``trainer.state.global_step`` at each reset (needed only
        with ``capture=``: the sentinel opens the episode at the step it is generated for)."""
        self._trainer = trainer

    def _step(self) -> int:
        if self.policy_update is not None:
            return self.policy_update
        step = getattr(getattr(self._trainer, "state", None), "global_step", None)
        if not isinstance(step, int) or step < 0:
            raise ValidationError(
                "with capture= the sentinel opens each episode at the trainer's step: call "
                "CertifiedToolEpisodes.bind(trainer) before train(), or pass policy_update="
            )
        return step

    def _begin(self, env: CertifiedToolEnvironment) -> None:
        """Open ``env``'s episode on the sentinel (with a capture) and at the worker."""
        episode_id = env._active
        if self.capture is not None:
            self.capture.begin_sentinel([(episode_id, env._identity)], policy_update=self._step())
        try:
            self.reward.client.begin(
                episode_id,
                self.reward.reward_contract_digest,
                env._identity,
                task_parameters=env._parameters or None,
            )
        except RewardSealError as exc:
            if is_setup_error(exc):
                raise
            env._begin_error = exc
