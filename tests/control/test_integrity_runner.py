"""The audit runner (R-I-7, R-I-8): audits run off the RPC path and survive failures and restarts
without ever being decided twice or half-decided; transient errors are retried without a
decision; identical verified evidence reuses its bundle; cancel and retry are the admin's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from support.control import (
    ADMIN,
    TRAINER,
    ControlStack,
    start_control,
    stop_control,
    wire_error,
)
from support.integrity import agreeing_rows, audit_to_end, capture, create_system, wait_for_audit

from rewardseal.core.errors import Unavailable
from rewardseal.core.integrity import AuditReport
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_control.integrity.runner import DEFAULT_LEASE, MAX_ATTEMPTS
from rewardseal_server.integrity_audit import audit_boundary


class Gate:
    """Core's audit function behind a gate a test opens, and a switch that makes it fail."""

    def __init__(self, *, open_: bool = True) -> None:
        self.opened = threading.Event()
        if open_:
            self.opened.set()
        self.entered = threading.Event()
        self.failures: list[Exception] = []
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> AuditReport:
        self.calls += 1
        self.entered.set()
        if not self.opened.wait(timeout=60):
            raise TimeoutError("the test never opened the gate")
        if self.failures:
            raise self.failures.pop(0)
        return audit_boundary(*args, **kwargs)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def control(store_url: str, gate: Gate) -> AsyncIterator[ControlStack]:
    stack = await start_control(store_url, audit=gate)
    try:
        yield stack
    finally:
        gate.opened.set()
        await stop_control(stack)


async def _shard(control: ControlStack, records: int = 100, boundary: int = 10) -> str:
    system_id = await create_system(control)
    shard = await capture(control, agreeing_rows(records, boundary=boundary), system_id=system_id)
    return shard.shard_id


async def _start(control: ControlStack, shard_id: str) -> pb.Audit:
    started = await control.integrity_stub().StartAudit(
        pb.StartAuditRequest(shard_id=shard_id, profile_revision_id="human_aligned_integrity"),
        metadata=TRAINER,
    )
    return started.audit


async def _history(control: ControlStack, audit_id: str) -> list[pb.DecisionEntry]:
    answer = await control.integrity_stub().GetDecisionHistory(
        pb.GetDecisionHistoryRequest(audit_id=audit_id), metadata=TRAINER
    )
    return list(answer.entries)


async def _entered(gate: Gate) -> None:
    """Wait until the runner is inside the audit function (it runs in a worker thread)."""
    assert await asyncio.to_thread(gate.entered.wait, 30)


async def test_start_answers_at_once_and_the_runner_decides(
    control: ControlStack, gate: Gate
) -> None:
    gate.opened.clear()
    shard_id = await _shard(control)
    started = await _start(control, shard_id)
    assert started.state == pb.AUDIT_STATE_QUEUED
    assert not started.HasField("decision")
    await _entered(gate)
    running = await control.integrity_stub().GetAudit(
        pb.GetAuditRequest(audit_id=started.audit_id), metadata=TRAINER
    )
    assert running.audit.state == pb.AUDIT_STATE_RUNNING
    code, reason, _, _ = await wire_error(
        control,
        "GetAuditMetrics",
        pb.GetAuditMetricsRequest(audit_id=started.audit_id),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "audit_state_conflict")
    gate.opened.set()
    done = await wait_for_audit(control, started.audit_id)
    assert done.state == pb.AUDIT_STATE_DONE
    assert len(await _history(control, started.audit_id)) == 1


async def test_a_transient_error_is_retried_without_a_decision(
    control: ControlStack, gate: Gate
) -> None:
    gate.failures.append(Unavailable("the control store is away"))
    audit = await audit_to_end(control, await _shard(control))
    assert audit.state == pb.AUDIT_STATE_DONE
    assert audit.attempts == 2
    assert gate.calls == 2
    assert [e.sequence for e in await _history(control, audit.audit_id)] == [0]


async def test_errors_past_the_attempts_fail_the_audit_and_a_retry_needs_a_reason(
    control: ControlStack, gate: Gate
) -> None:
    gate.failures.extend(RuntimeError("a bug") for _ in range(MAX_ATTEMPTS))
    failed = await audit_to_end(control, await _shard(control))
    assert failed.state == pb.AUDIT_STATE_FAILED
    assert failed.attempts == MAX_ATTEMPTS
    assert "RuntimeError" in failed.error
    assert not failed.bundle_id
    assert await _history(control, failed.audit_id) == []
    code, reason, _, _ = await wire_error(
        control, "RetryAudit", pb.RetryAuditRequest(audit_id=failed.audit_id, reason="  ")
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    code, _, _, _ = await wire_error(
        control,
        "RetryAudit",
        pb.RetryAuditRequest(audit_id=failed.audit_id, reason="fixed"),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    listed = await control.integrity_stub().ListAudits(pb.ListAuditsRequest(), metadata=TRAINER)
    assert len(listed.audits) == 1  # the refusals queued nothing
    retried = await control.integrity_stub().RetryAudit(
        pb.RetryAuditRequest(audit_id=failed.audit_id, reason="the store is back"),
        metadata=ADMIN,
    )
    assert retried.audit.retry_of == failed.audit_id
    assert retried.audit.retry_reason == "the store is back"
    done = await wait_for_audit(control, retried.audit.audit_id)
    assert done.decision.outcome == pb.DECISION_OUTCOME_PASS


async def test_identical_verified_evidence_reuses_its_bundle(
    control: ControlStack, gate: Gate
) -> None:
    shard_id = await _shard(control)
    first = await audit_to_end(control, shard_id)
    # The same evidence audited again is the admin's retry (R-I-10: never a second StartAudit).
    retried = await control.integrity_stub().RetryAudit(
        pb.RetryAuditRequest(audit_id=first.audit_id, reason="audit it again"), metadata=ADMIN
    )
    second = await wait_for_audit(control, retried.audit.audit_id)
    assert not first.bundle_reused
    assert second.bundle_reused
    assert second.bundle_id == first.bundle_id
    assert second.evidence_digest == first.evidence_digest
    assert second.decision.outcome == first.decision.outcome
    assert gate.calls == 1  # the second audit computed nothing
    await control.integrity_stub().VerifyAudit(
        pb.VerifyAuditRequest(audit_id=second.audit_id), metadata=TRAINER
    )


async def test_cancel_drops_a_running_audit_and_refuses_a_finished_one(
    control: ControlStack, gate: Gate
) -> None:
    gate.opened.clear()
    started = await _start(control, await _shard(control))
    await _entered(gate)
    code, _, _, _ = await wire_error(
        control,
        "CancelAudit",
        pb.CancelAuditRequest(audit_id=started.audit_id),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    cancelled = await control.integrity_stub().CancelAudit(
        pb.CancelAuditRequest(audit_id=started.audit_id, reason="wrong profile"), metadata=ADMIN
    )
    assert cancelled.audit.state == pb.AUDIT_STATE_CANCELLED
    gate.opened.set()
    await asyncio.sleep(0.5)  # the runner finishes its computation and must drop it
    after = await control.integrity_stub().GetAudit(
        pb.GetAuditRequest(audit_id=started.audit_id), metadata=TRAINER
    )
    assert after.audit.state == pb.AUDIT_STATE_CANCELLED
    assert not after.audit.bundle_id
    assert await _history(control, started.audit_id) == []
    code, reason, meta, _ = await wire_error(
        control, "CancelAudit", pb.CancelAuditRequest(audit_id=started.audit_id)
    )
    assert (code, reason, meta["state"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "audit_state_conflict",
        "cancelled",
    )


async def test_a_restart_mid_audit_resumes_and_decides_once(store_url: str) -> None:
    """Control stops while an audit runs; the next control takes it up once its lease has
    passed, and the audit is decided exactly once."""
    key = SigningKey.generate()
    stuck = Gate(open_=False)
    first = await start_control(store_url, key=key, audit=stuck)
    try:
        started = await _start(first, await _shard(first))
        await _entered(stuck)
    finally:
        await stop_control(first)
        stuck.opened.set()  # the orphaned computation ends; nothing takes its result
    second = await start_control(store_url, key=key)
    try:
        stub = second.integrity_stub()
        await asyncio.sleep(1.5)  # the runner has looked: the lease still holds the audit
        held = await stub.GetAudit(pb.GetAuditRequest(audit_id=started.audit_id), metadata=TRAINER)
        assert held.audit.state == pb.AUDIT_STATE_RUNNING
        assert held.audit.attempts == 1
        second.clock.advance(DEFAULT_LEASE + timedelta(seconds=1))
        second.integrity.runner.wake()
        done = await wait_for_audit(second, started.audit_id)
        assert done.state == pb.AUDIT_STATE_DONE
        assert done.attempts == 2
        assert [e.sequence for e in await _history(second, started.audit_id)] == [0]
        await stub.VerifyAudit(pb.VerifyAuditRequest(audit_id=started.audit_id), metadata=TRAINER)
    finally:
        await stop_control(second)


async def test_a_superseded_claim_stores_nothing(control: ControlStack, gate: Gate) -> None:
    """Store level: a runner whose lease passed and whose audit was claimed again cannot
    finish it; the new claim decides it once."""
    await control.integrity.runner.close()  # this test is the runner
    started = await _start(control, await _shard(control))
    audits = control.store.integrity_audits
    now = control.clock()
    old = audits.claim(now=now, lease=timedelta(seconds=10))
    assert old is not None
    assert audits.claim(now=now, lease=timedelta(seconds=10)) is None  # held
    new = audits.claim(now=now + timedelta(seconds=11), lease=timedelta(seconds=10))
    assert new is not None
    assert new.audit_id == old.audit_id == started.audit_id
    assert new.attempts == 2
    outcome = control.integrity.runner._decide(new)
    finish = {
        "evidence_digest": outcome.evidence_digest,
        "bundle": outcome.bundle,
        "bundle_id": outcome.bundle_id,
        "entry": outcome.entry,
    }
    assert not audits.finish(old, **finish)
    assert audits.finish(new, **finish)
    assert not audits.finish(new, **finish)  # done: a second finish stores nothing either
    assert len(control.store.integrity_decisions.history(started.audit_id)) == 1
