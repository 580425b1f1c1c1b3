"""The decision table of an audit (R-I-7): what its evidence and metrics decide.

==============================================  ===================  ========
evidence and metrics                            outcome              action
==============================================  ===================  ========
< 20 core records, corrupt or unverifiable      incomplete_evidence  pause
shard, stale runtime, nothing scored
any metric outside its profile threshold        fail                 pause
20-99 core records                              warn (at best)       continue
an interval past a threshold (warn_on_interval) warn                 continue
otherwise                                       pass                 continue
==============================================  ===================  ========

Every metric outside its threshold is a reason, not just the first. With a report-only profile
or a binding that cannot gate, the outcome is computed the same way but the action is always
``continue`` (inspection only). The :class:`~rewardseal.core.integrity.decisions.Decision` it
makes, and the history a review appends to, are core's plain types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from rewardseal.core.integrity.decisions import Decision, DecisionOutcome
from rewardseal.core.integrity.profiles import METRIC_NAMES, IntegrityProfile
from rewardseal.core.integrity.reports import CoreMetrics, Interval

__all__ = [
    "MIN_EVIDENCE_RECORDS",
    "MIN_PASS_RECORDS",
    "decide",
    "evidence_problems",
    "threshold_reasons",
]

MIN_PASS_RECORDS: Final = 100
MIN_EVIDENCE_RECORDS: Final = 20


def evidence_problems(records: int, problems: Sequence[str] = ()) -> list[str]:
    """Why the evidence is incomplete (sorted; empty when metrics may be computed).

    ``problems`` are the audit's own findings (``shard_unverifiable``, ``runtime_stale``, ...);
    fewer than :data:`MIN_EVIDENCE_RECORDS` distinct core records adds ``evidence_below_minimum``.
    """
    found = set(problems)
    if records < MIN_EVIDENCE_RECORDS:
        found.add("evidence_below_minimum")
    return sorted(found)


def threshold_reasons(metrics: CoreMetrics, profile: IntegrityProfile) -> list[str]:
    """``<metric>_below_minimum`` / ``<metric>_above_maximum`` for every metric outside its
    threshold, in metric order; a metric that could not be computed is not judged."""
    reasons: list[str] = []
    for metric in METRIC_NAMES:
        threshold, value = profile.threshold(metric), metrics.value(metric)
        if threshold is None or value is None:
            continue
        violation = threshold.violation(value)
        if violation is not None:
            reasons.append(violation)
    return reasons


def _interval_reasons(intervals: Mapping[str, Interval], profile: IntegrityProfile) -> list[str]:
    reasons: list[str] = []
    for metric in METRIC_NAMES:
        threshold, interval = profile.threshold(metric), intervals.get(metric)
        if threshold is None or interval is None:
            continue
        if threshold.violation(interval.low) or threshold.violation(interval.high):
            reasons.append(f"{metric}_interval_crosses_threshold")
    return reasons


def decide(
    metrics: CoreMetrics | None,
    intervals: Mapping[str, Interval],
    profile: IntegrityProfile,
    *,
    incomplete: Sequence[str] = (),
    gating_eligible: bool = True,
) -> Decision:
    """Apply the decision table.

    ``incomplete`` is :func:`evidence_problems`' answer; when it is not empty (or ``metrics`` is
    None) the outcome is ``incomplete_evidence`` and no metric is judged.
    """
    report_only = profile.report_only or not gating_eligible
    flags = ["report_only"] if report_only else []
    if incomplete or metrics is None:
        reasons = sorted(set(incomplete) or {"metrics_missing"})
        return _decision("incomplete_evidence", reasons + flags, report_only)
    failing = threshold_reasons(metrics, profile)
    if failing:
        return _decision("fail", failing + flags, report_only)
    warnings: list[str] = []
    if metrics.records < MIN_PASS_RECORDS:
        warnings.append("evidence_below_pass_minimum")
    if profile.warn_on_interval:
        warnings.extend(_interval_reasons(intervals, profile))
    return _decision("warn" if warnings else "pass", warnings + flags, report_only)


def _decision(outcome: DecisionOutcome, reasons: list[str], report_only: bool) -> Decision:
    pauses = outcome in ("fail", "incomplete_evidence") and not report_only
    return Decision(outcome, "pause" if pauses else "continue", tuple(reasons), report_only)
