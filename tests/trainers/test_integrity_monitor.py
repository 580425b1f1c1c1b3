"""IntegrityMonitor, the gate every trainer hook builds on (R-I-8, R-I-9), on a real control plane
and a real sentinel worker: a run without a binding is logged unmonitored once; a binding that
cannot gate is refused with its blockers before the first step; a boundary whose sentinel says
the opposite of the optimizer pauses with the audit id, the reasons and the review command; a
reviewed continue lets the resumed run go on, a reviewed stop ends it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import (
    PROFILE,
    PROTOCOL,
    admin_client,
    control_on_file,
    create_binding,
    make_capture,
    patient_for,
    samples,
    stop,
    trainer_client,
)
from support.mockmed_episodes import write_triage
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import BindingMismatch, BindingRefused, ValidationError
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.integrity.monitor import (
    UNMONITORED_MESSAGE,
    IntegrityBinding,
    IntegrityMonitor,
)
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal_kit.mockmed import IDENTITY_KEY

RECORDS = 100  # the evidence rule's minimum for a full decision (R-I-7)


@pytest.fixture
async def sentinel(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


def test_a_run_without_a_binding_is_logged_unmonitored_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = IntegrityMonitor(None, None)
    with caplog.at_level(logging.WARNING):
        assert monitor.start().message == "unmonitored"
        assert monitor.start().action == "continue"
        outcome = monitor.at_boundary(3)
    assert not monitor.monitored
    assert (outcome.action, outcome.boundary, outcome.audit_id) == ("continue", 3, None)
    assert [r.getMessage() for r in caplog.records].count(UNMONITORED_MESSAGE) == 1
    assert "UNMONITORED" in UNMONITORED_MESSAGE


async def test_a_binding_that_cannot_gate_is_refused_with_its_blockers(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    correlated = await create_binding(integrity_control, correlated=True)
    with trainer_client(integrity_control) as client:
        capture = make_capture(client, correlated, tmp_path / "buffer")
        monitor = IntegrityMonitor(client, correlated, capture=capture)
        with pytest.raises(BindingRefused, match="primary_sentinel_correlated") as caught:
            await asyncio.to_thread(monitor.start)
        assert "primary_sentinel_correlated" in caught.value.metadata["blockers"].split(",")
        report_only = IntegrityBinding(correlated.system_revision_id, PROTOCOL, "exploratory")
        with pytest.raises(BindingRefused, match="profile_report_only"):
            await asyncio.to_thread(IntegrityMonitor(client, report_only, capture=capture).start)
    # One revision without the others is no binding (R-I-9).
    with pytest.raises(BindingRefused) as missing:
        IntegrityBinding(correlated.system_revision_id, PROTOCOL, "")
    assert missing.value.metadata == {"blockers": "profile_missing"}
    with pytest.raises(ValidationError, match="audited by nothing"):
        IntegrityMonitor(None, None, capture=capture)


async def test_a_failing_audit_pauses_and_a_reviewed_continue_resumes(
    integrity_control: ControlStack, sentinel: RunningStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    assert binding.profile_revision_id == PROFILE
    records = range(RECORDS)
    with (
        trainer_client(integrity_control) as client,
        WorkerClient(sentinel.target, token=sentinel.token, trust=sentinel.trust) as guard,
    ):
        capture = make_capture(
            client, binding, tmp_path / "buffer", sentinel=guard, sentinel_digest=sentinel.digest
        )
        monitor = IntegrityMonitor(client, binding, capture=capture, audit_timeout_s=60)
        assert (await asyncio.to_thread(monitor.start)).message == "monitored; no audit yet"
        # The rollout: each episode opened on the sentinel first; even records write the triage
        # encounter, odd ones write nothing. The optimizer pays exactly the opposite.
        episodes = [(f"episode-{r}", {IDENTITY_KEY: patient_for("episode", r)}) for r in records]
        await asyncio.to_thread(capture.begin_sentinel, episodes, policy_update=0)
        for record in records[::2]:
            write_triage(sentinel.database, patient_for("episode", record))
        batch = samples(records, raw=[float(r % 2) for r in records], patients=True)
        rows = await asyncio.to_thread(capture.record, batch, policy_update=0)
        assert {row.sentinel.outcome for row in rows if row.sentinel} == {"accepted", "refused"}
        paused = await asyncio.to_thread(monitor.at_boundary, 0)
        assert paused.action == "pause"
        assert not paused.proceeds
        assert paused.outcome == "fail"
        assert paused.audit_id is not None
        assert paused.boundary == 0
        assert "optimizer_only_rate_above_maximum" in paused.reasons
        assert "sentinel_only_rate_above_maximum" in paused.reasons
        assert paused.review_command is not None
        assert paused.review_command.startswith(
            f"rewardseal-control integrity audit review {paused.audit_id} --action"
        )
        assert paused.audit_id in paused.message
        # The run is resumed before anyone reviewed: still paused.
        resumed = IntegrityMonitor(client, binding, capture=capture)
        assert (await asyncio.to_thread(resumed.start)).action == "pause"
        with admin_client(integrity_control) as admin:
            await asyncio.to_thread(
                lambda: admin.review_decision(
                    paused.audit_id or "",
                    ipb.ReviewAction.REVIEW_ACTION_CONTINUE,
                    reason="the sentinel's contract was mis-specified for this batch",
                )
            )
            again = IntegrityMonitor(client, binding, capture=capture)
            going = await asyncio.to_thread(again.start)
            assert (going.action, going.audit_id, going.outcome) == (
                "continue",
                paused.audit_id,
                "fail",  # a review changes what happens, not what was measured
            )
            await asyncio.to_thread(
                lambda: admin.review_decision(
                    paused.audit_id or "",
                    ipb.ReviewAction.REVIEW_ACTION_STOP,
                    reason="on second thought the reward is hacked",
                )
            )
            stopped = await asyncio.to_thread(again.outcome_of, paused.audit_id or "")
            assert stopped.action == "stop"
            assert not stopped.proceeds


async def test_a_boundary_waits_as_deferred_while_control_is_down(tmp_path: Path) -> None:
    control = await control_on_file(tmp_path / "control.sqlite")
    binding = await create_binding(control)
    client = trainer_client(control, timeout=1.0)
    try:
        capture = make_capture(client, binding, tmp_path / "buffer")
        monitor = IntegrityMonitor(client, binding, capture=capture, audit_timeout_s=60)
        await asyncio.to_thread(monitor.start)
        await stop(control)
        await asyncio.to_thread(capture.record, samples(range(5), raw=[1.0] * 5), policy_update=0)
        deferred = await asyncio.to_thread(monitor.at_boundary, 0)
        assert deferred.action == "deferred"
        assert deferred.proceeds
        assert "wait for control" in deferred.message
        assert capture.pending_seals() == [0]
    finally:
        client.close()


async def test_a_boundary_audited_before_a_crash_is_followed_not_audited_again(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    with trainer_client(integrity_control) as client:
        capture = make_capture(client, binding, tmp_path / "buffer")
        rows = samples(range(5), raw=[1.0] * 5)
        await asyncio.to_thread(capture.record, rows, policy_update=0)
        shard_id = await asyncio.to_thread(capture.seal, 0)
        assert shard_id is not None
        # The run started the audit, then crashed before it kept the answer (R-I-10: a shard is
        # audited once; the resumed run is told the audit's id and follows it).
        started = await asyncio.to_thread(client.start_audit, shard_id, PROFILE)
        monitor = IntegrityMonitor(client, binding, capture=capture, audit_timeout_s=60)
        await asyncio.to_thread(monitor.start)
        outcome = await asyncio.to_thread(monitor.at_boundary, 0)
        assert outcome.audit_id == started.audit_id
        assert monitor.audits == {0: started.audit_id}
        assert (outcome.action, outcome.outcome) == ("pause", "incomplete_evidence")
        listed = await asyncio.to_thread(client.list_audits, run_id=capture.run_id)
        assert [a.audit_id for a in listed] == [started.audit_id]
        # Resumed under another profile than the one the run's first audit fixed: refused before
        # the first step, not a run whose every later audit is refused in silence.
        strict = IntegrityBinding(binding.system_revision_id, PROTOCOL, "strict_integrity")
        with pytest.raises(BindingMismatch) as caught:
            await asyncio.to_thread(IntegrityMonitor(client, strict, capture=capture).start)
        assert caught.value.metadata["field"] == "profile"
