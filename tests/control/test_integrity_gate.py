"""The gate cannot be cleared by the trainer (issue 24, hole 3; docs/spec.md R-I-10), on a real
control plane (SQLite and PostgreSQL) with the trainer's and the admin's real tokens.

The attack: with the trainer token alone, a fresh audit of an already failed, sealed shard under
the report-only profile ``exploratory`` answered ``continue``, and a gate that read the newest
audit of the run turned a pause, then a reviewer's final stop, into continue. Now a shard is
audited once (a second audit is the admin's retry), only under the run's binding, and every gate
reader answers :func:`rewardseal.core.integrity.run_gate`: the decision in force for each boundary,
a stop final.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from support.control import ADMIN, CLIENT_TOKEN, TRAINER, ControlStack, wire_error
from support.integrity import agreeing_rows, audit_to_end, capture, create_system, wait_for_audit
from support.integrity_trainer import make_capture, trainer_client

from rewardseal.core.errors import BindingMismatch, IntegrityHalted, ShardAlreadyAudited
from rewardseal.core.integrity import BUILTIN_PROFILES
from rewardseal.rpc.integrity_client import AsyncIntegrityClient
from rewardseal.trainers.integrity.gate import BoundaryGate
from rewardseal.trainers.integrity.monitor import GateOutcome, IntegrityBinding, IntegrityMonitor
from rewardseal.v1 import integrity_pb2 as pb

RUN = "run-gate-0001"
PROFILE = "human_aligned_integrity"
HUMAN_ID = BUILTIN_PROFILES[PROFILE].revision_id
EXPLORATORY_ID = BUILTIN_PROFILES["exploratory"].revision_id


async def _history(control: ControlStack, audit_id: str) -> list[pb.DecisionEntry]:
    answer = await control.integrity_stub().GetDecisionHistory(
        pb.GetDecisionHistoryRequest(audit_id=audit_id), metadata=TRAINER
    )
    return list(answer.entries)


async def _run_audits(control: ControlStack) -> list[pb.Audit]:
    listed = await control.integrity_stub().ListAudits(
        pb.ListAuditsRequest(run_id=RUN), metadata=TRAINER
    )
    return list(listed.audits)


async def _review(control: ControlStack, audit_id: str, action: int, reason: str) -> None:
    await control.integrity_stub().ReviewDecision(
        pb.ReviewDecisionRequest(audit_id=audit_id, action=action, reason=reason),  # type: ignore[arg-type]
        metadata=ADMIN,
    )


async def _retry(control: ControlStack, audit_id: str) -> pb.Audit:
    retried = await control.integrity_stub().RetryAudit(
        pb.RetryAuditRequest(audit_id=audit_id, reason="audit the same evidence again"),
        metadata=ADMIN,
    )
    return await wait_for_audit(control, retried.audit.audit_id)


async def test_trainer_cannot_reaudit_a_sealed_shard(control: ControlStack) -> None:
    system_id = await create_system(control)
    failing = await capture(
        control, agreeing_rows(100, boundary=1, inverted=True), system_id=system_id, run_id=RUN
    )
    paused = await audit_to_end(control, failing.shard_id)
    assert paused.decision.action == pb.RUN_ACTION_PAUSE
    before = await _history(control, paused.audit_id)

    # The attack: the failed shard audited again, under the report-only profile or the same one.
    for profile in ("exploratory", EXPLORATORY_ID, PROFILE):
        code, reason, meta, message = await wire_error(
            control,
            "StartAudit",
            pb.StartAuditRequest(shard_id=failing.shard_id, profile_revision_id=profile),
            metadata=TRAINER,
        )
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "shard_already_audited")
        assert meta == {"audit_id": paused.audit_id, "state": "done"}
        assert f"integrity audit retry {paused.audit_id}" in message
    # The admin has one way to audit the same evidence again too: RetryAudit, not StartAudit.
    code, reason, _, _ = await wire_error(
        control,
        "StartAudit",
        pb.StartAuditRequest(shard_id=failing.shard_id, profile_revision_id=PROFILE),
        metadata=ADMIN,
    )
    assert reason == "shard_already_audited"
    code, _, _, _ = await wire_error(
        control,
        "RetryAudit",
        pb.RetryAuditRequest(audit_id=paused.audit_id, reason="clear my pause"),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED

    # The run's next boundary under another profile, or sealed under another protocol, is
    # outside the binding its first audit fixed.
    later = await capture(control, agreeing_rows(100, boundary=2), system_id=system_id, run_id=RUN)
    code, reason, meta, _ = await wire_error(
        control,
        "StartAudit",
        pb.StartAuditRequest(shard_id=later.shard_id, profile_revision_id="exploratory"),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "binding_mismatch")
    assert meta == {"field": "profile", "bound": HUMAN_ID, "given": EXPLORATORY_ID}
    other_protocol = await capture(
        control,
        agreeing_rows(100, boundary=3),
        system_id=system_id,
        run_id=RUN,
        protocol="balanced_256",
    )
    code, reason, meta, _ = await wire_error(
        control,
        "StartAudit",
        pb.StartAuditRequest(shard_id=other_protocol.shard_id, profile_revision_id=PROFILE),
        metadata=TRAINER,
    )
    assert (code, reason, meta["field"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "binding_mismatch",
        "protocol",
    )
    # Through the typed client the refusals are their classes (the trainer's gate relies on it).
    async with AsyncIntegrityClient(control.target, token=CLIENT_TOKEN, timeout=20) as client:
        with pytest.raises(ShardAlreadyAudited) as again:
            await client.start_audit(failing.shard_id, "exploratory")
        assert again.value.metadata["audit_id"] == paused.audit_id
        with pytest.raises(BindingMismatch):
            await client.start_audit(later.shard_id, "exploratory")

    # Nothing changed: one audit in the run, its history as it was, the run still paused.
    audits = await _run_audits(control)
    assert [a.audit_id for a in audits] == [paused.audit_id]
    assert await _history(control, paused.audit_id) == before
    # Under the binding, the next boundary is audited as ever.
    going = await audit_to_end(control, later.shard_id)
    assert going.decision.action == pb.RUN_ACTION_CONTINUE
    assert going.profile_revision_id == HUMAN_ID


async def _gate(control: ControlStack, binding: IntegrityBinding, tmp_path: Path) -> GateOutcome:
    """What a (re)started run is told: a fresh IntegrityMonitor's start(), the trainer token."""

    def ask() -> GateOutcome:
        with trainer_client(control, timeout=20.0) as client:
            buffer = tmp_path / f"buffer-{len(list(tmp_path.iterdir()))}"
            monitor = IntegrityMonitor(
                client, binding, capture=make_capture(client, binding, buffer, run_id=RUN)
            )
            return monitor.start()

    return await asyncio.to_thread(ask)


async def _boundary(
    control: ControlStack, system_id: str, boundary: int, *, failing: bool
) -> pb.Audit:
    rows = agreeing_rows(100, boundary=boundary, inverted=failing)
    shard = await capture(control, rows, system_id=system_id, run_id=RUN)
    return await audit_to_end(control, shard.shard_id)


async def test_gate_answers_the_decision_in_force_and_stop_is_final(
    control: ControlStack, tmp_path: Path
) -> None:
    system_id = await create_system(control)
    binding = IntegrityBinding(system_id, "exhaustive", PROFILE)
    first = await _boundary(control, system_id, 1, failing=True)
    assert (await _gate(control, binding, tmp_path)).action == "pause"

    # A reviewed continue supersedes the automatic pause: the run goes on.
    await _review(control, first.audit_id, pb.REVIEW_ACTION_CONTINUE, "read the samples: fine")
    going = await _gate(control, binding, tmp_path)
    assert (going.action, going.audit_id) == ("continue", first.audit_id)
    # An admin's retry of the same evidence decides pause again, automatically: the review of
    # the boundary still stands (a reviewed decision supersedes an automatic one).
    retried = await _retry(control, first.audit_id)
    assert retried.decision.action == pb.RUN_ACTION_PAUSE
    assert (await _gate(control, binding, tmp_path)).action == "continue"

    # A later boundary fails: the run pauses there.
    second = await _boundary(control, system_id, 2, failing=True)
    paused = await _gate(control, binding, tmp_path)
    assert (paused.action, paused.boundary, paused.audit_id) == ("pause", 2, second.audit_id)
    # A newer automatic continue on another boundary does not clear boundary 2's pause.
    third = await _boundary(control, system_id, 3, failing=False)
    assert third.decision.action == pb.RUN_ACTION_CONTINUE
    still = await _gate(control, binding, tmp_path)
    assert (still.action, still.boundary, still.audit_id) == ("pause", 2, second.audit_id)

    # A reviewer stops the run: final, whatever comes after.
    await _review(control, second.audit_id, pb.REVIEW_ACTION_STOP, "the reward is hacked")
    stopped = await _gate(control, binding, tmp_path)
    assert (stopped.action, stopped.boundary, stopped.audit_id) == ("stop", 2, second.audit_id)
    after_stop = [
        lambda: _retry(control, second.audit_id),  # a fresh automatic decision of boundary 2
        lambda: _boundary(control, system_id, 4, failing=False),  # a later passing boundary
        lambda: _review(control, third.audit_id, pb.REVIEW_ACTION_CONTINUE, "boundary 3 is ok"),
        lambda: _review(control, first.audit_id, pb.REVIEW_ACTION_CONTINUE, "boundary 1 is ok"),
    ]
    for step in after_stop:
        await step()
        gate = await _gate(control, binding, tmp_path)
        assert (gate.action, gate.boundary, gate.audit_id) == ("stop", 2, second.audit_id)
    # Even a reviewed continue of boundary 2's retry cannot undo the stop.
    retry_of_stopped = [a for a in await _run_audits(control) if a.retry_of == second.audit_id]
    assert len(retry_of_stopped) == 1
    await _review(control, retry_of_stopped[0].audit_id, pb.REVIEW_ACTION_CONTINUE, "let it go on")
    assert (await _gate(control, binding, tmp_path)).action == "stop"
    # The trainer's hooks (TRL's callback, verl's StepGate) are held there too.
    with trainer_client(control, timeout=20.0) as client:
        monitor = IntegrityMonitor(
            client, binding, capture=make_capture(client, binding, tmp_path / "hook", run_id=RUN)
        )
        with pytest.raises(IntegrityHalted) as halted:
            await asyncio.to_thread(BoundaryGate(monitor).begin, 5)
    assert halted.value.metadata == {"action": "stop", "audit_id": second.audit_id}
    # And nothing the trainer may call changed any of it.
    code, reason, _, _ = await wire_error(
        control,
        "StartAudit",
        pb.StartAuditRequest(shard_id=second.shard_id, profile_revision_id="exploratory"),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "shard_already_audited")
