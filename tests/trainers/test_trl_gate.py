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
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from rewardseal.errors import BindingRefused, RewardSealError, ValidationError
from rewardseal.trainers import trl_gate
from rewardseal.trainers.trl_gate import UNMONITORED_MESSAGE, GateCore, IntegrityHalted


@dataclass(frozen=True)
class Outcome:
    action: str
    message: str = ""


@dataclass
class ScriptedMonitor:
    """Answers each boundary from a script; records what the gate asked."""

    script: dict[int, str] = field(default_factory=dict)
    in_force: dict[int, str] = field(default_factory=dict)
    refuse_binding: bool = False
    asked: list[int] = field(default_factory=list)
    binding_checks: int = 0

    def check_binding(self) -> None:
        self.binding_checks += 1
        if self.refuse_binding:
            raise BindingRefused(
                "binding cannot gate", metadata={"blockers": "profile_report_only"}
            )

    def at_boundary(self, step: int) -> Outcome:
        self.asked.append(step)
        action = self.script.get(step, "continue")
        return Outcome(action, f"audit audit-{step} decided {action}; review it")

    def decision_in_force(self, step: int) -> Outcome | None:
        action = self.in_force.get(step)
        return None if action is None else Outcome(action, f"audit audit-{step}: {action}")


def control() -> SimpleNamespace:
    return SimpleNamespace(should_save=False, should_training_stop=False)


ARGS = SimpleNamespace(output_dir="/runs/grpo")


def run(gate: GateCore, steps: int, start: int = 0) -> tuple[int, SimpleNamespace]:
    """Drive the gate as Trainer does; the last step run and the control."""
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


def test_boundaries_are_exactly_the_configured_steps() -> None:
    monitor = ScriptedMonitor()
    step, flow = run(GateCore(monitor, boundaries=[3, 7]), 10)
    assert (step, monitor.asked, monitor.binding_checks) == (10, [3, 7], 1)
    assert not flow.should_save
    assert not flow.should_training_stop

    monitor = ScriptedMonitor()
    gate = GateCore(monitor, every=4)
    run(gate, 10)
    assert monitor.asked == [4, 8]
    assert set(gate.outcomes) == {4, 8}
    assert gate.halted is None


def test_a_pause_saves_a_checkpoint_and_stops_with_one_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = ScriptedMonitor(script={6: "pause"})
    gate = GateCore(monitor, every=3)
    with caplog.at_level(logging.WARNING, logger=trl_gate.__name__):
        step, flow = run(gate, 12)
    assert step == 6
    assert monitor.asked == [3, 6]
    assert flow.should_save
    assert flow.should_training_stop
    assert gate.halted is not None
    assert gate.halted.action == "pause"
    assert gate.checkpoint == "/runs/grpo/checkpoint-6"
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1
    assert "paused at step 6" in messages[0]
    assert "/runs/grpo/checkpoint-6" in messages[0]
    assert "audit audit-6 decided pause; review it" in messages[0]


@pytest.mark.parametrize("action", ["stop", "fork"])
def test_stop_and_fork_stop_without_a_save(action: str, caplog: pytest.LogCaptureFixture) -> None:
    monitor = ScriptedMonitor(script={2: action})
    gate = GateCore(monitor, boundaries=[2, 4])
    with caplog.at_level(logging.ERROR, logger=trl_gate.__name__):
        step, flow = run(gate, 5)
    assert step == 2
    assert flow.should_training_stop
    assert not flow.should_save
    assert gate.checkpoint is None
    assert gate.halted == Outcome(action, gate.halted.message)
    assert [
        f"stopped at step 2: audit audit-2 decided {action}" in r.getMessage()
        for r in caplog.records
    ] == [True]


def test_an_unmonitored_run_says_so_once_and_trains(caplog: pytest.LogCaptureFixture) -> None:
    gate = GateCore(None, every=1)
    with caplog.at_level(logging.WARNING, logger=trl_gate.__name__):
        step, flow = run(gate, 3)
        run(gate, 3)  # a second train() on the same gate: still once
    assert step == 3
    assert not flow.should_training_stop
    assert gate.outcomes == {}
    assert [record.getMessage() for record in caplog.records] == [UNMONITORED_MESSAGE]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_binding_that_cannot_gate_is_refused_before_the_first_step() -> None:
    monitor = ScriptedMonitor(refuse_binding=True)
    gate = GateCore(monitor, every=1)
    with pytest.raises(BindingRefused) as caught:
        run(gate, 3)
    assert caught.value.metadata == {"blockers": "profile_report_only"}
    assert monitor.asked == []


def test_a_resumed_run_goes_on_only_after_a_reviewed_continue() -> None:
    # Paused at 4, reviewed continue: the resumed run trains on and audits the next boundary.
    monitor = ScriptedMonitor(in_force={4: "continue"})
    step, flow = run(GateCore(monitor, every=4), 9, start=4)
    assert step == 9
    assert monitor.asked == [8]
    assert not flow.should_training_stop

    # Not reviewed yet (still a pause), stopped, or forked elsewhere: refused, no step runs.
    for action in ("pause", "stop", "fork"):
        monitor = ScriptedMonitor(in_force={4: action})
        gate = GateCore(monitor, every=4)
        with pytest.raises(
            IntegrityHalted, match=f"cannot resume at step 4: audit audit-4: {action}"
        ):
            run(gate, 9, start=4)
        assert monitor.asked == []
        assert gate.halted is not None

    # A resume between boundaries, or at one never audited, asks nothing.
    monitor = ScriptedMonitor()
    assert run(GateCore(monitor, every=4), 5, start=2)[0] == 5


def test_the_boundaries_are_checked() -> None:
    monitor = ScriptedMonitor()
    for kwargs in ({}, {"boundaries": [1], "every": 1}, {"boundaries": []}):
        with pytest.raises(ValidationError, match="boundaries"):
            GateCore(monitor, **kwargs)
    for bad in ({"every": 0}, {"every": True}, {"boundaries": [0]}, {"boundaries": [2.0]}):
        with pytest.raises(ValidationError):
            GateCore(monitor, **bad)  # type: ignore[arg-type]
    assert not GateCore(monitor, every=5).is_boundary(0)


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
