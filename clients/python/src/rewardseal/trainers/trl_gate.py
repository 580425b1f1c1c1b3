"""The integrity gate inside a TRL run: a ``TrainerCallback`` on an integrity monitor (R-I-8/9).

Usage::

    monitor = IntegrityMonitor(...)             # rewardseal.trainers.integrity_monitor
    gate = IntegrityGate(monitor, boundaries=[100, 400])   # or every=100
    trainer = GRPOTrainer(..., callbacks=[gate])
    trainer.train()
    if gate.halted is not None:                 # paused, stopped or forked at a boundary
        print(gate.halted.message)

What it does, with transformers 5's callback order (``Trainer._run_epoch``: ``on_step_end``,
then ``_maybe_log_save_evaluate`` saves when ``control.should_save``, then the loop breaks on
``control.should_training_stop``; ``Trainer.train`` loads a resumed checkpoint's state before
``on_train_begin``):

* ``on_train_begin``: without a monitor the run is *unmonitored*, logged once at WARNING, and
  training goes on (R-I-9: never labelled monitored). With one, the binding is checked before
  the first step (a binding that cannot gate raises ``BindingRefused`` there, before any
  step); a run resumed from a checkpoint at a boundary asks the monitor for the decision in
  force there: a reviewed ``continue`` goes on, anything else raises :class:`IntegrityHalted`
  (the run may not resume past an unreviewed pause, a stop, or a fork elsewhere).
* ``on_step_end`` at each configured boundary asks the monitor for the boundary's outcome. On
  ``pause`` (an audit decided ``fail`` or ``incomplete_evidence``) it sets
  ``control.should_save`` and ``control.should_training_stop``: the trainer writes
  ``checkpoint-<step>`` and stops; ``stop`` and ``fork`` stop without a save. ``on_save`` then
  logs one message naming the audit id, the reasons, the checkpoint and the review command.

All the logic is :class:`GateCore` (no transformers import); :func:`integrity_gate_class`
builds ``IntegrityGate = GateCore + transformers.TrainerCallback`` on first use, so this module
imports without transformers (``rewardseal.trainers.trl.IntegrityGate`` is a lazy attribute).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any, Final, Protocol

from rewardseal.errors import RewardSealError, ValidationError

__all__ = [
    "CLASS_NAME",
    "UNMONITORED_MESSAGE",
    "BoundaryMonitor",
    "BoundaryOutcome",
    "GateCore",
    "IntegrityHalted",
    "integrity_gate_class",
]

logger = logging.getLogger(__name__)

CLASS_NAME: Final = "IntegrityGate"
UNMONITORED_MESSAGE: Final = (
    "rewardseal integrity: UNMONITORED RUN: no integrity binding, so no sentinel audits this "
    "reward and nothing will pause the run (docs/integrity.md, R-I-9)"
)
"""Logged once, at WARNING, when a gate has no monitor."""
CHECKPOINT_PREFIX: Final = "checkpoint"
"""transformers' ``PREFIX_CHECKPOINT_DIR``: a save at step N writes ``checkpoint-N``."""


class BoundaryOutcome(Protocol):
    """What the monitor answers for a boundary (``IntegrityMonitor``'s ``GateOutcome``)."""

    @property
    def action(self) -> str:
        """``continue``, ``pause``, ``stop`` or ``fork``."""

    @property
    def message(self) -> str:
        """One line for people: audit id, decision, reasons, review command or checkpoint."""


class BoundaryMonitor(Protocol):
    """The monitor the gate drives (``rewardseal.trainers.integrity_monitor``)."""

    def check_binding(self) -> Any:
        """Refuse (raise) a binding that cannot gate, before the first step (R-I-9)."""

    def at_boundary(self, step: int) -> BoundaryOutcome:
        """Seal the boundary's shard, audit it, and answer the decision's action (R-I-8)."""

    def decision_in_force(self, step: int) -> BoundaryOutcome | None:
        """The action in force at an audited boundary (after reviews), None if none audited."""


class IntegrityHalted(RewardSealError):
    """A resumed run may not go past a boundary whose decision is not a reviewed ``continue``."""

    reason = "integrity_halted"


def _boundaries(boundaries: Iterable[int] | None, every: int | None) -> tuple[frozenset[int], int]:
    if (boundaries is None) == (every is None):
        raise ValidationError("give the gate boundaries=[steps] or every=N, exactly one")
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValidationError(f"every must be a positive number of steps, got {every!r}")
        return frozenset(), every
    steps = list(boundaries or ())
    if not steps:
        raise ValidationError("boundaries must name at least one step")
    for step in steps:
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValidationError(f"a boundary is a positive step number, got {step!r}")
    return frozenset(steps), 0


class GateCore:
    """The gate's logic over transformers-shaped ``args``/``state``/``control`` objects.

    Args:
        monitor: the run's integrity monitor, or None for an unmonitored run (logged loudly).
        boundaries: the global steps at which to audit, or
        every: audit every N steps (exactly one of the two).
    """

    def __init__(
        self,
        monitor: BoundaryMonitor | None,
        *,
        boundaries: Iterable[int] | None = None,
        every: int | None = None,
    ) -> None:
        self.monitor = monitor
        self.boundaries, self.every = _boundaries(boundaries, every)
        self.outcomes: dict[int, BoundaryOutcome] = {}
        """Every boundary's outcome this run, by step."""
        self.halted: BoundaryOutcome | None = None
        """The outcome that stopped the run (pause, stop or fork), None while it runs on."""
        self.checkpoint: str | None = None
        """The checkpoint saved at a pause (``<output_dir>/checkpoint-<step>``)."""
        self._warned_unmonitored = False

    def is_boundary(self, step: int) -> bool:
        """Whether the gate audits after global step ``step``."""
        if step < 1:
            return False
        return step % self.every == 0 if self.every else step in self.boundaries

    # -- the three events the gate acts on (transformers' TrainerCallback signatures) ---------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Label an unmonitored run; check the binding; refuse to resume past a halt."""
        if self.monitor is None:
            if not self._warned_unmonitored:
                self._warned_unmonitored = True
                logger.warning(UNMONITORED_MESSAGE)
            return control
        self.monitor.check_binding()
        step = int(state.global_step)
        if step and self.is_boundary(step):
            outcome = self.monitor.decision_in_force(step)
            if outcome is not None and outcome.action != "continue":
                self.halted = outcome
                raise IntegrityHalted(
                    f"rewardseal integrity: cannot resume at step {step}: {outcome.message}",
                    metadata={"step": str(step), "action": outcome.action},
                )
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """At a boundary: audit; a pause saves a checkpoint and stops, stop/fork just stop."""
        step = int(state.global_step)
        if self.monitor is None or not self.is_boundary(step):
            return control
        outcome = self.monitor.at_boundary(step)
        self.outcomes[step] = outcome
        if outcome.action == "continue":
            return control
        self.halted = outcome
        control.should_training_stop = True
        if outcome.action == "pause":
            control.should_save = True
            self.checkpoint = os.path.join(str(args.output_dir), f"{CHECKPOINT_PREFIX}-{step}")
        else:
            logger.error(
                "rewardseal integrity: training stopped at step %d: %s", step, outcome.message
            )
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """After the pause's checkpoint is written: the one message a person acts on."""
        if self.halted is not None and self.halted.action == "pause" and self.checkpoint:
            logger.error(
                "rewardseal integrity: training paused at step %d, checkpoint %s: %s",
                int(state.global_step),
                self.checkpoint,
                self.halted.message,
            )
        return control


_GATE_CLASS: type[Any] | None = None


def integrity_gate_class() -> type[Any]:
    """``IntegrityGate``: :class:`GateCore` as a ``transformers.TrainerCallback``, built once.

    Raises:
        RewardSealError: (reason ``transformers_missing``) transformers is not installed.
    """
    global _GATE_CLASS
    if _GATE_CLASS is not None:
        return _GATE_CLASS
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise RewardSealError(
            f"transformers is not installed or cannot be imported ({exc}); install trl to use "
            "the integrity gate",
            reason="transformers_missing",
        ) from None

    class IntegrityGate(GateCore, TrainerCallback):  # type: ignore[misc]
        """The integrity gate as a TRL/transformers callback; see the module docstring."""

    IntegrityGate.__module__ = __name__
    IntegrityGate.__qualname__ = CLASS_NAME
    _GATE_CLASS = IntegrityGate
    return IntegrityGate


def __getattr__(name: str) -> Any:
    """``IntegrityGate`` on first access."""
    if name == CLASS_NAME:
        return integrity_gate_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
