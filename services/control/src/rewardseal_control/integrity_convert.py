"""Between the integrity protos (``rewardseal.v1.integrity_pb2``) and core's integrity types.

Spec documents travel as ``google.protobuf.Struct`` by :mod:`rewardseal.integrity_messages`
(the clients' rule too). Enum values map to core's lowercase words by their
suffix (``SIGNAL_OUTCOME_ACCEPTED`` is ``accepted``); an UNSPECIFIED value where one is required
is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rewardseal.errors import ValidationError
from rewardseal.integrity import (
    AuditBundle,
    AuditorObservation,
    DecisionEntry,
    SentinelObservation,
    SignalRow,
)
from rewardseal.integrity.audits import AuditReport
from rewardseal.integrity.profiles import METRIC_NAMES, IntegrityProfile
from rewardseal.integrity.retention import RetainedRow
from rewardseal.integrity_messages import spec_struct
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_control.store.inputs import timestamp
from rewardseal_control.store.integrity_audits import StoredAudit
from rewardseal_control.store.integrity_revisions import StoredRevision
from rewardseal_control.store.integrity_shards import StoredShard

__all__ = [
    "audit_message",
    "entry_message",
    "enum_value",
    "enum_word",
    "metric_results",
    "protocol_message",
    "profile_message",
    "sample_message",
    "shard_message",
    "signal_row",
    "signal_row_message",
    "system_message",
]


def enum_word(enum: Any, value: int, prefix: str) -> str | None:
    """The lowercase word of an enum value (``None`` for UNSPECIFIED or an unknown number)."""
    try:
        name = str(enum.Name(value))
    except ValueError:
        return None
    word = name.removeprefix(prefix).lower()
    return None if word == "unspecified" else word


def enum_value(enum: Any, word: str | None, prefix: str) -> int:
    """The enum number of a lowercase word (0, UNSPECIFIED, for None)."""
    return 0 if word is None else int(enum.Value(prefix + word.upper()))


def _required(enum: Any, value: int, prefix: str, where: str) -> str:
    word = enum_word(enum, value, prefix)
    if word is None:
        raise ValidationError(f"{where} is required (not UNSPECIFIED)")
    return word


def _opt(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def signal_row(message: pb.SignalRow, where: str = "row") -> SignalRow:
    """A core SignalRow from its message (core validates every field).

    Raises:
        ValidationError: a field is missing, out of range or not finite (``where`` names the
            row).
    """
    try:
        sentinel = None
        if message.HasField("sentinel"):
            observed = message.sentinel
            sentinel = SentinelObservation(
                outcome=_required(  # type: ignore[arg-type]
                    pb.SignalOutcome, observed.outcome, "SIGNAL_OUTCOME_", "sentinel.outcome"
                ),
                reward=_opt(observed, "reward"),
                receipt_id=_opt(observed, "receipt_id"),
                receipt_digest=_opt(observed, "receipt_digest"),
                error=_opt(observed, "error"),
            )
        auditors = tuple(
            AuditorObservation(
                auditor=item.auditor,
                outcome=_required(  # type: ignore[arg-type]
                    pb.SignalOutcome, item.outcome, "SIGNAL_OUTCOME_", "auditors[].outcome"
                ),
                reward=_opt(item, "reward"),
                receipt_digest=_opt(item, "receipt_digest"),
            )
            for item in message.auditors
        )
        return SignalRow(
            record_id=message.record_id,
            candidate=message.candidate,
            episode_id=message.episode_id,
            output_digest=message.output_digest,
            optimizer_raw=_opt(message, "optimizer_raw"),
            optimizer_mapped=_opt(message, "optimizer_mapped"),
            group_id=message.group_id,
            selection=_required(  # type: ignore[arg-type]
                pb.SignalSelection, message.selection, "SIGNAL_SELECTION_", "selection"
            ),
            checkpoint=message.checkpoint,
            policy_update=message.policy_update,
            runtime_identity=message.runtime_identity,
            sentinel=sentinel,
            auditors=auditors,
            components=dict(message.components),
            subgroups=dict(message.subgroups),
        )
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc.message}") from None


def signal_row_message(row: SignalRow) -> pb.SignalRow:
    """The message of a core SignalRow."""
    message = pb.SignalRow(
        record_id=row.record_id,
        candidate=row.candidate,
        episode_id=row.episode_id,
        output_digest=row.output_digest,
        group_id=row.group_id,
        selection=enum_value(pb.SignalSelection, row.selection, "SIGNAL_SELECTION_"),  # type: ignore[arg-type]
        checkpoint=row.checkpoint,
        policy_update=row.policy_update,
        runtime_identity=row.runtime_identity,
        components=dict(row.components),
        subgroups=dict(row.subgroups),
    )
    for name in ("optimizer_raw", "optimizer_mapped"):
        if getattr(row, name) is not None:
            setattr(message, name, getattr(row, name))
    if row.sentinel is not None:
        sentinel = message.sentinel
        sentinel.outcome = enum_value(pb.SignalOutcome, row.sentinel.outcome, "SIGNAL_OUTCOME_")  # type: ignore[assignment]
        for name in ("reward", "receipt_id", "receipt_digest", "error"):
            if getattr(row.sentinel, name) is not None:
                setattr(sentinel, name, getattr(row.sentinel, name))
    for observed in row.auditors:
        item = message.auditors.add(
            auditor=observed.auditor,
            outcome=enum_value(pb.SignalOutcome, observed.outcome, "SIGNAL_OUTCOME_"),
        )
        if observed.reward is not None:
            item.reward = observed.reward
        if observed.receipt_digest is not None:
            item.receipt_digest = observed.receipt_digest
    return message


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
