"""The TRL integrity gate's logic without transformers (R-I-8, R-I-9).

:class:`GateCore` is driven the way transformers' ``Trainer`` drives a callback: ``on_train_begin``
(with a resumed state's ``global_step``), ``on_step_end`` after each optimizer step (the trainer
saves when ``control.should_save`` and breaks on ``control.should_training_stop``), ``on_save``
after a save. ``args``/``state``/``control`` carry the fields the trainer gives; the monitor is
a scripted one answering what an audit would. The real callback in a real ``GRPOTrainer`` over a
real control plane is tests/integrations/test_trl_integrity_gate.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewardseal.core.errors import BindingRefused, IntegrityHalted, RewardSealError, ValidationError
from rewardseal.core.integrity import RewardMapping
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.trainers.integrity.buffer import SignalBuffer
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.monitor import (
    UNMONITORED_MESSAGE,
    GateAction,
    GateOutcome,
    IntegrityBinding,
    IntegrityMonitor,
)
from rewardseal.trainers.trl import gate as trl_gate
from rewardseal.trainers.trl.gate import GateCore


class ScriptedMonitor(IntegrityMonitor):
    """A monitor answering each boundary from a script, recording what the gate asked."""

    def __init__(
        self,
        script: dict[int, GateAction] | None = None,
        *,
        in_force: GateAction = "continue",
        refuse_binding: bool = False,
    ) -> None:
        super().__init__(None, None)
        self.script = script or {}
        self.in_force = in_force
        self.refuse_binding = refuse_binding
        self.asked: list[int] = []
        self.starts = 0

    @property
    def monitored(self) -> bool:
        return True

    def start(self) -> GateOutcome:
        self.starts += 1
        if self.refuse_binding:
            raise BindingRefused("cannot gate", metadata={"blockers": "profile_report_only"})
        return self._answer(self.in_force, None)

    def at_boundary(self, boundary: int) -> GateOutcome:
        self.asked.append(boundary)
        return self._answer(self.script.get(boundary, "continue"), boundary)

    @staticmethod
    def _answer(action: GateAction, boundary: int | None) -> GateOutcome:
        return GateOutcome(
            action,
            boundary,
            f"audit audit-{boundary} decided {action}",
            audit_id=f"audit-{boundary}",
            checkpoint="checkpoint-2" if action == "fork" else None,
        )


def control() -> SimpleNamespace:
    return SimpleNamespace(should_save=False, should_training_stop=False)


ARGS = SimpleNamespace(output_dir="/runs/grpo")


def run(gate: GateCore, steps: int, start: int = 0) -> tuple[int, SimpleNamespace]:
    """Drive the gate as Trainer does (``start``: a resumed checkpoint's global step); the
    last global step run and the control."""
    flow = control()
    state = SimpleNamespace(global_step=start)
    gate.on_train_begin(ARGS, state, flow)
    while state.global_step < steps:
        state.global_step += 1
        gate.on_step_end(ARGS, state, flow)
        if flow.should_save:
            gate.on_save(ARGS, state, flow)
        if flow.should_training_stop:
            break
    return state.global_step, flow


def test_a_boundary_is_audited_at_the_end_of_the_step_that_scored_it() -> None:
    # Boundary u: rows scored at global_step u, i.e. inside step u + 1.
    monitor = ScriptedMonitor()
    step, flow = run(GateCore(monitor, boundaries=[3, 7]), 10)
    assert (step, monitor.asked, monitor.starts) == (10, [3, 7], 1)
    assert not flow.should_save
    assert not flow.should_training_stop

    monitor = ScriptedMonitor()
    gate = GateCore(monitor, every=4)
    run(gate, 10)
    assert monitor.asked == [0, 4, 8]
    assert set(gate.outcomes) == {0, 4, 8}
    assert gate.halted is None


def test_a_deferred_boundary_trains_on() -> None:
    monitor = ScriptedMonitor({2: "deferred"})
    step, flow = run(GateCore(monitor, every=2), 6)
    assert step == 6
    assert not flow.should_training_stop
    assert monitor.asked == [0, 2, 4]


def test_a_pause_saves_a_checkpoint_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    monitor = ScriptedMonitor({6: "pause"})
    gate = GateCore(monitor, every=3)
    with caplog.at_level(logging.INFO, logger=trl_gate.__name__):
        step, flow = run(gate, 12)
    assert step == 7  # boundary 6 is scored inside step 7
    assert monitor.asked == [0, 3, 6]
    assert flow.should_save
    assert flow.should_training_stop
    assert gate.halted == gate.outcomes[6]
    assert gate.halted.action == "pause"
    assert gate.checkpoint == "/runs/grpo/checkpoint-7"
    (message,) = [record.getMessage() for record in caplog.records]
    assert "paused after step 7 (audit audit-6)" in message
    assert "resume_from_checkpoint='/runs/grpo/checkpoint-7'" in message


@pytest.mark.parametrize("action", ["stop", "fork"])
def test_stop_and_fork_stop_without_a_save(
    action: GateAction, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = ScriptedMonitor({2: action})
    gate = GateCore(monitor, boundaries=[2, 4])
    with caplog.at_level(logging.INFO, logger=trl_gate.__name__):
        step, flow = run(gate, 6)
    assert step == 3
    assert flow.should_training_stop
    assert not flow.should_save
    assert gate.checkpoint is None
    assert gate.halted is not None
    assert gate.halted.action == action
    (message,) = [record.getMessage() for record in caplog.records]
    assert f"stopped after step 3: audit audit-2 decided {action}" in message


def test_an_unmonitored_run_says_so_once_and_trains(caplog: pytest.LogCaptureFixture) -> None:
    gate = GateCore(None)
    with caplog.at_level(logging.WARNING):
        step, flow = run(gate, 3)
        run(gate, 3)  # a second train() on the same gate: still once
    assert step == 3
    assert not flow.should_training_stop
    assert gate.outcomes == {}
    assert [record.getMessage() for record in caplog.records] == [UNMONITORED_MESSAGE]
    assert caplog.records[0].levelno == logging.WARNING
    assert not gate.monitor.monitored


def test_a_binding_that_cannot_gate_is_refused_before_the_first_step() -> None:
    monitor = ScriptedMonitor(refuse_binding=True)
    gate = GateCore(monitor, every=1)
    with pytest.raises(BindingRefused) as caught:
        run(gate, 3)
    assert caught.value.metadata == {"blockers": "profile_report_only"}
    assert monitor.asked == []


def test_a_resumed_run_goes_on_only_after_a_reviewed_continue() -> None:
    # Paused after step 5 (boundary 4), reviewed continue: the resumed run trains on.
    monitor = ScriptedMonitor(in_force="continue")
    step, flow = run(GateCore(monitor, every=4), 10, start=5)
    assert step == 10
    assert monitor.asked == [8]
    assert not flow.should_training_stop

    # Not reviewed yet (still a pause), stopped, or forked: refused before any step.
    for action in ("pause", "stop", "fork"):
        monitor = ScriptedMonitor(in_force=action)
        gate = GateCore(monitor, every=4)
        with pytest.raises(IntegrityHalted, match="may not train at step 5") as caught:
            run(gate, 10, start=5)
        assert caught.value.metadata == {"action": action, "audit_id": "audit-None"}
        assert caught.value.reason == "integrity_halted"
        assert monitor.asked == []
        assert gate.halted is not None


def test_the_boundaries_are_checked() -> None:
    monitor = ScriptedMonitor()
    with pytest.raises(ValidationError, match="not both"):
        GateCore(monitor, boundaries=[1], every=1)
    with pytest.raises(ValidationError, match="at least one"):
        GateCore(monitor, boundaries=[])
    for bad in ({"every": 0}, {"every": True}, {"boundaries": [-1]}, {"boundaries": [2.0]}):
        with pytest.raises(ValidationError, match=">="):
            GateCore(monitor, **bad)  # type: ignore[arg-type]
    gate = GateCore(monitor, every=5)
    assert [u for u in range(-1, 11) if gate.is_boundary(u)] == [0, 5, 10]


def test_the_module_imports_without_transformers() -> None:
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        with pytest.raises(RewardSealError) as caught:
            trl_gate.integrity_gate_class()
        assert caught.value.reason == "transformers_missing"
        from rewardseal.trainers import trl

        with pytest.raises(RewardSealError):
            trl.IntegrityGate  # noqa: B018 - the lazy attribute builds the class
    else:  # pragma: no cover - the integrations venv
        assert issubclass(trl_gate.integrity_gate_class(), GateCore)
    with pytest.raises(AttributeError):
        trl_gate.NotAGate  # noqa: B018


def test_the_boundaries_follow_the_capture(tmp_path: Path) -> None:
    # Nothing is called at construction: the client points nowhere.
    control = IntegrityClient("127.0.0.1:1", token="t")
    capture = IntegrityCapture(
        control,
        run_id="run-1",
        system_revision_id="sha256:" + "1" * 64,
        protocol_revision_id="balanced_256",
        mapping=RewardMapping.from_json({"normalization": {"min": 0, "max": 1}, "threshold": 0.5}),
        buffer=SignalBuffer(tmp_path / "buffer"),
        runtime_identity="test",
        checkpoint="policy.checkpoint.0001",
        boundary_every=50,
    )
    binding = IntegrityBinding(capture.system_revision_id, "balanced_256", "strict_integrity")
    monitor = IntegrityMonitor(control, binding, capture=capture)
    try:
        assert GateCore(monitor).every == 50  # the capture's boundaries by default
        assert GateCore(monitor, boundaries=[100, 400]).boundaries == {100, 400}
        assert GateCore(monitor, every=100).every == 100
        # A boundary the capture keeps no row for would be sealed empty and never audited.
        with pytest.raises(ValidationError, match=r"boundaries \[120\] are not captured"):
            GateCore(monitor, boundaries=[100, 120])
        with pytest.raises(ValidationError, match=r"boundaries \[75\] are not captured"):
            GateCore(monitor, every=75)
    finally:
        control.close()
