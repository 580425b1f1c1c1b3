"""The framework-agnostic integrity gate (docs/spec.md §12, R-I-8, R-I-9).

:class:`IntegrityMonitor` is what a trainer hook (TRL's ``IntegrityGate`` callback, verl's
reward-loop hook) calls:

* :meth:`IntegrityMonitor.start` before the first step: a run with a binding (system, protocol,
  profile revisions) has it resolved by control and refused with its blockers
  (:class:`~rewardseal.core.errors.BindingRefused`) unless it may gate; a run without one is logged
  **unmonitored**, once, loudly. A resumed run is held to the run's gate (a pause stays a
  pause until a reviewer's ``continue``; a stop is final).
* :meth:`IntegrityMonitor.at_boundary` at each boundary: seals the captured shard, starts the
  audit, waits for it (bounded), and answers a :class:`GateOutcome`: ``continue``, ``pause``
  (with the audit id, the reasons and the review command), ``stop``, ``fork`` (with the
  checkpoint to resume from), or ``deferred`` when control is away (the seal waits on disk and
  is audited at a later boundary).

What the run may do is always the run's gate, :func:`rewardseal.core.integrity.run_gate` over every
audit of the run (R-I-10: the decision in force for each boundary, a stop final, never simply
the newest audit), the same function control's views use. The monitor only reads decisions; it
never reviews one, never audits a shard twice (that is the admin's retry) and never touches the
reward (R-I-5).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from rewardseal.core.errors import (
    BindingMismatch,
    BindingRefused,
    RewardSealError,
    ShardAlreadyAudited,
    ValidationError,
)
from rewardseal.core.integrity import BoundaryDecision, RunGate, run_gate
from rewardseal.core.integrity.messages import audit_standing
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.v1 import integrity_pb2 as ipb

__all__ = [
    "DEFAULT_AUDIT_TIMEOUT_S",
    "UNMONITORED_MESSAGE",
    "GateAction",
    "GateOutcome",
    "IntegrityBinding",
    "IntegrityMonitor",
    "retry_command",
    "review_command",
]

DEFAULT_AUDIT_TIMEOUT_S: Final = 300.0
"""How long a boundary waits for its audit before it answers ``deferred``."""
UNMONITORED_MESSAGE: Final = (
    "REWARD INTEGRITY: this run is UNMONITORED: no binding (reward-system, protocol, profile "
    "revisions) was given, so no sentinel audits the reward it optimizes (docs/integrity.md)"
)

GateAction = Literal["continue", "pause", "stop", "fork", "deferred"]

_LOG = logging.getLogger(__name__)


def review_command(audit_id: str) -> str:
    """The command a reviewer runs to let a paused run go on (or stop or fork it)."""
    return (
        f"rewardseal-control integrity audit review {audit_id} "
        "--action continue|stop|fork --reason '...' [--checkpoint <checkpoint>]"
    )


def retry_command(audit_id: str) -> str:
    """The command an admin runs to audit a boundary's evidence again (an audit that ended
    without a decision; a trainer never starts a second audit of a shard, R-I-10)."""
    return f"rewardseal-control integrity audit retry {audit_id} --reason '...'"


@dataclass(frozen=True, slots=True)
class IntegrityBinding:
    """The three revisions a monitored run names together (R-I-9); names of built-in protocols
    and profiles (``balanced_256``, ``human_aligned_integrity``) are accepted."""

    system_revision_id: str
    protocol_revision_id: str
    profile_revision_id: str

    def __post_init__(self) -> None:
        for name in ("system_revision_id", "protocol_revision_id", "profile_revision_id"):
            if not getattr(self, name):
                raise BindingRefused(
                    f"a binding names all three revisions; {name} is missing",
                    metadata={"blockers": name.replace("_revision_id", "_missing")},
                )


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the run does at a boundary.

    ``audit_id``, ``outcome`` (pass/warn/fail/incomplete_evidence) and ``reasons`` come from the
    audit in force; ``checkpoint`` is the reviewer's checkpoint for ``fork``; ``review_command``
    is set on ``pause`` (the review, or for an audit that ended without a decision the admin's
    retry); ``message`` is one line for the log.
    """

    action: GateAction
    boundary: int | None
    message: str
    audit_id: str | None = None
    outcome: str | None = None
    reasons: tuple[str, ...] = ()
    checkpoint: str | None = None
    review_command: str | None = None

    @property
    def proceeds(self) -> bool:
        """True when training goes on (continue, or deferred while control is away)."""
        return self.action in ("continue", "deferred")


class IntegrityMonitor:
    """The gate of one run (see the module docstring).

    ``binding`` None makes the run unmonitored (``capture`` must then be None too).
    ``audit_timeout_s`` bounds the wait for one audit (default :data:`DEFAULT_AUDIT_TIMEOUT_S`).
    """

    def __init__(
        self,
        control: IntegrityClient | None,
        binding: IntegrityBinding | None,
        *,
        capture: IntegrityCapture | None = None,
        audit_timeout_s: float = DEFAULT_AUDIT_TIMEOUT_S,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if binding is not None and (control is None or capture is None):
            raise ValidationError("a monitored run needs the control client and a capture")
        if binding is None and capture is not None:
            raise ValidationError("a capture without a binding would be audited by nothing")
        if (
            capture is not None
            and binding is not None
            and (
                capture.system_revision_id != binding.system_revision_id
                or capture.protocol_revision_id != binding.protocol_revision_id
            )
        ):
            raise ValidationError("the capture and the binding name different revisions")
        if audit_timeout_s <= 0:
            raise ValidationError("audit_timeout_s must be positive")
        self.control = control
        self.binding = binding
        self.capture = capture
        self.audit_timeout_s = audit_timeout_s
        self._log = logger or _LOG
        self._clock = clock
        self._started = False
        self._resolved: tuple[str, str, str] | None = None
        self._unaudited: list[int] = []
        self.audits: dict[int, str] = {}
        """Boundary -> the audit started for it (or found on it)."""

    @property
    def monitored(self) -> bool:
        """True when the run has a binding."""
        return self.binding is not None

    def start(self) -> GateOutcome:
        """Check the binding before the first step (once; later calls answer the same).

        Raises:
            BindingRefused: the binding cannot gate (metadata ``blockers``).
            BindingMismatch: the run's first audit fixed other revisions (R-I-10).
            RewardSealError: control could not be asked (a monitored run does not start
                without its binding checked).
        """
        if self.binding is None or self.control is None or self.capture is None:
            if not self._started:
                self._log.warning(UNMONITORED_MESSAGE)
            self._started = True
            return GateOutcome("continue", None, "unmonitored")
        binding = self.binding
        if not self._started:
            resolved = self.control.resolve_binding(
                binding.system_revision_id,
                binding.protocol_revision_id,
                binding.profile_revision_id,
            )
            if not resolved.gating_eligible:
                blockers = ",".join(resolved.blockers)
                raise BindingRefused(
                    f"the binding cannot gate this run: {blockers or 'not gating-eligible'}",
                    metadata={"blockers": blockers},
                )
            self._resolved = (
                resolved.system_revision_id,
                resolved.protocol_revision_id,
                resolved.profile_revision_id,
            )
        audits = self.control.list_audits(run_id=self.capture.run_id)
        self._check_bound(audits)
        self._started = True
        gate = run_gate(audit_standing(audit) for audit in audits)
        if gate.deciding is None:
            return GateOutcome("continue", None, "monitored; no audit yet")
        return self._outcome(gate.deciding)

    def _check_bound(self, audits: list[ipb.Audit]) -> None:
        """A resumed run must name the binding its first audit fixed (R-I-10): any other would
        have every later audit refused, so it is refused here, before the first step."""
        if not audits or self._resolved is None:
            return
        first = audits[0]
        bound = (first.system_revision_id, first.protocol_revision_id, first.profile_revision_id)
        for field, fixed, given in zip(
            ("system", "protocol", "profile"), bound, self._resolved, strict=True
        ):
            if fixed != given:
                raise BindingMismatch(
                    f"run {first.run_id} is bound to {field} revision {fixed} by its first "
                    f"audit {first.audit_id}; this monitor's binding names {given}",
                    metadata={"field": field, "bound": fixed, "given": given},
                )

    def run_gate(self) -> RunGate:
        """The run's gate as control's audits of the run say now (R-I-10).

        Raises:
            RewardSealError: control could not be asked.
        """
        assert self.control is not None
        assert self.capture is not None
        audits = self.control.list_audits(run_id=self.capture.run_id)
        return run_gate(audit_standing(audit) for audit in audits)

    def at_boundary(self, boundary: int) -> GateOutcome:
        """Seal ``boundary``, audit it (and any earlier boundary whose seal waited), and answer
        what the run does: the run's gate (:meth:`run_gate`, R-I-10) once an audit ended, so a
        pause or stop in force on an earlier boundary answers here too; ``deferred`` while a
        boundary waits for control and nothing halts.

        Raises:
            RewardSealError: delivery is stuck on a refusal resending cannot fix (a wrong token,
                an unknown revision).
            BindingMismatch: control refused the audit: the run is bound to other revisions
                (R-I-10).
        """
        if self.binding is None or self.capture is None or self.control is None:
            return GateOutcome("continue", boundary, "unmonitored")
        capture = self.capture
        capture.seal(boundary)
        capture.raise_if_stuck()
        if boundary not in self._unaudited:
            self._unaudited.append(boundary)
        finished: list[ipb.Audit] = []
        deferred: list[int] = []
        for pending in list(self._unaudited):
            shard_id = capture.shard_ids.get(pending)
            if shard_id is None:
                if pending in capture.pending_seals():
                    deferred.append(pending)
                else:  # sealed with no row: nothing to audit
                    self._unaudited.remove(pending)
                continue
            got = self._audit(pending, shard_id)
            if got is None:
                deferred.append(pending)
                continue
            self._unaudited.remove(pending)
            finished.append(got)
        gate = self._gate_after(finished)
        if gate is not None and not gate.proceeds and gate.deciding is not None:
            return self._outcome(gate.deciding)
        if deferred:
            message = (
                f"reward integrity deferred: boundaries {deferred} wait for control "
                f"({capture.buffer.rows} rows buffered at {capture.buffer.path})"
            )
            self._log.warning(message)
            return GateOutcome("deferred", boundary, message)
        if gate is not None and gate.deciding is not None:
            return self._outcome(gate.deciding)
        return GateOutcome("continue", boundary, f"boundary {boundary} captured no row")

    def _gate_after(self, finished: list[ipb.Audit]) -> RunGate | None:
        """The run's gate once ``finished`` (this call's audits) ended; None when none did.

        The whole run's audits are read, so a reviewer's stop of an earlier boundary halts the
        run here too. If control cannot list them right now, the gate of this call's audits
        answers (the same rule over fewer audits; the next boundary reads the whole run again).
        """
        if not finished:
            return None
        try:
            return self.run_gate()
        except RewardSealError as exc:
            self._log.warning("reward integrity: the run's audits could not be listed: %s", exc)
            return run_gate(audit_standing(audit) for audit in finished)

    def _audit(self, boundary: int, shard_id: str) -> ipb.Audit | None:
        """The audit of one sealed shard, started once, once it ended; None when it could not
        finish in time. A shard control holds an audit of already (a start whose answer was
        lost, a resumed run) is followed, never audited again (R-I-10)."""
        assert self.control is not None
        assert self.binding is not None
        try:
            audit_id = self.audits.get(boundary)
            if audit_id is None:
                try:
                    started = self.control.start_audit(shard_id, self.binding.profile_revision_id)
                    audit_id = started.audit_id
                except ShardAlreadyAudited as exc:
                    audit_id = exc.metadata["audit_id"]
                self.audits[boundary] = audit_id
            audit = self.control.wait_for_audit(audit_id, deadline=self.audit_timeout_s)
        except BindingMismatch:
            raise  # no later boundary could be audited either: never a silent "deferred"
        except RewardSealError as exc:
            self._log.warning("reward integrity: audit of boundary %d: %s", boundary, exc)
            return None
        ended = (
            ipb.AuditState.AUDIT_STATE_DONE,
            ipb.AuditState.AUDIT_STATE_FAILED,
            ipb.AuditState.AUDIT_STATE_CANCELLED,
        )
        return audit if audit.state in ended else None

    def outcome_of(self, audit_id: str) -> GateOutcome:
        """The gate outcome of the decision in force on the one audit ``audit_id`` (a reviewed
        ``continue`` after a pause answers ``continue``); the run's answer is :meth:`run_gate`."""
        assert self.control is not None
        deciding = run_gate([audit_standing(self.control.get_audit(audit_id))]).deciding
        if deciding is None:
            raise ValidationError(f"audit {audit_id} has not ended yet")
        return self._outcome(deciding)

    def _outcome(self, decided: BoundaryDecision) -> GateOutcome:
        """What one boundary decision in force means for the run, with its log line."""
        entry = decided.decision
        audit_id, boundary = decided.audit_id, decided.boundary
        if entry is None:
            # No decision (R-I-7: execution errors decide nothing): the run pauses for a person.
            state = decided.state
            command = retry_command(audit_id)
            message = (
                f"reward integrity: audit {audit_id} of boundary {boundary} {state} without a "
                f"decision; the run is paused until an admin retries it: {command}"
            )
            self._log.error(message)
            return GateOutcome(
                "pause",
                boundary,
                message,
                audit_id=audit_id,
                reasons=(f"audit_{state}",),
                review_command=command,
            )
        action: GateAction = entry.action
        outcome = entry.outcome
        reasons = tuple(entry.reasons)
        where = f"audit {audit_id} of boundary {boundary}"
        if action == "pause":
            command = review_command(audit_id)
            message = (
                f"REWARD INTEGRITY PAUSE: {where} decided {outcome}: {', '.join(reasons)}. "
                f"The run is paused; to resume, a reviewer runs: {command}"
            )
            self._log.error(message)
            return GateOutcome(
                "pause",
                boundary,
                message,
                audit_id=audit_id,
                outcome=outcome,
                reasons=reasons,
                review_command=command,
            )
        if action == "fork":
            message = f"reward integrity: {where}: fork from checkpoint {entry.checkpoint}"
        elif action == "stop":
            message = f"reward integrity: {where}: stop, final ({entry.review_reason})"
        else:
            message = f"reward integrity: {where} decided {outcome}: continue"
        self._log.info(message)
        return GateOutcome(
            action,
            boundary,
            message,
            audit_id=audit_id,
            outcome=outcome,
            reasons=reasons,
            checkpoint=entry.checkpoint or None,
        )
