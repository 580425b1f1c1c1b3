"""The audit computation of reward integrity (docs/spec.md section 12, R-I-6/7): what only the
control plane runs, kept out of the trainer's distribution.

:func:`.audits.audit_boundary` verifies a sealed shard against its binding, computes the metrics
over the uniform core (:mod:`.metrics`), their grouped-bootstrap intervals (:mod:`.bootstrap`)
and the per-boundary trends (:mod:`.trends`), and applies the decision table (:mod:`.deciding`).
Its answer is core's :class:`~rewardseal.core.integrity.AuditReport`, which the control plane
signs as a bundle (:func:`~rewardseal.core.integrity.build_bundle`) and anyone verifies with
core alone. Pure like core (no I/O, no clock; time and seeds passed in), but with numpy and
scipy: the control plane imports it, the kit's integrity proof runs it in process, and
``rewardseal`` never does (an import-linter contract).

Modules, in the order an audit runs: ``metrics``, ``bootstrap``, ``trends``, ``deciding``,
``audits``.
"""

from __future__ import annotations

from rewardseal_server.integrity_audit.audits import (
    audit_boundary,
    evidence_digest,
    mapping_mismatches,
)
from rewardseal_server.integrity_audit.bootstrap import RESAMPLES, SEED, grouped_bootstrap
from rewardseal_server.integrity_audit.deciding import decide, evidence_problems, threshold_reasons
from rewardseal_server.integrity_audit.metrics import (
    compute_metrics,
    metric_columns,
    sample_outcome,
)
from rewardseal_server.integrity_audit.trends import boundary_trends

__all__ = [
    "RESAMPLES",
    "SEED",
    "audit_boundary",
    "boundary_trends",
    "compute_metrics",
    "decide",
    "evidence_digest",
    "evidence_problems",
    "grouped_bootstrap",
    "mapping_mismatches",
    "metric_columns",
    "sample_outcome",
    "threshold_reasons",
]
