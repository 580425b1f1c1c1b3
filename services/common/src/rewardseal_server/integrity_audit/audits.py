"""One audit of one boundary: verify the shard, check the evidence, compute, decide (R-I-6/7).

:func:`audit_boundary` is the whole pure pipeline a control-plane runner calls with what it read
from storage; it never raises for bad *evidence* (a corrupt shard, a stale runtime, a trainer
whose mapped rewards disagree with the revision's mapping): those become an
``incomplete_evidence`` report with the reasons, which is still published as a bundle. The
report's types are core's (:mod:`rewardseal.core.integrity.reports`), so anyone can read a
bundle; computing one is the control plane's alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import RewardMappingError, ShardCorrupt, ValidationError
from rewardseal.core.integrity.binding import resolve_binding
from rewardseal.core.integrity.mapping import RewardMapping, map_reward
from rewardseal.core.integrity.profiles import IntegrityProfile
from rewardseal.core.integrity.protocols import RetentionProtocol
from rewardseal.core.integrity.reports import (
    AuditReport,
    BoundaryTrend,
    CoreMetrics,
    Interval,
    SubgroupMetrics,
)
from rewardseal.core.integrity.retention import RetainedRow, Retention
from rewardseal.core.integrity.shards import ShardManifest, verify_shard
from rewardseal.core.integrity.signals import SignalRow
from rewardseal.core.integrity.systems import RewardSystem
from rewardseal_server.integrity_audit.bootstrap import RESAMPLES, SEED, grouped_bootstrap
from rewardseal_server.integrity_audit.deciding import decide, evidence_problems
from rewardseal_server.integrity_audit.metrics import (
    MetricColumns,
    compute_metrics,
    metric_columns,
    metrics_from_columns,
)
from rewardseal_server.integrity_audit.trends import boundary_trends

__all__ = [
    "audit_boundary",
    "evidence_digest",
    "mapping_mismatches",
]

MAPPING_TOLERANCE: Final = 1e-9


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
