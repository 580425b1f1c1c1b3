"""Reward integrity end to end on a real control plane (SQLite and PostgreSQL): capture and seal
a boundary, audit it off the RPC path, read the decision, samples, metrics and bundle, review
(docs/spec.md R-I-3, R-I-6..8)."""

from __future__ import annotations

import grpc
from support.control import ADMIN, TRAINER, ControlStack, wire_error
from support.integrity import (
    agreeing_rows,
    audit_to_end,
    capture,
    create_system,
    edit_stored,
)

from rewardseal.core.integrity import BUILTIN_PROFILES, verify_bundle
from rewardseal.core.signing import TrustSet
from rewardseal.v1 import integrity_pb2 as pb

HUMAN = BUILTIN_PROFILES["human_aligned_integrity"]


async def _audit(control: ControlStack, records: int, *, inverted: bool = False) -> pb.Audit:
    system_id = await create_system(control)
    shard = await capture(control, agreeing_rows(records, inverted=inverted), system_id=system_id)
    return await audit_to_end(control, shard.shard_id)


async def test_agreeing_sentinel_passes_and_the_bundle_verifies(control: ControlStack) -> None:
    audit = await _audit(control, 100)
    assert audit.state == pb.AUDIT_STATE_DONE
    assert audit.decision.outcome == pb.DECISION_OUTCOME_PASS
    assert audit.decision.action == pb.RUN_ACTION_CONTINUE
    assert list(audit.decision.reasons) == []
    assert audit.gating_eligible
    assert audit.core_rows == 100
    assert audit.attempts == 1
    stub = control.integrity_stub()
    verified = await stub.VerifyAudit(
        pb.VerifyAuditRequest(audit_id=audit.audit_id), metadata=TRAINER
    )
    assert verified.bundle_id == audit.bundle_id
    assert list(verified.shard_ids) == [audit.shard_id]
    # Signed by control's organization key: anyone holding that key verifies it offline.
    offline = verify_bundle(verified.bundle, TrustSet([control.key.public_key]))
    assert offline.report.decision.outcome == "pass"
    assert verified.signer_key_id == control.key.key_id
    metrics = await stub.GetAuditMetrics(
        pb.GetAuditMetricsRequest(audit_id=audit.audit_id), metadata=TRAINER
    )
    assert metrics.computed
    assert metrics.records == 100
    assert metrics.resamples > 0
    agreement = next(m for m in metrics.metrics if m.name == "pass_agreement")
    assert agreement.value == 1.0
    assert agreement.threshold_min == 0.85
    assert not agreement.violated
    assert agreement.HasField("interval_low")


async def test_an_inverted_sentinel_fails_and_pauses_with_every_failing_metric(
    control: ControlStack,
) -> None:
    audit = await _audit(control, 100, inverted=True)
    assert audit.decision.outcome == pb.DECISION_OUTCOME_FAIL
    assert audit.decision.action == pb.RUN_ACTION_PAUSE
    metrics = await control.integrity_stub().GetAuditMetrics(
        pb.GetAuditMetricsRequest(audit_id=audit.audit_id), metadata=TRAINER
    )
    violated = [m for m in metrics.metrics if m.violated]
    expected = [
        f"{m.name}_below_minimum"
        if m.HasField("threshold_min") and m.value < m.threshold_min
        else f"{m.name}_above_maximum"
        for m in violated
    ]
    assert list(audit.decision.reasons) == expected
    assert {
        "pass_agreement_below_minimum",
        "optimizer_only_rate_above_maximum",
        "sentinel_only_rate_above_maximum",
    } <= set(expected)


async def test_fifty_records_warn_at_most_and_ten_are_incomplete(control: ControlStack) -> None:
    system_id = await create_system(control)
    fifty = await capture(control, agreeing_rows(50, boundary=1), system_id=system_id)
    ten = await capture(
        control, agreeing_rows(10, boundary=2), system_id=system_id, run_id="run-0002"
    )
    warned = await audit_to_end(control, fifty.shard_id)
    assert warned.decision.outcome == pb.DECISION_OUTCOME_WARN
    assert list(warned.decision.reasons) == ["evidence_below_pass_minimum"]
    assert warned.decision.action == pb.RUN_ACTION_CONTINUE
    thin = await audit_to_end(control, ten.shard_id)
    assert thin.decision.outcome == pb.DECISION_OUTCOME_INCOMPLETE_EVIDENCE
    assert thin.decision.action == pb.RUN_ACTION_PAUSE
    assert "evidence_below_minimum" in thin.decision.reasons
    metrics = await control.integrity_stub().GetAuditMetrics(
        pb.GetAuditMetricsRequest(audit_id=thin.audit_id), metadata=TRAINER
    )
    assert not metrics.computed
    assert list(metrics.metrics) == []


async def test_an_edited_row_is_incomplete_evidence_and_verification_refuses(
    control: ControlStack,
) -> None:
    system_id = await create_system(control)
    shard = await capture(control, agreeing_rows(100), system_id=system_id)
    changed = edit_stored(
        control.store,
        "integrity_shard_rows",
        "UPDATE integrity_shard_rows SET body = replace(body, :old, :new) "
        "WHERE shard_id = :s AND position = 3",
        s=shard.shard_id,
        old='"optimizer_raw":0.0',
        new='"optimizer_raw":1.0',
    )
    assert changed == 1
    audit = await audit_to_end(control, shard.shard_id)
    assert audit.decision.outcome == pb.DECISION_OUTCOME_INCOMPLETE_EVIDENCE
    assert "shard_unverifiable" in audit.decision.reasons
    assert audit.bundle_id  # published all the same
    for method, request in (
        ("VerifyAudit", pb.VerifyAuditRequest(audit_id=audit.audit_id)),
        ("VerifySignalShard", pb.VerifySignalShardRequest(shard_id=shard.shard_id)),
    ):
        code, reason, _, _ = await wire_error(control, method, request, metadata=TRAINER)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "shard_corrupt")


async def test_a_reviewed_continue_supersedes_the_pause_and_both_stay(
    control: ControlStack,
) -> None:
    audit = await _audit(control, 100, inverted=True)
    stub = control.integrity_stub()
    for request, reason in (
        (
            pb.ReviewDecisionRequest(audit_id=audit.audit_id, action=pb.REVIEW_ACTION_CONTINUE),
            "review_refused",
        ),
        (
            pb.ReviewDecisionRequest(
                audit_id=audit.audit_id, action=pb.REVIEW_ACTION_FORK, reason="try again"
            ),
            "review_refused",
        ),
    ):
        code, got, _, _ = await wire_error(control, "ReviewDecision", request)
        assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    # The trainer credential never overrides a decision.
    code, got, _, _ = await wire_error(
        control,
        "ReviewDecision",
        pb.ReviewDecisionRequest(
            audit_id=audit.audit_id, action=pb.REVIEW_ACTION_CONTINUE, reason="mine"
        ),
        metadata=TRAINER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    reviewed = await stub.ReviewDecision(
        pb.ReviewDecisionRequest(
            audit_id=audit.audit_id,
            action=pb.REVIEW_ACTION_CONTINUE,
            reason="the sentinel's SoR was being migrated",
            supersedes=0,
        ),
        metadata=ADMIN,
    )
    assert reviewed.entry.sequence == 1
    assert reviewed.entry.supersedes == 0
    assert reviewed.entry.action == pb.RUN_ACTION_CONTINUE
    assert reviewed.entry.outcome == pb.DECISION_OUTCOME_FAIL  # what was measured stays
    assert reviewed.entry.reviewer == "admin"
    history = await stub.GetDecisionHistory(
        pb.GetDecisionHistoryRequest(audit_id=audit.audit_id), metadata=TRAINER
    )
    assert [(e.sequence, e.action) for e in history.entries] == [
        (0, pb.RUN_ACTION_PAUSE),
        (1, pb.RUN_ACTION_CONTINUE),
    ]
    code, got, meta, _ = await wire_error(
        control,
        "ReviewDecision",
        pb.ReviewDecisionRequest(
            audit_id=audit.audit_id, action=pb.REVIEW_ACTION_STOP, reason="late", supersedes=0
        ),
    )
    assert (code, got, meta["current"]) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "decision_superseded",
        "1",
    )
    got_audit = await stub.GetAudit(pb.GetAuditRequest(audit_id=audit.audit_id), metadata=TRAINER)
    assert got_audit.audit.decision.sequence == 1
