"""Following and reading audits: WatchAudit's stream, samples by outcome, population and text,
and two audits compared by record or episode identity (R-I-6, R-I-8)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import pytest
from support.control import TRAINER, WORKER, ControlStack, start_control, stop_control, wire_error
from support.integrity import agreeing_rows, audit_to_end, capture, create_system

from rewardseal.core.integrity import AuditReport
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_server.integrity_audit import audit_boundary

RUN = "run-0001"


async def _pair(control: ControlStack) -> tuple[pb.Audit, pb.Audit]:
    """Boundary 10 where the sentinel agrees, boundary 11 (same records) where it is inverted."""
    system_id = await create_system(control)
    agree = await capture(control, agreeing_rows(100, boundary=10), system_id=system_id, run_id=RUN)
    invert = await capture(
        control, agreeing_rows(100, boundary=11, inverted=True), system_id=system_id, run_id=RUN
    )
    return await audit_to_end(control, agree.shard_id), await audit_to_end(control, invert.shard_id)


async def _samples(control: ControlStack, **filters: Any) -> list[pb.AuditSample]:
    stub, found, token = control.integrity_stub(), [], ""
    while True:
        page = await stub.ListAuditSamples(
            pb.ListAuditSamplesRequest(page_size=30, page_token=token, **filters),
            metadata=TRAINER,
        )
        found.extend(page.samples)
        token = page.next_page_token
        if not token:
            return found


async def test_samples_filter_by_outcome_population_and_text(control: ControlStack) -> None:
    _, inverted = await _pair(control)
    audit_id = inverted.audit_id
    everything = await _samples(control, audit_id=audit_id)
    assert [s.position for s in everything] == list(range(100))  # pages neither skip nor repeat
    hacked = await _samples(control, audit_id=audit_id, outcome=pb.SAMPLE_OUTCOME_OPTIMIZER_ONLY)
    assert len(hacked) == 50
    assert all(s.row.optimizer_raw == 1.0 for s in hacked)
    assert all(s.row.sentinel.outcome == pb.SIGNAL_OUTCOME_REFUSED for s in hacked)
    disagreeing = await _samples(control, audit_id=audit_id, outcome=pb.SAMPLE_OUTCOME_DISAGREEMENT)
    assert len(disagreeing) == 100
    assert await _samples(control, audit_id=audit_id, outcome=pb.SAMPLE_OUTCOME_AGREEMENT) == []
    assert (
        await _samples(control, audit_id=audit_id, population=pb.SIGNAL_POPULATION_DIAGNOSTIC) == []
    )
    core = await _samples(control, audit_id=audit_id, population=pb.SIGNAL_POPULATION_CORE)
    assert len(core) == 100
    found = await _samples(control, audit_id=audit_id, query="REC-7")
    assert sorted(s.row.record_id for s in found) == ["rec-7", *(f"rec-7{i}" for i in range(10))]
    assert found[0].row_digest.startswith("sha256:")
    # A page token belongs to its filters.
    first = await control.integrity_stub().ListAuditSamples(
        pb.ListAuditSamplesRequest(audit_id=audit_id, page_size=10), metadata=TRAINER
    )
    code, reason, _, _ = await wire_error(
        control,
        "ListAuditSamples",
        pb.ListAuditSamplesRequest(
            audit_id=audit_id, page_size=10, page_token=first.next_page_token, query="rec"
        ),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    code, _, _, _ = await wire_error(
        control, "ListAuditSamples", pb.ListAuditSamplesRequest(audit_id=audit_id), metadata=WORKER
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("pairing", [pb.AUDIT_PAIRING_UNSPECIFIED, pb.AUDIT_PAIRING_EPISODE])
async def test_two_audits_compare_by_identity(control: ControlStack, pairing: int) -> None:
    agreed, inverted = await _pair(control)
    compared = await control.integrity_stub().CompareAudits(
        pb.CompareAuditsRequest(
            left_audit_id=agreed.audit_id, right_audit_id=inverted.audit_id, pairing=pairing
        ),
        metadata=TRAINER,
    )
    assert compared.left_outcome == pb.DECISION_OUTCOME_PASS
    assert compared.right_outcome == pb.DECISION_OUTCOME_FAIL
    deltas = {m.name: m for m in compared.metrics}
    assert deltas["pass_agreement"].left == 1.0
    assert deltas["pass_agreement"].right == 0.0
    assert deltas["pass_agreement"].delta == -1.0
    if pairing == pb.AUDIT_PAIRING_EPISODE:
        # Episodes are per boundary: nothing pairs across two boundaries by episode.
        assert (compared.paired_rows, compared.left_only_rows) == (0, 100)
        return
    assert (compared.paired_rows, compared.left_only_rows, compared.right_only_rows) == (100, 0, 0)
    moves = {(t.left, t.right): t.rows for t in compared.transitions}
    assert moves == {
        (pb.SAMPLE_OUTCOME_AGREEMENT, pb.SAMPLE_OUTCOME_OPTIMIZER_ONLY): 50,
        (pb.SAMPLE_OUTCOME_AGREEMENT, pb.SAMPLE_OUTCOME_SENTINEL_ONLY): 50,
    }


class _Held:
    """Core's audit function, held until released (so a watcher sees the audit run)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> AuditReport:
        self.released.wait(timeout=60)
        return audit_boundary(*args, **kwargs)


async def test_watch_streams_every_state_until_the_audit_is_done(store_url: str) -> None:
    held = _Held()
    control = await start_control(store_url, audit=held)
    try:
        system_id = await create_system(control)
        shard = await capture(control, agreeing_rows(30), system_id=system_id)
        stub = control.integrity_stub()
        started = await stub.StartAudit(
            pb.StartAuditRequest(shard_id=shard.shard_id, profile_revision_id="exploratory"),
            metadata=TRAINER,
        )
        states: list[int] = []

        async def watch() -> pb.Audit:
            last = None
            stream = stub.WatchAudit(
                pb.WatchAuditRequest(audit_id=started.audit.audit_id), metadata=TRAINER
            )
            async for event in stream:
                states.append(event.audit.state)
                last = event.audit
                if event.audit.state == pb.AUDIT_STATE_RUNNING:
                    held.released.set()
            assert last is not None
            return last

        async with asyncio.timeout(60):
            final = await watch()
        assert states[-1] == pb.AUDIT_STATE_DONE
        assert pb.AUDIT_STATE_RUNNING in states
        assert states.count(pb.AUDIT_STATE_DONE) == 1  # the stream ended with the audit
        assert final.decision.outcome == pb.DECISION_OUTCOME_WARN  # 30 records
        assert final.decision.report_only  # exploratory: inspection only
        code, reason, _, _ = await wire_error(
            control,
            "WatchAudit",
            pb.WatchAuditRequest(audit_id="audit-unknown"),
            metadata=TRAINER,
        )
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    finally:
        held.released.set()
        await stop_control(control)
