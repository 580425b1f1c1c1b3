"""Which boundaries a trainer audits, and what it does with the answer (R-I-8..10).

:class:`BoundaryGate` is what every trainer hook shares on top of
:class:`~rewardseal.trainers.integrity.monitor.IntegrityMonitor`: the boundaries to audit (the
capture's by default; a boundary the capture keeps no row for is refused), ``begin`` before the
first step (the binding checked, the run labelled unmonitored, a resumed run held to the
run's gate: the decision in force for each boundary, a stop final) and ``audit`` at a boundary
(each at most once, the outcome kept). TRL's callback (:mod:`rewardseal.trainers.trl.gate`)
turns a halt into a checkpoint and a stop; verl's batch reward manager uses :class:`StepGate`,
which raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rewardseal.core.errors import IntegrityHalted, ValidationError
from rewardseal.trainers.integrity.monitor import GateOutcome, IntegrityMonitor

__all__ = ["BoundaryGate", "StepGate"]


def _checked_step(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _halted(outcome: GateOutcome, where: str) -> IntegrityHalted:
    return IntegrityHalted(
        f"reward integrity: the run may not train {where}: {outcome.message}",
        metadata={"action": outcome.action, "audit_id": outcome.audit_id or ""},
    )


class BoundaryGate:
    """The boundaries of one run and the monitor that audits them.

    Args:
        monitor: the run's :class:`IntegrityMonitor`; None is an unmonitored run (logged once).
        boundaries: the policy updates to audit, or
        every: audit every N policy updates (0, N, 2N, ...); neither: the capture's
            ``boundary_every`` (every 1 for an unmonitored run, where nothing is audited).

    Raises:
        ValidationError: both ``boundaries`` and ``every``, an empty or negative boundary, or a
            boundary the monitor's capture does not capture (not a multiple of its
            ``boundary_every``: it would be sealed empty and never audited).
    """

    def __init__(
        self,
        monitor: IntegrityMonitor | None,
        *,
        boundaries: Iterable[int] | None = None,
        every: int | None = None,
    ) -> None:
        self.monitor = monitor if monitor is not None else IntegrityMonitor(None, None)
        capture = self.monitor.capture
        captured_every = 1 if capture is None else capture.boundary_every
        if boundaries is not None and every is not None:
            raise ValidationError("give the gate boundaries=[...] or every=N, not both")
        self.every = 0
        self.boundaries: frozenset[int] = frozenset()
        if boundaries is not None:
            steps = [_checked_step(step, "a boundary", 0) for step in boundaries]
            if not steps:
                raise ValidationError("boundaries must name at least one policy update")
            self.boundaries = frozenset(steps)
        else:
            self.every = _checked_step(captured_every if every is None else every, "every", 1)
        wanted = sorted(self.boundaries) if boundaries is not None else [self.every]
        uncaptured = [step for step in wanted if step % captured_every]
        if uncaptured:
            raise ValidationError(
                f"boundaries {uncaptured} are not captured: the capture keeps every "
                f"{captured_every}th policy update (boundary_every)"
            )
        self.outcomes: dict[int, GateOutcome] = {}
        """Each audited boundary's outcome this run, by boundary (policy update)."""
        self.halted: GateOutcome | None = None
        """The outcome that stopped the run (pause, stop or fork); None while it runs on."""

    def is_boundary(self, policy_update: int) -> bool:
        """Whether the gate audits the rows scored at ``policy_update``."""
        if policy_update < 0:
            return False
        if self.every:
            return policy_update % self.every == 0
        return policy_update in self.boundaries

    def begin(self, step: int) -> None:
        """Before the first step of a (resumed) run: :meth:`IntegrityMonitor.start`.

        Raises:
            BindingRefused: the binding cannot gate this run.
            IntegrityHalted: the run's gate (R-I-10) is not continue.
        """
        self.halted = None
        outcome = self.monitor.start()
        if not outcome.proceeds:
            self.halted = outcome
            raise _halted(outcome, f"at step {step}")

    def audit(self, boundary: int) -> GateOutcome | None:
        """Audit ``boundary`` once it is a boundary of this gate (None otherwise, or when it
        was audited already, or for an unmonitored run); a halting outcome is kept in
        :attr:`halted`."""
        if not self.monitor.monitored or not self.is_boundary(boundary):
            return None
        if boundary in self.outcomes:
            return None
        outcome = self.monitor.at_boundary(boundary)
        self.outcomes[boundary] = outcome
        if not outcome.proceeds:
            self.halted = outcome
        return outcome


class StepGate(BoundaryGate):
    """The gate for a loop whose only way to stop is an exception: verl's batch reward manager
    (``CertifiedRewardManager.gate``; verl 0.9.1 with ``trainer.use_v1=false``).

    Call :meth:`after_batch` once a batch's rows are captured (the manager does, after the
    rewards are computed and before they are returned). The first call checks the binding;
    at a boundary the audit runs, and a pause, stop or fork raises :class:`IntegrityHalted`
    (metadata ``action``, ``audit_id``): the trainer's step does not use the batch, and the run
    resumes from its last checkpoint (verl: ``trainer.resume_mode=auto``; pick a
    ``trainer.save_freq`` that divides the boundaries) once a reviewer continued the audit.
    """

    _begun = False  # set on the instance by the first batch

    def after_batch(self, policy_update: int) -> None:
        """The hook: begin on the first batch, audit at a boundary, raise on a halt.

        Raises:
            BindingRefused: the binding cannot gate this run (first batch).
            IntegrityHalted: the run may not go on (see the class docstring).
        """
        if not self._begun:
            self.begin(policy_update)
            self._begun = True
        outcome = self.audit(policy_update)
        if outcome is not None and not outcome.proceeds:
            # The monitor logged the decision; the exception carries it to whoever ran verl.
            raise _halted(outcome, f"past policy update {policy_update}")
