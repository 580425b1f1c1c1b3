"""What an audit reports (R-I-6/7/8): the content of a signed audit bundle, as plain types.

An :class:`AuditReport` carries the point metrics (:class:`CoreMetrics`), their bootstrap
intervals (:class:`Interval`), per-subgroup metrics, per-boundary trends and the decision. These
are the types a bundle's reader needs (:func:`rewardseal.core.integrity.verify_bundle`, on a
trainer or anywhere): JSON in and out, nothing computed. Computing them (the metrics over the
core, the grouped bootstrap, the trends, the decision table and the whole audit) is the control
plane's, in :mod:`rewardseal_server.integrity_audit`, which trainers never install.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.decisions import Decision
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.profiles import METRIC_NAMES

__all__ = ["AuditReport", "BoundaryTrend", "CoreMetrics", "Interval", "SubgroupMetrics"]


@dataclass(frozen=True, slots=True)
class Interval:
    """A two-sided percentile interval of one metric."""

    low: float
    high: float

    def to_json(self) -> JsonObject:
        """``{"low": x, "high": y}``."""
        return {"low": self.low, "high": self.high}

    @classmethod
    def from_json(cls, doc: object) -> Interval:
        """Read a stored interval."""
        data = fields.mapping(doc, "interval")
        fields.no_unknown_keys(data, ("low", "high"), "interval")
        return cls(fields.finite(data, "low", "interval"), fields.finite(data, "high", "interval"))


@dataclass(frozen=True, slots=True)
class CoreMetrics:
    """Point values of every metric (None where it cannot be computed) and the counts."""

    rows: int
    records: int
    scored: int
    coverage: float | None
    error_rate: float | None
    pass_agreement: float | None
    optimizer_only_rate: float | None
    sentinel_only_rate: float | None
    reward_gap: float | None
    spearman: float | None
    kendall: float | None
    top_tail_disagreement: float | None
    saturation: float | None

    def value(self, metric: str) -> float | None:
        """The value of ``metric`` (one of METRIC_NAMES)."""
        if metric not in METRIC_NAMES:
            raise ValidationError(f"unknown metric {metric!r}")
        value: float | None = getattr(self, metric)
        return value

    def to_json(self) -> JsonObject:
        """The plain-dict form: counts, then each metric (null where not computed)."""
        doc: JsonObject = {"rows": self.rows, "records": self.records, "scored": self.scored}
        doc.update({name: getattr(self, name) for name in METRIC_NAMES})
        return doc

    @classmethod
    def from_json(cls, doc: object) -> CoreMetrics:
        """Read stored metrics."""
        data = fields.mapping(doc, "metrics")
        fields.no_unknown_keys(data, ("rows", "records", "scored", *METRIC_NAMES), "metrics")
        return cls(
            rows=fields.integer(data, "rows", "metrics"),
            records=fields.integer(data, "records", "metrics"),
            scored=fields.integer(data, "scored", "metrics"),
            **{name: fields.optional_finite(data, name, "metrics") for name in METRIC_NAMES},
        )


_TREND_KEYS = (
    "boundary",
    "records",
    "rows",
    "pass_agreement",
    "optimizer_only_rate",
    "sentinel_only_rate",
    "reward_gap",
)


@dataclass(frozen=True, slots=True)
class BoundaryTrend:
    """The headline rates of one boundary over the matched records."""

    boundary: int
    records: int
    rows: int
    pass_agreement: float | None
    optimizer_only_rate: float | None
    sentinel_only_rate: float | None
    reward_gap: float | None

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {key: getattr(self, key) for key in _TREND_KEYS}

    @classmethod
    def from_json(cls, doc: object) -> BoundaryTrend:
        """Read a stored trend point."""
        data = fields.mapping(doc, "trend")
        fields.no_unknown_keys(data, _TREND_KEYS, "trend")
        return cls(
            boundary=fields.integer(data, "boundary", "trend"),
            records=fields.integer(data, "records", "trend"),
            rows=fields.integer(data, "rows", "trend"),
            **{key: fields.optional_finite(data, key, "trend") for key in _TREND_KEYS[3:]},
        )


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
