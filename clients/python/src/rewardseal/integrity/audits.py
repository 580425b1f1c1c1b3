"""One audit of one boundary: verify the shard, check the evidence, compute, decide (R-I-6/7).

:func:`audit_boundary` is the whole pure pipeline a control-plane runner calls with what it read
from storage; it never raises for bad *evidence* (a corrupt shard, a stale runtime, a trainer
whose mapped rewards disagree with the revision's mapping): those become an
``incomplete_evidence`` report with the reasons, which is still published as a bundle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import RewardMappingError, ShardCorrupt, ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.binding import resolve_binding
from rewardseal.core.integrity.bootstrap import RESAMPLES, SEED, Interval, grouped_bootstrap
from rewardseal.core.integrity.decisions import Decision, decide, evidence_problems
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.mapping import RewardMapping, map_reward
from rewardseal.core.integrity.metrics import (
    CoreMetrics,
    MetricColumns,
    compute_metrics,
    metric_columns,
    metrics_from_columns,
)
from rewardseal.core.integrity.profiles import IntegrityProfile
from rewardseal.core.integrity.protocols import RetentionProtocol
from rewardseal.core.integrity.retention import RetainedRow, Retention
from rewardseal.core.integrity.shards import ShardManifest, verify_shard
from rewardseal.core.integrity.signals import SignalRow
from rewardseal.core.integrity.systems import RewardSystem
from rewardseal.core.integrity.trends import BoundaryTrend, boundary_trends

__all__ = [
    "AuditReport",
    "SubgroupMetrics",
    "audit_boundary",
    "evidence_digest",
    "mapping_mismatches",
]

MAPPING_TOLERANCE: Final = 1e-9
_REPORT_KEYS: Final = (
    "system_revision_id",
    "protocol_revision_id",
    "profile_revision_id",
    "shard_ids",
    "boundary",
    "evidence_digest",
    "gating_eligible",
    "binding_blockers",
    "core_rows",
    "diagnostic_rows",
    "diagnostic_families",
    "metrics",
    "intervals",
    "subgroups",
    "trends",
    "decision",
)


@dataclass(frozen=True, slots=True)
class SubgroupMetrics:
    """Point metrics of the core rows carrying one subgroup label (reported apart, R-I-6)."""

    key: str
    value: str
    metrics: CoreMetrics

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {"key": self.key, "value": self.value, "metrics": self.metrics.to_json()}

    @classmethod
    def from_json(cls, doc: object) -> SubgroupMetrics:
        """Read stored subgroup metrics."""
        data = fields.mapping(doc, "subgroup")
        fields.no_unknown_keys(data, ("key", "value", "metrics"), "subgroup")
        return cls(
            fields.string(data, "key", "subgroup"),
            fields.string(data, "value", "subgroup", allow_empty=True),
            CoreMetrics.from_json(data.get("metrics")),
        )


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Everything an audit found; ``metrics`` is None when the evidence was incomplete."""

    system_revision_id: str
    protocol_revision_id: str
    profile_revision_id: str
    shard_ids: tuple[str, ...]
    boundary: int
    evidence_digest: str
    gating_eligible: bool
    binding_blockers: tuple[str, ...]
    core_rows: int
    diagnostic_rows: int
    diagnostic_families: dict[str, int]
    metrics: CoreMetrics | None
    intervals: dict[str, Interval]
    subgroups: tuple[SubgroupMetrics, ...]
    trends: tuple[BoundaryTrend, ...]
    decision: Decision

    def to_json(self) -> JsonObject:
        """The plain-dict form (the content of an audit bundle)."""
        return {
            "system_revision_id": self.system_revision_id,
            "protocol_revision_id": self.protocol_revision_id,
            "profile_revision_id": self.profile_revision_id,
            "shard_ids": list(self.shard_ids),
            "boundary": self.boundary,
            "evidence_digest": self.evidence_digest,
            "gating_eligible": self.gating_eligible,
            "binding_blockers": list(self.binding_blockers),
            "core_rows": self.core_rows,
            "diagnostic_rows": self.diagnostic_rows,
            "diagnostic_families": dict(sorted(self.diagnostic_families.items())),
            "metrics": None if self.metrics is None else self.metrics.to_json(),
            "intervals": {name: iv.to_json() for name, iv in sorted(self.intervals.items())},
            "subgroups": [group.to_json() for group in self.subgroups],
            "trends": [point.to_json() for point in self.trends],
            "decision": self.decision.to_json(),
        }

    @classmethod
    def from_json(cls, doc: object) -> AuditReport:
        """Read a stored report (or a verified bundle's content)."""
        where = "report"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(data, _REPORT_KEYS, where)
        families = fields.mapping(data.get("diagnostic_families", {}), "diagnostic_families")
        intervals = fields.mapping(data.get("intervals", {}), "intervals")
        metrics = data.get("metrics")
        return cls(
            system_revision_id=fields.string(data, "system_revision_id", where),
            protocol_revision_id=fields.string(data, "protocol_revision_id", where),
            profile_revision_id=fields.string(data, "profile_revision_id", where),
            shard_ids=tuple(str(s) for s in fields.sequence(data, "shard_ids", where)),
            boundary=fields.integer(data, "boundary", where),
            evidence_digest=fields.string(data, "evidence_digest", where),
            gating_eligible=fields.boolean(data, "gating_eligible", where),
            binding_blockers=tuple(
                str(b) for b in fields.sequence(data, "binding_blockers", where)
            ),
            core_rows=fields.integer(data, "core_rows", where),
            diagnostic_rows=fields.integer(data, "diagnostic_rows", where),
            diagnostic_families={
                name: fields.integer(families, name, "diagnostic_families") for name in families
            },
            metrics=None if metrics is None else CoreMetrics.from_json(metrics),
            intervals={name: Interval.from_json(iv) for name, iv in intervals.items()},
            subgroups=tuple(
                SubgroupMetrics.from_json(g) for g in fields.sequence(data, "subgroups", where)
            ),
            trends=tuple(
                BoundaryTrend.from_json(p) for p in fields.sequence(data, "trends", where)
            ),
            decision=Decision.from_json(data.get("decision")),
        )


def evidence_digest(
    system_revision_id: str,
    protocol_revision_id: str,
    profile_revision_id: str,
    shard_ids: Sequence[str],
    *,
    runtime_current: bool = True,
) -> str:
    """The digest of what an audit reads: equal evidence, equal digest (R-I-8: a store reuses
    the verified bundle of an earlier audit with this digest instead of re-auditing)."""
    return digest_json(
        {
            "system_revision_id": system_revision_id,
            "protocol_revision_id": protocol_revision_id,
            "profile_revision_id": profile_revision_id,
            "shard_ids": list(shard_ids),
            "runtime_current": runtime_current,
        }
    )


def mapping_mismatches(rows: Sequence[SignalRow], mapping: RewardMapping) -> list[int]:
    """Indexes of rows whose ``optimizer_mapped`` is not what the revision's mapping makes of
    ``optimizer_raw``: the trainer optimized something other than the bound reward system."""
    mismatched: list[int] = []
    for index, row in enumerate(rows):
        try:
            expected = map_reward(row.optimizer_raw, mapping).mapped
        except RewardMappingError:
            mismatched.append(index)  # under `raise` no row may hold an unmappable reward
            continue
        given = row.optimizer_mapped
        if (expected is None) != (given is None) or (
            expected is not None
            and given is not None
            and not math.isclose(expected, given, rel_tol=0.0, abs_tol=MAPPING_TOLERANCE)
        ):
            mismatched.append(index)
    return mismatched


def _subgroups(core: Sequence[SignalRow], mapping: RewardMapping) -> tuple[SubgroupMetrics, ...]:
    labels = sorted({item for row in core for item in row.subgroups.items()})
    return tuple(
        SubgroupMetrics(
            key,
            value,
            compute_metrics([row for row in core if row.subgroups.get(key) == value], mapping),
        )
        for key, value in labels
    )


def _verified(
    shard: tuple[ShardManifest, Sequence[RetainedRow]], shard_id: str | None
) -> Retention | None:
    try:
        return verify_shard(shard[0], shard[1], shard_id=shard_id)
    except (ShardCorrupt, ValidationError):
        return None


def audit_boundary(
    manifest: ShardManifest,
    rows: Sequence[RetainedRow],
    *,
    system: RewardSystem,
    protocol: RetentionProtocol,
    profile: IntegrityProfile,
    shard_id: str | None = None,
    earlier: Sequence[tuple[ShardManifest, Sequence[RetainedRow]]] = (),
    runtime_current: bool = True,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> AuditReport:
    """Audit one sealed boundary shard against its binding.

    ``shard_id`` is the id the shard was stored under (its manifest must hash to it);
    ``earlier`` are the run's earlier shards, for trends; ``runtime_current`` is False when the
    caller knows the pinned runtime has been replaced (a revoked or rotated sentinel key). Rows
    whose ``runtime_identity`` differs from the optimizer's pinned runtime fingerprint make the
    runtime stale as well.
    """
    binding = resolve_binding(system, protocol, profile)
    problems: set[str] = set()
    retention = _verified((manifest, rows), shard_id)
    if retention is None:
        problems.add("shard_unverifiable")
    if (
        manifest.system_revision_id != system.revision_id
        or manifest.protocol_revision_id != protocol.revision_id
    ):
        problems.add("shard_revision_mismatch")
    core = retention.core if retention is not None else ()
    pinned = system.optimizer.fingerprints.runtime
    if not runtime_current or (
        pinned is not None and any(row.runtime_identity != pinned for row in core)
    ):
        problems.add("runtime_stale")
    if mapping_mismatches(core, system.mapping):
        problems.add("optimizer_mapping_mismatch")
    records = len({row.record_id for row in core})
    columns: MetricColumns | None = metric_columns(core, system.mapping) if core else None
    if columns is not None and not columns.scored:
        problems.add("no_scored_rows")
    # The record count means something only for rows that verified.
    incomplete = evidence_problems(records, sorted(problems)) if retention else sorted(problems)
    earlier_retentions = [_verified(shard, None) for shard in earlier]
    if any(r is None for r in earlier_retentions):
        incomplete = sorted({*incomplete, "earlier_shard_unverifiable"})
    metrics: CoreMetrics | None = None
    intervals: dict[str, Interval] = {}
    subgroups: tuple[SubgroupMetrics, ...] = ()
    trends: tuple[BoundaryTrend, ...] = ()
    if not incomplete and retention is not None and columns is not None:
        metrics = metrics_from_columns(columns)
        intervals = grouped_bootstrap(columns, resamples=resamples, seed=seed)
        subgroups = _subgroups(core, system.mapping)
        history = [r for r in earlier_retentions if r is not None] + [retention]
        trends = boundary_trends(history, system.mapping)
    decision = decide(
        metrics,
        intervals,
        profile,
        incomplete=incomplete,
        gating_eligible=binding.gating_eligible,
    )
    shard_ids = (*(m.shard_id for m, _ in earlier), manifest.shard_id)
    diagnostics = retention.diagnostics if retention is not None else ()
    families: dict[str, int] = {}
    for item in diagnostics:
        families[str(item.family)] = families.get(str(item.family), 0) + 1
    return AuditReport(
        system_revision_id=system.revision_id,
        protocol_revision_id=protocol.revision_id,
        profile_revision_id=profile.revision_id,
        shard_ids=shard_ids,
        boundary=manifest.boundary,
        evidence_digest=evidence_digest(
            system.revision_id,
            protocol.revision_id,
            profile.revision_id,
            shard_ids,
            runtime_current=runtime_current,
        ),
        gating_eligible=binding.gating_eligible,
        binding_blockers=binding.blockers,
        core_rows=len(core),
        diagnostic_rows=len(diagnostics),
        diagnostic_families=families,
        metrics=metrics,
        intervals=intervals,
        subgroups=subgroups,
        trends=trends,
        decision=decision,
    )
