"""Per-boundary trends over matched identities (R-I-6).

A policy drifting toward where the optimizer and the sentinel disagree shows up as agreement
falling from boundary to boundary. Comparing whole cores would mix that with a change of sample,
so trends use only the records present in the core of *every* boundary (retention ranks records
by a seeded hash, so the same records tend to stay in the core).
"""

from __future__ import annotations

from collections.abc import Sequence

from rewardseal.core.integrity.mapping import RewardMapping
from rewardseal.core.integrity.reports import BoundaryTrend
from rewardseal.core.integrity.retention import Retention
from rewardseal_server.integrity_audit.metrics import compute_metrics

__all__ = ["boundary_trends"]


def boundary_trends(
    boundaries: Sequence[Retention], mapping: RewardMapping
) -> tuple[BoundaryTrend, ...]:
    """One point per boundary (ascending), over the records in every boundary's core.

    Empty when fewer than two boundaries are given or no record is in all of them.
    """
    if len(boundaries) < 2:
        return ()
    matched = set.intersection(*({row.record_id for row in b.core} for b in boundaries))
    if not matched:
        return ()
    points: list[BoundaryTrend] = []
    for retention in sorted(boundaries, key=lambda b: b.boundary):
        rows = [row for row in retention.core if row.record_id in matched]
        metrics = compute_metrics(rows, mapping)
        points.append(
            BoundaryTrend(
                boundary=retention.boundary,
                records=metrics.records,
                rows=metrics.rows,
                pass_agreement=metrics.pass_agreement,
                optimizer_only_rate=metrics.optimizer_only_rate,
                sentinel_only_rate=metrics.sentinel_only_rate,
                reward_gap=metrics.reward_gap,
            )
        )
    return tuple(points)
