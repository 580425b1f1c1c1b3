"""Read-only views of decided audits: samples, metrics and the comparison of two audits.

Every view reads the audit's stored evidence (its shard's retained rows) and its verified
bundle (the report); nothing here computes a metric or a decision anew. A sample's outcome is
:func:`~rewardseal_server.integrity_audit.metrics.sample_outcome` of the row under the reward
system's mapping: the same reading the audit's rates were built from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity.mapping import RewardMapping
from rewardseal.core.integrity.messages import enum_value, enum_word
from rewardseal.core.integrity.profiles import METRIC_NAMES, IntegrityProfile
from rewardseal.core.integrity.reports import AuditReport
from rewardseal.core.integrity.retention import RetainedRow
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_control.integrity.convert import metric_results, sample_message
from rewardseal_control.store.pagination import fingerprint, offset_page
from rewardseal_server.integrity_audit.metrics import sample_outcome

__all__ = [
    "MAX_QUERY_LENGTH",
    "Sample",
    "compare_audits",
    "list_samples",
    "metrics_response",
    "samples_of",
]

MAX_QUERY_LENGTH: Final = 256


@dataclass(frozen=True, slots=True)
class Sample:
    """One retained row of an audit's shard with its place and its outcome."""

    position: int
    kept: RetainedRow
    outcome: str


def samples_of(rows: Sequence[RetainedRow], mapping: RewardMapping) -> list[Sample]:
    """Every retained row as a sample, in shard order."""
    return [
        Sample(position, kept, sample_outcome(kept.row, mapping))
        for position, kept in enumerate(rows)
    ]


def _matches(sample: Sample, query: str) -> bool:
    row = sample.kept.row
    texts = [row.record_id, row.episode_id, row.group_id, row.checkpoint, row.output_digest]
    texts.extend(row.subgroups.values())
    if row.sentinel is not None and row.sentinel.error:
        texts.append(row.sentinel.error)
    return any(query in text.lower() for text in texts)


def list_samples(
    audit_id: str, samples: Sequence[Sample], request: pb.ListAuditSamplesRequest
) -> pb.ListAuditSamplesResponse:
    """One page of an audit's samples under the request's filters."""
    if len(request.query) > MAX_QUERY_LENGTH:
        raise ValidationError(f"query is longer than {MAX_QUERY_LENGTH} characters")
    outcome = enum_word(pb.SampleOutcome, request.outcome, "SAMPLE_OUTCOME_")
    population = enum_word(pb.SignalPopulation, request.population, "SIGNAL_POPULATION_")
    if request.outcome and outcome is None:
        raise ValidationError(f"unknown sample outcome {request.outcome}")
    if request.population and population is None:
        raise ValidationError(f"unknown population {request.population}")
    query = request.query.strip().lower()
    chosen = [
        sample
        for sample in samples
        if (population is None or sample.kept.population == population)
        and (
            outcome is None
            or sample.outcome == outcome
            or (outcome == "disagreement" and sample.outcome in ("optimizer_only", "sentinel_only"))
        )
        and (not query or _matches(sample, query))
    ]
    page = offset_page(
        chosen,
        kind="integrity_samples",
        query=fingerprint(audit=audit_id, outcome=outcome, population=population, q=query),
        page_size=request.page_size,
        page_token=request.page_token,
    )
    return pb.ListAuditSamplesResponse(
        samples=[sample_message(s.position, s.kept, s.outcome) for s in page.items],
        next_page_token=page.next_page_token,
    )


def metrics_response(
    audit_id: str, report: AuditReport, profile: IntegrityProfile, resamples: int
) -> pb.GetAuditMetricsResponse:
    """The metrics, intervals, subgroups, trends and diagnostic counts of a decided audit."""
    response = pb.GetAuditMetricsResponse(
        audit_id=audit_id,
        computed=report.metrics is not None,
        resamples=resamples if report.metrics is not None else 0,
        diagnostics=[
            pb.DiagnosticCount(
                family=enum_value(pb.DiagnosticFamily, family, "DIAGNOSTIC_FAMILY_"),  # type: ignore[arg-type]
                rows=count,
            )
            for family, count in sorted(report.diagnostic_families.items())
        ],
    )
    if report.metrics is None:
        return response
    metrics = report.metrics
    response.rows, response.records, response.scored = metrics.rows, metrics.records, metrics.scored
    response.metrics.extend(
        metric_results({name: metrics.value(name) for name in METRIC_NAMES}, report, profile)
    )
    for group in report.subgroups:
        values = {name: group.metrics.value(name) for name in METRIC_NAMES}
        response.subgroups.add(
            key=group.key,
            value=group.value,
            rows=group.metrics.rows,
            records=group.metrics.records,
            metrics=metric_results(values, None, profile),
        )
    for point in report.trends:
        trend = response.trends.add(boundary=point.boundary, records=point.records, rows=point.rows)
        for name in ("pass_agreement", "optimizer_only_rate", "sentinel_only_rate", "reward_gap"):
            value = getattr(point, name)
            if value is not None:
                setattr(trend, name, value)
    return response


def _key(sample: Sample, pairing: str) -> tuple[str, int] | str:
    row = sample.kept.row
    return row.episode_id if pairing == "episode" else row.identity


def compare_audits(
    left: tuple[AuditReport, Sequence[Sample]],
    right: tuple[AuditReport, Sequence[Sample]],
    pairing: int,
) -> pb.CompareAuditsResponse:
    """Metric deltas and how the core rows both audits hold moved between outcomes."""
    how = enum_word(pb.AuditPairing, pairing, "AUDIT_PAIRING_") or "record"
    if pairing and enum_word(pb.AuditPairing, pairing, "AUDIT_PAIRING_") is None:
        raise ValidationError(f"unknown pairing {pairing}")
    (left_report, left_samples), (right_report, right_samples) = left, right
    left_core = {_key(s, how): s for s in left_samples if s.kept.population == "core"}
    right_core = {_key(s, how): s for s in right_samples if s.kept.population == "core"}
    paired = left_core.keys() & right_core.keys()
    moves = Counter((left_core[k].outcome, right_core[k].outcome) for k in paired)
    response = pb.CompareAuditsResponse(
        paired_rows=len(paired),
        left_only_rows=len(left_core.keys() - paired),
        right_only_rows=len(right_core.keys() - paired),
        left_outcome=enum_value(
            pb.DecisionOutcome, left_report.decision.outcome, "DECISION_OUTCOME_"
        ),  # type: ignore[arg-type]
        right_outcome=enum_value(
            pb.DecisionOutcome, right_report.decision.outcome, "DECISION_OUTCOME_"
        ),  # type: ignore[arg-type]
    )
    for (before, after), count in sorted(moves.items()):
        response.transitions.add(
            left=enum_value(pb.SampleOutcome, before, "SAMPLE_OUTCOME_"),
            right=enum_value(pb.SampleOutcome, after, "SAMPLE_OUTCOME_"),
            rows=count,
        )
    for name in METRIC_NAMES:
        delta = response.metrics.add(name=name)
        values = [
            None if report.metrics is None else report.metrics.value(name)
            for report in (left_report, right_report)
        ]
        if values[0] is not None:
            delta.left = values[0]
        if values[1] is not None:
            delta.right = values[1]
        if values[0] is not None and values[1] is not None:
            delta.delta = round(values[1] - values[0], 9)
    return response
