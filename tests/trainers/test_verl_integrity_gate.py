"""The integrity gate in verl's batch reward manager (R-I-8, R-I-9), on a real worker and a real
control plane, without verl or torch (``score_batch`` with the responses' texts).

``manager.gate`` (a ``StepGate`` over the capture's monitor) follows each batch: the binding is
checked on the first one, a boundary is audited once its batch is captured, and a halt raises
``IntegrityHalted`` (verl's loop has no other way to stop) after the batch was captured. The
captured rows carry no sentinel observation and four records: far below the evidence rule, so
the audit is ``incomplete_evidence``, which pauses like a failure.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import check_paused, create_binding, make_capture
from support.integrity_trainer import trainer_client as control_client
from support.verl_episodes import manager_kwargs, play_batch
from support.worker_stack import RunningStack

from rewardseal.core.errors import BindingRefused, IntegrityHalted
from rewardseal.trainers.integrity.gate import StepGate
from rewardseal.trainers.integrity.monitor import (
    UNMONITORED_MESSAGE,
    IntegrityBinding,
    IntegrityMonitor,
)
from rewardseal.trainers.verl import CertifiedRewardManager

TEXTS = [f"response {index}" for index in range(4)]


async def test_a_paused_boundary_stops_the_verl_run_with_the_audit_named(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack))
    try:
        with control_client(integrity_control, timeout=20.0) as client:
            capture = make_capture(client, binding, tmp_path / "buffer")
            capture.boundary_every = 2
            monitor = IntegrityMonitor(client, binding, capture=capture, audit_timeout_s=60.0)
            manager.capture, manager.gate = capture, StepGate(monitor)
            # Policy update 5 is no boundary: scored, nothing audited.
            odd = await play_batch(stack, "odd")
            scored = await asyncio.to_thread(
                lambda: manager.score_batch(
                    odd.extra_infos, odd.uids, {"global_steps": 5}, texts=TEXTS
                )
            )
            assert scored.rewards == odd.expected
            assert manager.gate.outcomes == {}
            # Policy update 6 is: its batch is captured, sealed, audited, and the run halts.
            even = await play_batch(stack, "even")
            with pytest.raises(IntegrityHalted) as caught:
                await asyncio.to_thread(
                    lambda: manager.score_batch(
                        even.extra_infos, even.uids, {"global_steps": 6}, texts=TEXTS
                    )
                )
            audits = await asyncio.to_thread(client.list_audits, run_id=capture.run_id)
    finally:
        manager.close()
    check_paused(manager.gate, caught, audits, boundary=6)
    assert "past policy update 6" in str(caught.value)


async def test_the_binding_is_checked_on_the_first_batch(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    made = await create_binding(integrity_control)
    # The exploratory profile only reports: it cannot gate (R-I-9).
    binding = IntegrityBinding(made.system_revision_id, made.protocol_revision_id, "exploratory")
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack))
    try:
        with control_client(integrity_control, timeout=20.0) as client:
            capture = make_capture(client, binding, tmp_path / "buffer")
            manager.capture = capture
            manager.gate = StepGate(IntegrityMonitor(client, binding, capture=capture))
            played = await play_batch(stack, "first")
            with pytest.raises(BindingRefused) as caught:
                await asyncio.to_thread(
                    lambda: manager.score_batch(
                        played.extra_infos, played.uids, {"global_steps": 1}, texts=TEXTS
                    )
                )
    finally:
        manager.close()
    assert "profile_report_only" in caught.value.metadata["blockers"]
    assert manager.gate.outcomes == {}


async def test_an_unmonitored_verl_run_is_logged_once_and_scores_on(
    stack: RunningStack, caplog: pytest.LogCaptureFixture
) -> None:
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack))
    manager.gate = StepGate(None)
    try:
        with caplog.at_level(logging.WARNING):
            for step, prefix in ((1, "one"), (2, "two")):
                played = await play_batch(stack, prefix)
                got = await asyncio.to_thread(
                    manager.score_batch, played.extra_infos, played.uids, {"global_steps": step}
                )
                assert got.rewards == played.expected
    finally:
        manager.close()
    assert [r.getMessage() for r in caplog.records if "UNMONITORED" in r.getMessage()] == [
        UNMONITORED_MESSAGE
    ]
