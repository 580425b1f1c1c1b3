"""verl 0.9.1 streaming rewards: an agent-loop manager that fills unscored samples per uid.

What verl 0.9.1 does (read from the installed wheel, paths under ``verl/``):

* With no reward model (``reward.reward_model.enable=false``, the rule-based case) the trainer
  streams rewards during rollout: ``trainer/ppo/ray_trainer.py`` hands the reward-loop workers
  to the agent-loop manager (``enable_agent_reward_loop``), and each
  ``AgentLoopWorker`` (``experimental/agent_loop/agent_loop.py``) sends every finished sample
  to a reward-loop worker's ``compute_score`` (``_compute_score``: our
  :meth:`CertifiedRewardLoopManager.run_single <rewardseal.trainers.verl.loop>`), which
  answers ``reward_score`` None for an unscored sample.
* ``AgentLoopWorker._postprocess`` builds ``rm_scores`` (the score on the last valid response
  token, ``attention_mask[:, prompt_length:].sum(1) - 1``) only when EVERY score of its chunk
  is not None; one unscored sample leaves the chunk without ``rm_scores`` (and without
  ``meta_info["reward_extra_keys"]``), so ``AgentLoopManager.generate_sequences``'s
  ``DataProto.concat`` fails on mismatched keys, or ``trainer/ppo/reward.py:extract_reward``
  raises ``KeyError``. ``compute_rm_score`` (where ``assemble_rm_scores`` fills per uid) runs
  only with a reward model.
* ``ray_trainer.py`` loads the manager class from
  ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (``load_class_from_fqn``) and
  builds it with ``create``; ``AgentLoopManager.__init__`` wraps ``AgentLoopWorker`` with
  ``ray.remote`` only when the subclass has no ``agent_loop_workers_class``.
* ``fit`` assigns ``uid`` per prompt, ``_get_gen_batch`` keeps ``uid`` and ``extra_info`` in
  the generation batch, ``repeat(rollout.n, interleave=True)`` makes the groups, and the manager
  chunks that batch contiguously over its workers and concatenates their outputs in order: row
  ``i`` of the output is row ``i`` of ``prompts``. The workers' outputs do not carry ``uid`` in
  streaming mode (``_postprocess`` copies the input columns only without reward workers), so
  the manager reads the uids from ``prompts``.

:data:`MANAGER_FQN` names :class:`CertifiedAgentLoopManager`, built on first access:

* its workers (:class:`CertifiedAgentLoopWorker`) hand verl's ``_postprocess`` NaN instead of
  None for an unscored sample, so every chunk gets ``rm_scores`` (NaN on that sample's reward
  token) and the per-sample ``reward_extra_info`` columns ``run_single`` produced
  (``reward_unscored``, ``reward_error``...) stay as they are;
* its ``generate_sequences`` refuses a training batch in which an episode id repeats (R-T-4,
  :func:`rewardseal.trainers.verl.loop.check_episode_ids`: in this mode no
  ``assemble_rm_scores`` sees the whole batch), awaits verl's and then replaces each NaN
  reward token by the mean of the scored samples of the same uid, across chunks, or by
  :data:`rewardseal.trainers.verl.ALL_UNSCORED_GROUP_REWARD` when the whole group is unscored
  (R-T-1, :func:`rewardseal.trainers.verl.loop.fill_loop_scores`). No NaN is left.

The module imports without verl, ray and torch: :func:`agent_loop_worker_class` and
:func:`agent_loop_manager_class` import them and build the subclasses once; both names are lazy
module attributes, so verl's ``load_class_from_fqn`` and Ray's pickling by reference find them.
"""

from __future__ import annotations

import asyncio
import importlib
import math
from collections.abc import Sequence
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.verl.loop import check_episode_ids, fill_loop_scores
from rewardseal.trainers.verl.loop_gate import installed_loop_gate
from rewardseal.trainers.verl.settings import missing_verl

__all__ = [
    "MANAGER_CLASS_NAME",
    "MANAGER_FQN",
    "WORKER_CLASS_NAME",
    "agent_loop_manager_class",
    "agent_loop_worker_class",
    "fill_streamed_rewards",
    "reward_positions",
    "streamed_fills",
    "streamed_score",
    "streamed_scores",
]

WORKER_CLASS_NAME: Final = "CertifiedAgentLoopWorker"
"""The ``AgentLoopWorker`` subclass the manager runs as Ray actors."""
MANAGER_CLASS_NAME: Final = "CertifiedAgentLoopManager"
"""The ``AgentLoopManager`` subclass."""
MANAGER_FQN: Final = f"{__name__}.{MANAGER_CLASS_NAME}"
"""What to set ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` to."""


def streamed_score(score: float | None) -> float:
    """The score a worker hands verl's ``_postprocess``: NaN for an unscored (None) sample.

    verl writes the number as is onto the sample's reward token; the manager fills the NaN.
    """
    return math.nan if score is None else float(score)


def streamed_fills(scores: Sequence[float | None], uids: Sequence[Any]) -> dict[int, float]:
    """R-T-1 for streamed rewards: the value for each unscored row (NaN or None), by row.

    ``scores`` are the reward tokens of the whole batch in order and ``uids`` the batch's
    ``uid`` column; an unscored row takes the mean of its uid group's scored rows, a group
    with no scored row gets :data:`rewardseal.trainers.verl.ALL_UNSCORED_GROUP_REWARD`
    (:func:`rewardseal.trainers.verl.loop.fill_loop_scores`). Scored rows are not in the
    answer: their reward tokens stay exactly as verl wrote them. Pure (no torch).

    Raises:
        ValidationError: the scores and uids are not aligned.
    """
    filled = fill_loop_scores(scores, uids)
    return {
        row: filled[row]
        for row, score in enumerate(scores)
        if score is None or math.isnan(float(score))
    }


def reward_positions(batch: Any) -> Any:
    """Each row's reward token, as verl's ``_postprocess`` places it (a torch index tensor).

    The last valid response token: ``attention_mask[:, prompt_length:].sum(1) - 1`` with
    ``prompt_length`` the width of ``prompts`` (an empty response gives -1, the last column,
    which is also where verl wrote).
    """
    prompt_length = batch["prompts"].size(1)
    return batch["attention_mask"][:, prompt_length:].sum(dim=1) - 1


def streamed_scores(output: Any) -> list[float] | None:
    """Each row's value on its reward token of ``output`` (NaN: unscored), or None when the
    batch has no ``rm_scores`` (no reward workers)."""
    batch = output.batch
    if batch is None or "rm_scores" not in batch:
        return None
    import torch

    positions = reward_positions(batch)
    values: list[float] = batch["rm_scores"][torch.arange(positions.size(0)), positions].tolist()
    return values


def fill_streamed_rewards(output: Any, uids: Sequence[Any] | None) -> Any:
    """Fill the NaN reward tokens of ``output`` (a verl ``DataProto``) in place; returns it.

    ``uids`` is the ``uid`` column of the batch ``output`` was generated from, row for row.
    A batch without ``rm_scores`` (no reward workers: the trainer scores it with its reward
    model later) is returned untouched, as is one without a NaN.

    Raises:
        ValidationError: a reward token is NaN and ``uids`` is missing or misaligned.
        RewardSealError: (reason ``nan_reward``) a NaN is left off the reward tokens.
    """
    scores = streamed_scores(output)
    if scores is None:
        return output
    import torch

    rm_scores = output.batch["rm_scores"]
    positions = reward_positions(output.batch)
    if any(math.isnan(score) for score in scores):
        if uids is None:
            raise ValidationError(
                "the generation batch has no 'uid' column: unscored samples need it (R-T-1)"
            )
        for row, value in streamed_fills(scores, list(uids)).items():
            rm_scores[row, positions[row]] = value
    if bool(torch.isnan(rm_scores).any()):
        raise RewardSealError(
            "a NaN reward is left off the reward tokens of the generated batch",
            reason="nan_reward",
        )
    return output


_lazy = LazyClasses(__name__)


@_lazy.builds(WORKER_CLASS_NAME)
def agent_loop_worker_class() -> type[Any]:
    """``CertifiedAgentLoopWorker``: verl's ``AgentLoopWorker`` with unscored samples as NaN.

    Only with reward workers (streaming): without them every score is None on purpose (the
    trainer's reward model scores the batch) and ``_postprocess`` runs unchanged.

    Raises:
        RewardSealError: (reason ``verl_missing``) verl's agent loop cannot be imported.
    """
    try:
        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    except ImportError as exc:
        raise missing_verl(
            exc, "the streaming agent-loop manager (its agent loop also needs ray, cachetools)"
        ) from None

    class CertifiedAgentLoopWorker(AgentLoopWorker):  # type: ignore[misc]
        """verl's agent-loop worker whose every chunk gets ``rm_scores`` (NaN when unscored)."""

        def _postprocess(
            self,
            inputs: list[Any],
            input_non_tensor_batch: dict[str, Any] | None = None,
            validate: bool = False,
        ) -> Any:
            """verl's ``_postprocess`` with each None ``reward_score`` handed over as NaN."""
            if self.reward_loop_worker_handles is not None:
                inputs = [
                    item
                    if item.reward_score is not None
                    else item.model_copy(update={"reward_score": streamed_score(None)})
                    for item in inputs
                ]
            return super()._postprocess(
                inputs, input_non_tensor_batch=input_non_tensor_batch, validate=validate
            )

    return CertifiedAgentLoopWorker


@_lazy.builds(MANAGER_CLASS_NAME)
def agent_loop_manager_class() -> type[Any]:
    """``CertifiedAgentLoopManager``: verl's ``AgentLoopManager`` that fills per uid.

    Runs :func:`agent_loop_worker_class` as its Ray actors and, after verl's own
    ``generate_sequences``, :func:`fill_streamed_rewards` with the prompts' ``uid`` column.

    Built by verl as ``cls(config=..., llm_client=..., teacher_client=...,
    reward_loop_worker_handles=...)``. It serves the legacy trainer (``trainer.use_v1=false``);
    verl's V1 trainer runs its own ``AgentLoopManagerTQ`` and certifies through
    :class:`~rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop` instead.

    Raises:
        RewardSealError: (reason ``verl_missing``) verl's agent loop cannot be imported.
    """
    worker_class = agent_loop_worker_class()
    try:
        from verl.experimental.agent_loop.agent_loop import AgentLoopManager
        from verl.utils.ray_utils import auto_await
    except ImportError as exc:  # pragma: no cover - the worker class already imported them
        raise missing_verl(
            exc, "the streaming agent-loop manager (its agent loop also needs ray, cachetools)"
        ) from None
    ray = importlib.import_module("ray")  # imported by verl's agent loop already

    class CertifiedAgentLoopManager(AgentLoopManager):  # type: ignore[misc]
        """verl's agent-loop manager whose streamed rewards have no unscored hole (R-T-1)."""

        agent_loop_workers_class = ray.remote(worker_class)

        # verl's own is ``@auto_await @SkipManager.annotate(role="rollout")``: awaiting it from
        # this coroutine gets its coroutine (the rollout skip/cache runs once, inside), and
        # ``@auto_await`` here keeps the trainer's plain synchronous call working.
        @auto_await  # type: ignore[untyped-decorator]
        async def generate_sequences(self, prompts: Any) -> Any:
            """verl's ``generate_sequences``, then each NaN reward filled from its uid group.

            A training batch in which an episode id repeats is refused first (R-T-4: each
            ``run_single`` sees one sample and takes a repeat for a re-score); a validation
            batch is not checked (``_validate`` pads it with copies of its first rows).

            Then, for a training batch, the integrity gate installed in this process (the
            driver; :func:`rewardseal.trainers.verl.loop_gate.install_loop_gate`), if any.

            Raises:
                ValidationError: (reason ``duplicate_episode_id``) an episode id repeats.
                IntegrityHalted: the installed gate's audit paused, stopped or forked the run.
            """
            columns = prompts.non_tensor_batch
            training = not (prompts.meta_info or {}).get("validate", False)
            if "extra_info" in columns and training:
                check_episode_ids(list(columns["extra_info"]))
            output = await super().generate_sequences(prompts)
            gate = installed_loop_gate() if training else None
            # The workers' own scores (NaN: unscored), read before the fill overwrites them.
            raw = None if gate is None else streamed_scores(output)
            filled = fill_streamed_rewards(output, prompts.non_tensor_batch.get("uid"))
            if gate is not None and raw is not None:
                # Blocking (capture, audit): off verl's event loop.
                await asyncio.to_thread(gate.after_rollout, prompts, output, raw)
            return filled

    return CertifiedAgentLoopManager


def __getattr__(name: str) -> Any:
    """The two classes on first access (``load_class_from_fqn``, Ray unpickling)."""
    return _lazy.attribute(name)
