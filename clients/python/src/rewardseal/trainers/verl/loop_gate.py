"""The integrity gate in verl 0.9.1's reward loop: one capture and one gate on the DRIVER.

verl's reward loop scores one sample at a time in Ray ``RewardLoopWorker`` actors
(:meth:`CertifiedRewardLoopManager.run_single <rewardseal.trainers.verl.loop>`); no worker
knows when a boundary's batch is complete. The driver does: ``RewardLoopManager.
compute_rm_score`` gathers every worker's answers and calls the manager class's
``assemble_rm_scores(data, scores)`` with the whole unpadded batch (its ``extra_info``, ``uid``
and ``responses``) and each sample's own score (None when unscored). That classmethod is where
:class:`LoopGate` runs, after the R-T-1 fill and before the ``rm_scores`` go back to the trainer:

* the batch's rows go to ONE driver-side :class:`~rewardseal.trainers.integrity.capture.
  IntegrityCapture` (record identity, candidate, episode, the decoded response, the optimizer's
  raw score: None for an unscored sample, never the group fill, R-T-1), which asks the sentinel
  for its own receipts and delivers the rows to control;
* then :meth:`StepGate.after_batch <rewardseal.trainers.integrity.gate.StepGate.after_batch>`:
  the binding checked on the first batch, a boundary audited once its batch is captured, and a
  pause, stop or fork raises ``IntegrityHalted`` (naming the audit) out of ``compute_rm_score``,
  so the trainer's step never receives the batch's rewards.

Install it in the driver with :func:`install_loop_gate` (process-local: the Ray workers never
see it, and their per-sample ``capture`` must stay off, or each row would be captured twice).
The policy update is ``meta_info["global_steps"]`` when the batch carries it, else the configured
one, the same rule the workers state their receipts with
(:func:`rewardseal.trainers.verl.policy_update_from`). verl 0.9.1's ``fit`` puts no
``global_steps`` on the batch it hands ``compute_rm_score`` (and sends validation batches the
same way, unmarked), so on that path every batch is the configured boundary, audited once; a
loop of one's own sets ``global_steps`` and installs the gate around training batches only.

Only the ``compute_rm_score`` path calls ``assemble_rm_scores`` (verl 0.9.1 with
``trainer.use_v1=false`` and a reward model enabled, or a custom loop calling it). In streaming
mode (no reward model, the rule-based default) the agent loop places the scores itself; there
:class:`~rewardseal.trainers.verl.streaming.CertifiedAgentLoopManager`'s ``generate_sequences``
runs the installed gate (:meth:`LoopGate.after_rollout`) on the whole training batch, with the
streamed scores as the workers made them (NaN: unscored) and the generation batch's
``global_steps``, before the R-T-1 fill is returned to the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.feed import capture_batch, record_id_for
from rewardseal.trainers.integrity.gate import StepGate
from rewardseal.trainers.verl.manager import samples_from_batch
from rewardseal.trainers.verl.tensors import response_texts

__all__ = ["LoopGate", "install_loop_gate", "installed_loop_gate"]


def _raw(score: float | None) -> float | None:
    """A worker's score as the optimizer's raw number: None (or NaN) is unscored."""
    if score is None:
        return None
    value = float(score)
    return None if math.isnan(value) else value


class LoopGate:
    """The driver's capture and gate over a reward-loop batch (see the module docstring).

    Args:
        capture: the run's one capture (None: nothing captured, the gate still runs).
        gate: the :class:`StepGate` over the capture's monitor.
        tokenizer: decodes each sample's valid response tokens for the output digest (only
            needed by :meth:`after_assembly` with a capture).
        policy_update: the configured policy update, used when a batch carries no
            ``meta_info["global_steps"]`` (verl 0.9.1's reward batches do not).
    """

    def __init__(
        self,
        capture: IntegrityCapture | None,
        gate: StepGate,
        *,
        tokenizer: Any = None,
        policy_update: int | None = None,
    ) -> None:
        self.capture = capture
        self.gate = gate
        self.tokenizer = tokenizer
        self.policy_update = policy_update

    def step_of(self, meta_info: Mapping[str, Any] | None) -> int:
        """The batch's policy update: ``global_steps`` when set, else the configured one.

        Raises:
            ValidationError: neither is there.
        """
        step = (meta_info or {}).get("global_steps")
        if step is None:
            step = self.policy_update
        if step is None:
            raise ValidationError(
                "the reward-loop gate needs a policy update: the batch has no "
                "meta_info['global_steps'] and the gate was given no policy_update"
            )
        return int(step)

    def after_batch(
        self,
        extra_infos: Sequence[Any],
        uids: Sequence[Any],
        scores: Sequence[float | None],
        *,
        texts: Sequence[str] | None,
        meta_info: Mapping[str, Any] | None,
    ) -> None:
        """Capture the batch's rows, then the gate (no torch needed).

        ``extra_infos`` and ``uids`` are the batch's columns, ``scores`` each sample's own
        score as ``run_single`` returned it (None or NaN: unscored), ``texts`` each response.

        Raises:
            ValidationError: misaligned columns, a sample without ``episode_id``, no policy
                update, or a capture at a boundary without ``texts``.
            IntegrityBufferFull: from the capture.
            BindingRefused: the binding cannot gate this run (first batch).
            IntegrityHalted: the audit paused, stopped or forked the run.
        """
        if len(scores) != len(extra_infos):
            raise ValidationError(f"{len(scores)} reward scores for {len(extra_infos)} samples")
        step = self.step_of(meta_info)
        samples = samples_from_batch(list(extra_infos), list(uids))
        records = [
            info.get("record_id") if isinstance(info, Mapping) else None for info in extra_infos
        ]
        capture_batch(
            self.capture,
            policy_update=step,
            episode_ids=[sample.episode_id for sample in samples],
            texts=texts,
            scalars=[_raw(score) for score in scores],
            record_ids=[
                record_id_for(record, sample.oracle_identity, sample.episode_id)
                for record, sample in zip(records, samples, strict=True)
            ],
            identities=[sample.oracle_identity for sample in samples],
            group_ids=[str(sample.group) for sample in samples],
            signals=[sample.runtime_signal for sample in samples],
        )
        self.gate.after_batch(step)

    def after_assembly(self, data: Any, scores: Sequence[float | None]) -> None:
        """:meth:`after_batch` over a verl ``DataProto`` (``assemble_rm_scores``' arguments).

        Raises:
            ValidationError: the batch has no ``extra_info`` or ``uid`` column, or no tokenizer
                to read the responses with while a capture wants them.
            IntegrityHalted: see :meth:`after_batch`.
        """
        self.after_rollout(data, data, scores)

    def after_rollout(self, prompts: Any, output: Any, scores: Sequence[float | None]) -> None:
        """:meth:`after_batch` over a streamed batch: the columns and ``global_steps`` of the
        generation batch ``prompts``, the responses of ``output`` (row for row).

        Raises:
            ValidationError, IntegrityHalted: see :meth:`after_assembly`.
        """
        columns = prompts.non_tensor_batch
        for name in ("extra_info", "uid"):
            if name not in columns:
                raise ValidationError(f"the batch has no {name!r} column: the gate needs it")
        meta_info = prompts.meta_info or {}
        wanted = self.capture is not None and self.capture.captures(self.step_of(meta_info))
        texts = response_texts(output, self.tokenizer) if wanted else None
        self.after_batch(
            list(columns["extra_info"]),
            list(columns["uid"]),
            list(scores),
            texts=texts,
            meta_info=meta_info,
        )


_INSTALLED: LoopGate | None = None


def install_loop_gate(gate: LoopGate | None) -> LoopGate | None:
    """Make ``gate`` the one ``assemble_rm_scores`` runs in THIS process (the driver); None
    removes it. Returns the gate it replaced."""
    global _INSTALLED
    previous, _INSTALLED = _INSTALLED, gate
    return previous


def installed_loop_gate() -> LoopGate | None:
    """The gate :func:`install_loop_gate` installed in this process, if any."""
    return _INSTALLED
