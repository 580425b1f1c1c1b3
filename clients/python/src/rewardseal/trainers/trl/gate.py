"""The integrity gate inside a TRL run: a ``TrainerCallback`` on an integrity monitor (R-I-8/9).

Usage (docs/integrity.md, *In a training run*)::

    capture = IntegrityCapture(control, run_id=..., boundary_every=100, ...)
    monitor = IntegrityMonitor(control, binding, capture=capture)
    reward = CertifiedRewardFunction(worker, ..., capture=capture)
    gate = IntegrityGate(monitor)                  # the capture's boundaries; or boundaries=[...]
    trainer = GRPOTrainer(..., reward_funcs=[reward], callbacks=[gate])
    trainer.train()
    if gate.halted is not None:                    # paused, stopped or forked at a boundary
        print(gate.halted.message)

A boundary is a policy update ``u`` (R-I-3, :mod:`rewardseal.trainers.integrity.capture`): the
rows TRL scored with ``trainer_state.global_step == u``, the outputs of the policy after ``u``
updates. TRL scores them inside the next optimizer step, so the gate audits boundary ``u`` in
``on_step_end`` of that step (``state.global_step == u + 1``), once its rows are all captured.

What it does, with transformers 5's callback order (``Trainer._run_epoch``: ``on_step_end``,
then ``_maybe_log_save_evaluate`` saves when ``control.should_save``, then the loop breaks on
``control.should_training_stop``; ``Trainer.train`` loads a resumed checkpoint's state before
``on_train_begin``):

* ``on_train_begin``: :meth:`IntegrityMonitor.start`: a run without a binding is logged
  *unmonitored*, once, loudly, and trains on; a binding that cannot gate raises
  ``BindingRefused`` before the first step; a run whose gate (R-I-10: the decision in force for
  each boundary, a stop final) is not ``continue`` (an unreviewed pause, a stop, a fork)
  raises :class:`~rewardseal.core.errors.IntegrityHalted` before the first step, so a resumed run
  goes on only after a reviewed ``continue``.
* ``on_step_end`` after a boundary's step: :meth:`IntegrityMonitor.at_boundary` (seal, audit,
  decision). ``continue`` and ``deferred`` (control away) train on. ``pause`` sets
  ``control.should_save`` and ``control.should_training_stop``: the trainer writes
  ``checkpoint-<step>`` and stops, and ``on_save`` logs where the checkpoint is and how to
  resume; ``stop`` and ``fork`` stop without a save (a fork names the checkpoint to resume
  from, under a new run id: the fork's boundaries are new evidence).

All the logic is :class:`GateCore` (no transformers import); :func:`integrity_gate_class`
builds ``IntegrityGate = GateCore + transformers.TrainerCallback`` on first use, so this module
imports without transformers (``rewardseal.trainers.trl.IntegrityGate`` is a lazy attribute).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from rewardseal.trainers.integrity.gate import BoundaryGate
from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.trl.callback_base import trainer_callback_base

__all__ = [
    "CHECKPOINT_PREFIX",
    "CLASS_NAME",
    "GateCore",
    "integrity_gate_class",
]

logger = logging.getLogger(__name__)

CLASS_NAME: Final = "IntegrityGate"
CHECKPOINT_PREFIX: Final = "checkpoint"
"""transformers' ``PREFIX_CHECKPOINT_DIR``: a save at global step N writes ``checkpoint-N``."""


class GateCore(BoundaryGate):
    """The gate's logic over transformers-shaped ``args``/``state``/``control`` objects; the
    boundaries and the monitor are :class:`~rewardseal.trainers.integrity.gate.BoundaryGate`'s.
    """

    checkpoint: str | None = None
    """The checkpoint a pause saved (``<output_dir>/checkpoint-<global step>``)."""

    # -- the events the gate acts on (transformers' TrainerCallback signatures) ---------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Check the binding (or log the run unmonitored); refuse to go past a halt.

        Raises:
            BindingRefused: the binding cannot gate this run.
            IntegrityHalted: the run's gate (R-I-10) is not continue.
        """
        self.checkpoint = None  # a resumed train() starts afresh
        self.begin(int(state.global_step))
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """After a boundary's step: audit it; a pause saves a checkpoint and stops training."""
        outcome = self.audit(int(state.global_step) - 1)
        if outcome is None or outcome.proceeds:
            return control
        control.should_training_stop = True
        if outcome.action == "pause":
            control.should_save = True
            self.checkpoint = os.path.join(
                str(args.output_dir), f"{CHECKPOINT_PREFIX}-{int(state.global_step)}"
            )
        else:
            logger.error(
                "reward integrity: training stopped after step %d: %s",
                int(state.global_step),
                outcome.message,
            )
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """After the pause's checkpoint is written: where it is and how the run resumes."""
        halted = self.halted
        if halted is not None and halted.action == "pause" and self.checkpoint:
            logger.error(
                "reward integrity: training paused after step %d (audit %s); checkpoint saved "
                "to %s; once the audit is reviewed `continue`, resume with "
                "trainer.train(resume_from_checkpoint=%r)",
                int(state.global_step),
                halted.audit_id,
                self.checkpoint,
                self.checkpoint,
            )
        return control


_lazy = LazyClasses(__name__)


@_lazy.builds(CLASS_NAME)
def integrity_gate_class() -> type[Any]:
    """``IntegrityGate``: :class:`GateCore` as a ``transformers.TrainerCallback``, built once.

    Raises:
        RewardSealError: (reason ``transformers_missing``) transformers is not installed.
    """
    TrainerCallback = trainer_callback_base("the integrity gate")  # noqa: N806 (a class)

    class IntegrityGate(GateCore, TrainerCallback):  # type: ignore[misc,valid-type]
        """The integrity gate as a TRL/transformers callback; see the module docstring."""

    return IntegrityGate


def __getattr__(name: str) -> Any:
    """``IntegrityGate`` on first access (:mod:`rewardseal.trainers.lazy`)."""
    return _lazy.attribute(name)
