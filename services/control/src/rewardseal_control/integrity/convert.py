"""Between the integrity protos (``rewardseal.v1.integrity_pb2``) and core's integrity types.

The wire rules both sides share (spec documents as ``Struct``, enum values as core's words,
signal rows) are :mod:`rewardseal.core.integrity.messages`; these are the control plane's answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rewardseal.core.integrity import (
    AuditBundle,
    DecisionEntry,
)
from rewardseal.core.integrity.messages import enum_value, signal_row_message, spec_struct
from rewardseal.core.integrity.profiles import METRIC_NAMES, IntegrityProfile
from rewardseal.core.integrity.reports import AuditReport
from rewardseal.core.integrity.retention import RetainedRow
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_control.integrity.store.audits import StoredAudit
from rewardseal_control.integrity.store.revisions import StoredRevision
from rewardseal_control.integrity.store.shards import StoredShard
from rewardseal_control.store.inputs import timestamp

__all__ = [
    "audit_message",
    "entry_message",
    "metric_results",
    "protocol_message",
    "profile_message",
    "sample_message",
    "shard_message",
    "system_message",
]


def system_message(stored: StoredRevision, reasons: Sequence[str]) -> pb.RewardSystemRevision:
    """The message of a stored reward-system revision (``reasons``: R-I-2 correlation)."""
    return pb.RewardSystemRevision(
        revision_id=stored.revision_id,
        content=spec_struct(stored.content),
        created_at=timestamp(stored.created_at),
        primary_sentinel_independent=not reasons,
        correlation_reasons=list(reasons),
    )


def protocol_message(stored: StoredRevision) -> pb.RetentionProtocolRevision:
    """The message of a stored retention protocol."""
    protocol = stored.protocol()
    message = pb.RetentionProtocolRevision(
        revision_id=stored.revision_id,
        name=protocol.name,
        builtin=stored.builtin,
        seed=protocol.seed,
        diagnostic_size=protocol.diagnostic_size,
        threshold_band=protocol.threshold_band,
        content=spec_struct(stored.content),
        created_at=timestamp(stored.created_at),
    )
    if protocol.core_size is not None:
        message.core_size = protocol.core_size
    return message


def _thresholds(profile: IntegrityProfile) -> list[pb.MetricThreshold]:
    found: list[pb.MetricThreshold] = []
    for threshold in profile.thresholds:
        item = pb.MetricThreshold(metric=threshold.metric)
        if threshold.minimum is not None:
            item.min = threshold.minimum
        if threshold.maximum is not None:
            item.max = threshold.maximum
        found.append(item)
    return found


def profile_message(stored: StoredRevision, *, default_name: str) -> pb.IntegrityProfileRevision:
    """The message of a stored integrity profile."""
    profile = stored.profile()
    return pb.IntegrityProfileRevision(
        revision_id=stored.revision_id,
        name=profile.name,
        builtin=stored.builtin,
        report_only=profile.report_only,
        warn_on_interval=profile.warn_on_interval,
        thresholds=_thresholds(profile),
        content=spec_struct(stored.content),
        created_at=timestamp(stored.created_at),
        is_default=stored.builtin and profile.name == default_name,
    )


def shard_message(shard: StoredShard) -> pb.SignalShard:
    """The message of a sealed shard."""
    return pb.SignalShard(
        shard_id=shard.shard_id,
        run_id=shard.run_id,
        boundary=shard.boundary,
        system_revision_id=shard.system_revision_id,
        protocol_revision_id=shard.protocol_revision_id,
        captured=shard.captured,
        exact=shard.exact,
        core_rows=shard.core_rows,
        diagnostic_rows=shard.diagnostic_rows,
        sealed_at=timestamp(shard.sealed_at),
        manifest=spec_struct(shard.manifest),
    )


def entry_message(entry: DecisionEntry, *, report_only: bool) -> pb.DecisionEntry:
    """The message of one decision entry."""
    message = pb.DecisionEntry(
        sequence=entry.sequence,
        kind=enum_value(pb.DecisionKind, entry.kind, "DECISION_KIND_"),  # type: ignore[arg-type]
        outcome=enum_value(pb.DecisionOutcome, entry.outcome, "DECISION_OUTCOME_"),  # type: ignore[arg-type]
        action=enum_value(pb.RunAction, entry.action, "RUN_ACTION_"),  # type: ignore[arg-type]
        reasons=list(entry.reasons),
        at=timestamp(datetime.fromisoformat(entry.at)),
        review_action=enum_value(pb.ReviewAction, entry.review_action, "REVIEW_ACTION_"),  # type: ignore[arg-type]
        review_reason=entry.review_reason or "",
        checkpoint=entry.checkpoint or "",
        reviewer=entry.reviewer or "",
        report_only=report_only,
    )
    if entry.supersedes is not None:
        message.supersedes = entry.supersedes
    return message


def metric_results(
    values: Mapping[str, float | None],
    report: AuditReport | None,
    profile: IntegrityProfile,
) -> list[pb.MetricResult]:
    """One result per metric, in report order: value, interval (``report``'s, when given) and
    the profile's threshold."""
    results: list[pb.MetricResult] = []
    for name in METRIC_NAMES:
        item = pb.MetricResult(name=name)
        value = values.get(name)
        if value is not None:
            item.value = value
        interval = None if report is None else report.intervals.get(name)
        if interval is not None:
            item.interval_low, item.interval_high = interval.low, interval.high
        threshold = profile.threshold(name)
        if threshold is not None:
            if threshold.minimum is not None:
                item.threshold_min = threshold.minimum
            if threshold.maximum is not None:
                item.threshold_max = threshold.maximum
            item.violated = value is not None and threshold.violation(value) is not None
        results.append(item)
    return results


def sample_message(position: int, kept: RetainedRow, outcome: str) -> pb.AuditSample:
    """One retained row as an audit sample."""
    return pb.AuditSample(
        position=position,
        population=enum_value(pb.SignalPopulation, kept.population, "SIGNAL_POPULATION_"),  # type: ignore[arg-type]
        family=enum_value(pb.DiagnosticFamily, kept.family, "DIAGNOSTIC_FAMILY_"),  # type: ignore[arg-type]
        outcome=enum_value(pb.SampleOutcome, outcome, "SAMPLE_OUTCOME_"),  # type: ignore[arg-type]
        row_digest=kept.row.digest,
        row=signal_row_message(kept.row),
    )


def audit_message(audit: StoredAudit, bundle: AuditBundle | None) -> pb.Audit:
    """The message of an audit; ``bundle`` (its verified bundle, once decided) adds the
    binding, the row counts and the decision in force."""
    message = pb.Audit(
        audit_id=audit.audit_id,
        state=enum_value(pb.AuditState, audit.state, "AUDIT_STATE_"),  # type: ignore[arg-type]
        run_id=audit.run_id,
        boundary=audit.boundary,
        shard_id=audit.shard_id,
        system_revision_id=audit.system_revision_id,
        protocol_revision_id=audit.protocol_revision_id,
        profile_revision_id=audit.profile_revision_id,
        evidence_digest=audit.evidence_digest or "",
        bundle_id=audit.bundle_id or "",
        bundle_reused=audit.bundle_reused,
        attempts=audit.attempts,
        error=audit.error,
        retry_of=audit.retry_of or "",
        retry_reason=audit.retry_reason,
        cancel_reason=audit.cancel_reason,
        created_at=timestamp(audit.created_at),
        updated_at=timestamp(audit.updated_at),
    )
    if bundle is not None:
        report = bundle.report
        message.gating_eligible = report.gating_eligible
        message.binding_blockers.extend(report.binding_blockers)
        message.core_rows, message.diagnostic_rows = report.core_rows, report.diagnostic_rows
        if audit.decision is not None:
            message.decision.CopyFrom(
                entry_message(audit.decision, report_only=report.decision.report_only)
            )
    return message
