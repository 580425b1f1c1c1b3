"""verl V1: ``CertifiedAgentLoop``, a ``ToolAgentLoop`` whose every session is a certified episode.

What verl 0.9.1 does (read from the installed wheel, paths under ``verl/``):

* The V1 trainer (``trainer.use_v1: true``, ``trainer/ppo/v1/``) dispatches each prompt to an
  ``AgentLoopWorkerTQ`` (``trainer/ppo/v1/agent_loop_tq.py``), which runs ``rollout.n``
  sessions of it (``session_id`` 0..n-1) through ``AgentLoopWorker._run_agent_loop``
  (``experimental/agent_loop/agent_loop.py``): that instantiates the loop named by the row's
  ``agent_name`` (default ``rollout.agent.default_agent_loop``) from the registry that
  ``rollout.agent.agent_loop_config_path`` fills (a YAML list of ``{name, _target_, ...}``;
  extra keys are the class's keyword arguments) once **per session**, and awaits
  ``run(sampling_params, **row)``: the row's columns, ``extra_info`` and the per-sample
  ``global_steps`` (the step whose dataloader made the prompt) among them.
* ``AgentLoopWorkerTQ._agent_loop_postprocess`` takes an output or a list: an empty list is
  logged and nothing is put into the TransferQueue, so the session is not in the step's
  ``batch_keys``; ``compute_advantage_for_multi_trajectories`` (``trainer/ppo/v1/utils.py``)
  computes GRPO over the ``{uid}_{session_id}`` keys that exist. A ``reward_score`` already set
  skips ``_compute_score`` (the reward loop is never asked), and its ``rm_scores`` is the score
  on the last response token (``AgentLoopOutput.as_dict``).
* Tools are ``BaseTool`` objects (``verl/tools/base_tool.py``): ``_call_tool`` checks the name
  and the JSON, then ``create``/``execute(instance_id, args, agent_data=...)``/``release``.

So per :meth:`run`: mint a fresh episode id (``uid`` + ``session_id`` is re-dispatched by verl
on an async resume, ``_reissue_inflight_prompts``; an id must name one acting, R-T-4), begin
the episode at the worker for the session's sandbox identity (R-W-1: before the first generate
or tool call; one per session, :func:`session_identity`), open the toolkit's session for that
identity, run ``ToolAgentLoop``'s turns with the toolkit's tools, score at the worker at the row's
``global_steps`` (R-W-7's bounded lag makes an async trainer's late score legal), and return the
output with ``reward_score`` and ``extra_fields["reward_extra_info"]`` (the columns of
:data:`rewardseal.trainers.groups.METADATA_COLUMNS` plus ``reward_receipt_id``), or ``[]`` for
an unscored session: the session leaves its GRPO group (never a 0.0, R-T-1), is logged and is
counted in :data:`DROPPED_SESSIONS`. A begin the worker refuses (an outage) also drops the
session. Raised instead, since every session would fail alike: R-W-7's
``policy_update_regressed`` (a session older than the worker's ``--max-policy-lag`` window),
a setup error (bad token, wrong contract) and an uncertified receipt under
``require_certified``.

The tools come from a *toolkit* (a :class:`rewardseal.trainers.tools.ToolProvider`: its
``tools``, each an ``AgentTool`` with a JSON Schema and ``async call(arguments, session)``, and
``session(identity)``, an async context manager binding them to the episode's sandbox
identity). The loop's ``toolkit`` keyword is the dotted path of a function returning one
(``package.module:function``, called with the registration's ``toolkit_kwargs``); each tool is
wrapped as a verl ``BaseTool`` (:func:`verl_tools`) that calls it with the loop's own session.

Reward integrity (§12): when the loop's ``capture`` is set (``integrity_capture``: a dotted
path to a function returning an :class:`~rewardseal.trainers.integrity.capture.IntegrityCapture`;
verl builds a loop per session, so the function must return this process's one capture), its
sentinel begins each session's episode right after the worker does (before the agent acts)
and each scored session is handed to it with its decoded response (tool turns included, as
verl's ``responses`` hold them): the sentinel scores the same episode the worker scored. Off
by default.

The module imports without verl: ``CertifiedAgentLoop`` is a lazy module attribute
(:mod:`rewardseal.trainers.lazy`), so the registration's
``_target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop`` finds it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.trainers.groups import is_setup_error, mint_episode_id
from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.tools import AgentTool, ToolProvider, openai_tools
from rewardseal.trainers.verl.loop import LoopScorer, settings_from_config
from rewardseal.trainers.verl.settings import missing_verl

__all__ = [
    "AGENT_NAME",
    "CLASS_NAME",
    "DROPPED_SESSIONS",
    "LAG_REFUSAL",
    "DroppedSessions",
    "agent_loop_class",
    "episode_prefix",
    "load_object",
    "policy_update_of",
    "session_identity",
    "verl_tools",
]

logger = logging.getLogger(__name__)

LAG_REFUSAL: Final = "policy_update_regressed"
"""R-W-7's refusal of an update below the worker's window: ``run()`` raises it (the message
names ``--max-policy-lag``; verl logs the session's error and marks its group failed)."""
CLASS_NAME: Final = "CertifiedAgentLoop"
"""The class name (``_target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop``)."""
AGENT_NAME: Final = "rewardseal_tool_agent"
"""The loop's name in the example registration (``default_agent_loop``, a row's ``agent_name``)."""


class DroppedSessions:
    """The per-process count of sessions dropped from their group as unscored (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_reason: dict[str, int] = {}

    def add(self, reason: str) -> None:
        """Count one dropped session, by its reason (``reward_error`` or the outcome)."""
        with self._lock:
            self._by_reason[reason] = self._by_reason.get(reason, 0) + 1

    @property
    def total(self) -> int:
        """How many sessions were dropped in this process."""
        with self._lock:
            return sum(self._by_reason.values())

    def by_reason(self) -> dict[str, int]:
        """A copy of the counts by reason."""
        with self._lock:
            return dict(self._by_reason)


DROPPED_SESSIONS: Final = DroppedSessions()
"""Unscored sessions ``run()`` returned ``[]`` for in this process (also logged, WARNING)."""


def load_object(path: str) -> Any:
    """The object named ``package.module:attribute`` (or ``package.module.attribute``).

    Raises:
        ValidationError: (reason ``invalid_setting``) the path names nothing importable.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ValidationError(f"{path!r} is not a dotted path", reason="invalid_setting")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(f"cannot load {path!r}: {exc}", reason="invalid_setting") from exc


def session_identity(extra_info: Any, session_id: int, sessions: int) -> dict[str, str]:
    """The sandbox identity of session ``session_id`` of a prompt run ``sessions`` times.

    Each session acts on its own sandbox (the worker refuses two open episodes on one identity,
    ``identity_busy``), so a row run more than once (``rollout.n`` > 1) lists one identity per
    session in ``extra_info["oracle_identities"]`` (indexed by ``session_id``); a row run once
    may give ``extra_info["oracle_identity"]``.

    Raises:
        ValidationError: no identity for this session, or one not a mapping of non-empty
            strings, or a single ``oracle_identity`` for several sessions.
    """
    info = extra_info if isinstance(extra_info, Mapping) else {}
    listed = info.get("oracle_identities")
    if listed is not None:
        if not isinstance(listed, Sequence) or isinstance(listed, str | bytes):
            raise ValidationError("extra_info['oracle_identities'] must be a list of mappings")
        if len(listed) < sessions or session_id >= len(listed):
            raise ValidationError(
                f"extra_info['oracle_identities'] lists {len(listed)} identities for "
                f"{sessions} sessions (rollout.n): one sandbox per session"
            )
        identity = listed[session_id]
    else:
        identity = info.get("oracle_identity")
        if identity is not None and sessions > 1:
            raise ValidationError(
                f"one extra_info['oracle_identity'] for {sessions} sessions (rollout.n): "
                "sessions would share a sandbox; list one per session in 'oracle_identities'"
            )
    if not isinstance(identity, Mapping) or not identity:
        raise ValidationError(
            "the row's extra_info must carry the session's sandbox identity "
            "('oracle_identities' per session, or 'oracle_identity' when rollout.n is 1)"
        )
    plain = {str(key): str(value) for key, value in identity.items()}
    if not all(plain.values()):
        raise ValidationError("oracle identity values must be non-empty strings")
    return plain


def policy_update_of(kwargs: Mapping[str, Any], configured: int | None) -> int:
    """The session's policy update: the row's ``global_steps`` (verl V1 sets it per sample),
    else the configured ``policy_update``.

    Raises:
        ValidationError: neither is there, or the row's is negative (a validation row, -1).
    """
    step = kwargs.get("global_steps")
    if step is None:
        step = configured
    if step is None:
        raise ValidationError(
            "no policy update: the row has no 'global_steps' and reward_kwargs give no "
            "policy_update"
        )
    value = int(step)
    if value < 0:
        raise ValidationError(f"policy update {value} is negative (a validation pass?)")
    return value


def episode_prefix(kwargs: Mapping[str, Any]) -> str:
    """A readable prefix for the minted id: the row's ``index`` or ``uid`` (never the id itself,
    which :func:`~rewardseal.trainers.groups.mint_episode_id` makes unique)."""
    for key in ("index", "uid"):
        value = kwargs.get(key)
        if value is not None and str(value):
            return f"verl.{key}-{value}"
    return "verl.session"


def verl_tools(tools: Sequence[AgentTool[Any]], session: Callable[[], Any]) -> list[Any]:
    """Each tool as a verl ``BaseTool`` whose ``execute`` calls it with ``session()``.

    ``session`` is read at call time (the loop opens it in ``run``). A tool's text is the
    agent's observation; verl's ``_call_tool`` already answers an unknown name or bad JSON.

    Raises:
        ValueError: two tools share a name.
        RewardSealError: (reason ``verl_missing``) verl is not installed.
    """
    try:
        from verl.tools.base_tool import BaseTool
        from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    except ImportError as exc:
        raise missing_verl(exc, "the agent loop's tools") from None

    class _SessionTool(BaseTool):  # type: ignore[misc]
        def __init__(self, tool: AgentTool[Any], schema: Mapping[str, Any]) -> None:
            # BaseTool.__init__ prints the schema; set what it would set.
            self.config: dict[str, Any] = {}
            self.tool_schema = OpenAIFunctionToolSchema.model_validate(dict(schema))
            self.name = tool.name
            self._tool = tool

        async def execute(
            self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
        ) -> tuple[Any, float, dict[str, Any]]:
            text = await self._tool.call(parameters, session())
            return ToolResponse(text=text), 0.0, {}

    schemas = openai_tools(tools)  # raises on a repeated name
    return [_SessionTool(tool, schema) for tool, schema in zip(tools, schemas, strict=True)]


_lazy = LazyClasses(__name__)


@_lazy.builds(CLASS_NAME)
def agent_loop_class() -> type[Any]:
    """``CertifiedAgentLoop``: a verl ``ToolAgentLoop`` subclass, built once.

    verl builds it per session with its own keyword arguments plus the registration's:
    ``toolkit`` (required: the dotted path of a function returning a ``ToolProvider``, such as
    ``rewardseal_kit.tools.mockmed:mockmed_toolbox``), ``toolkit_kwargs`` (its keyword
    arguments, e.g. the service's ``base_url`` and ``token``) and ``integrity_capture``
    (optional). The worker settings are ``config.reward.reward_kwargs``
    (:func:`rewardseal.trainers.verl.loop.settings_from_config`), as for the reward managers.

    Raises:
        RewardSealError: (reason ``verl_missing``) verl is not installed.
    """
    try:
        from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    except ImportError as exc:
        raise missing_verl(exc, "the certified agent loop") from None

    class CertifiedAgentLoop(LoopScorer, ToolAgentLoop):  # type: ignore[misc]
        """A tool agent loop whose sessions are begun and scored at a rewardseal worker."""

        def __init__(
            self,
            *args: Any,
            toolkit: str | ToolProvider[Any] | None = None,
            toolkit_kwargs: Mapping[str, Any] | None = None,
            integrity_capture: str | None = None,
            **kwargs: Any,
        ) -> None:
            kwargs.pop("tools", None)  # verl's configured tools: ours replace them
            ToolAgentLoop.__init__(self, *args, tools=None, **kwargs)
            self._init_scorer(settings_from_config(self.config, {}))
            if toolkit is None:
                raise ValidationError(
                    "CertifiedAgentLoop needs 'toolkit' in its agent_loop_config_path entry "
                    "(a dotted path to a function returning the agent's tools)",
                    reason="invalid_setting",
                )
            options = {str(key): value for key, value in dict(toolkit_kwargs or {}).items()}
            kit = load_object(toolkit)(**options) if isinstance(toolkit, str) else toolkit
            self.toolkit: ToolProvider[Any] = kit
            self._session: Any = None
            wrapped = verl_tools(kit.tools, lambda: self._session)
            self.tools = {tool.name: tool for tool in wrapped}
            self.tool_schemas = [
                tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
                for tool in wrapped
            ]
            if integrity_capture is not None:
                self.capture = load_object(integrity_capture)()

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            """One certified session: begin, the turns, score; ``[]`` when unscored."""
            try:
                return await self._certified_session(sampling_params, kwargs)
            finally:
                # verl builds a loop per session: its worker channel ends with it.
                await self.aclose()

        async def _certified_session(
            self, sampling_params: dict[str, Any], kwargs: dict[str, Any]
        ) -> Any:
            extra_info = kwargs.get("extra_info") or {}
            session_id = int(kwargs.get("session_id") or 0)
            identity = session_identity(extra_info, session_id, self._sessions())
            step = policy_update_of(kwargs, self.settings.policy_update)
            episode_id = mint_episode_id(episode_prefix(kwargs), step, session_id)
            try:
                await self.client().begin(
                    episode_id, self.settings.reward_contract_digest, identity
                )
            except RewardSealError as error:
                if is_setup_error(error):
                    raise
                return self._drop(episode_id, error.reason or "begin_failed")
            if self.capture is not None:
                # The sentinel opens the same episode before the agent acts (R-I-5); its
                # client blocks, and a sentinel refusal is that row's, never the reward's.
                await asyncio.to_thread(
                    self.capture.begin_sentinel, [(episode_id, identity)], policy_update=step
                )
            async with self.toolkit.session(identity) as session:
                self._session = session
                try:
                    output = await ToolAgentLoop.run(self, sampling_params, **kwargs)
                finally:
                    self._session = None
            sample_info = {"episode_id": episode_id, "oracle_identity": identity}
            for key in ("record_id", "runtime_signal"):
                if key in extra_info:
                    sample_info[key] = extra_info[key]
            text = None
            if self.capture is not None:
                text = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
            scored = await self.score_one(
                sample_info, kwargs.get("uid"), {"global_steps": step}, text=text
            )
            extra = scored["reward_extra_info"]
            if scored["reward_score"] is None:
                return self._drop(episode_id, extra["reward_error"] or extra["reward_outcome"])
            output.reward_score = float(scored["reward_score"])
            output.extra_fields["reward_extra_info"] = extra
            return output

        @staticmethod
        def _error_row(sample: Any, error: RewardSealError) -> Any:
            # Below the worker's policy-lag window every late session of an async trainer
            # would be refused alike: a setting to raise (the message names it), not an
            # unscored session to drop quietly.
            if error.reason == LAG_REFUSAL:
                raise error
            return LoopScorer._error_row(sample, error)

        def _sessions(self) -> int:
            """How many sessions of a prompt run (``rollout.n``; the largest of it and its
            validation ``n``, which a validation pass uses)."""
            rollout = self.rollout_config
            return max(int(rollout.n), int(rollout.val_kwargs.n))

        @staticmethod
        def _drop(episode_id: str, reason: str) -> list[Any]:
            DROPPED_SESSIONS.add(reason)
            logger.warning(
                "episode %s unscored (%s): dropped from its GRPO group (%d dropped so far)",
                episode_id,
                reason,
                DROPPED_SESSIONS.total,
            )
            return []

    return CertifiedAgentLoop


def __getattr__(name: str) -> Any:
    """``CertifiedAgentLoop`` on first access (hydra's ``_target_`` lookup)."""
    return _lazy.attribute(name)
