"""Audit metrics over the uniform core (R-I-6).

Every rate is a ratio of per-row sums (numerator over denominator), which is what lets
:mod:`.bootstrap` resample them by record in one matrix product (the point values travel as
core's :class:`~rewardseal.core.integrity.CoreMetrics`). Per core row:

* ``coverage``: a sentinel observation was captured / rows;
* ``error_rate``: the sentinel answered ``error`` / rows;
* *scored* rows have a sentinel verdict (accepted/refused) and an optimizer verdict;
* ``pass_agreement``: both sides give the same verdict / scored;
* ``optimizer_only_rate``: the optimizer accepts and the sentinel refuses / scored: the
  reward-hacking signal; ``sentinel_only_rate`` is the reverse;
* ``reward_gap``: mean of (optimizer reward normalized to [0, 1]) - (sentinel reward) over rows
  with both (positive: the optimizer pays more than the sentinel thinks is earned);
* ``top_tail_disagreement``: disagreement among the top decile of scored rows by optimizer reward;
* ``saturation``: optimizer rewards at the top of their range / rows with an optimizer reward;
* ``spearman`` and ``kendall`` (tau-b): rank agreement of the two rewards, only when they are
  graded (three or more distinct values on one side, two or more on the other).

Values are rounded to nine decimals: finer than any threshold, and stable across numpy builds
that differ in a last bit of a sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity.mapping import RewardMapping
from rewardseal.core.integrity.profiles import METRIC_NAMES
from rewardseal.core.integrity.reports import CoreMetrics
from rewardseal.core.integrity.signals import SignalRow

__all__ = [
    "RATIO_METRICS",
    "RANK_METRICS",
    "MetricColumns",
    "SampleOutcome",
    "compute_metrics",
    "metric_columns",
    "metrics_from_columns",
    "sample_outcome",
]

RANK_METRICS: Final = ("spearman", "kendall")
RATIO_METRICS: Final = tuple(name for name in METRIC_NAMES if name not in RANK_METRICS)
"""Metrics that are a ratio of row sums (and get bootstrap intervals), in report order."""
TOP_TAIL_FRACTION: Final = 0.1
SATURATION_EPSILON: Final = 1e-9
DECIMALS: Final = 9

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _rounded(value: float) -> float | None:
    return None if not math.isfinite(value) else round(float(value), DECIMALS)


@dataclass(frozen=True, slots=True)
class MetricColumns:
    """The per-row numbers behind the metrics: one row per core row.

    ``numerators`` and ``denominators`` are ``rows x len(RATIO_METRICS)``; ``groups`` holds each
    row's record as an index into ``record_ids``; ``optimizer``/``sentinel`` are the two rewards
    on the [0, 1] scale (NaN where absent).
    """

    record_ids: tuple[str, ...]
    groups: IntArray
    numerators: FloatArray
    denominators: FloatArray
    optimizer: FloatArray
    sentinel: FloatArray

    @property
    def scored(self) -> int:
        """Rows with both verdicts."""
        return int(self.denominators[:, RATIO_METRICS.index("pass_agreement")].sum())


def _optimizer_verdict(row: SignalRow, mapping: RewardMapping) -> tuple[float, bool | None]:
    """(reward on [0, 1] or NaN, accepted or None) from what training used."""
    if row.optimizer_mapped is None:
        # The mapping failed: under reject the output was refused, under abstain it has no
        # verdict (raise never leaves a row behind).
        return math.nan, (False if mapping.failure_behavior == "reject" else None)
    normalized = (row.optimizer_mapped - mapping.center) / mapping.scale
    return normalized, row.optimizer_mapped >= mapping.threshold


SampleOutcome = Literal["agreement", "optimizer_only", "sentinel_only", "error"]
"""How one row's two verdicts relate (what an audit's samples are filtered by)."""


def sample_outcome(row: SignalRow, mapping: RewardMapping) -> SampleOutcome:
    """``agreement`` when both verdicts agree, ``optimizer_only`` when only the optimizer
    accepts (the reward-hacking signal), ``sentinel_only`` the reverse, and ``error`` when one
    side has no verdict: the same reading of a row the rates above are built from."""
    _, accepted = _optimizer_verdict(row, mapping)
    observation = row.sentinel
    if observation is None or observation.outcome == "error" or accepted is None:
        return "error"
    sentinel_accepts = observation.outcome == "accepted"
    if accepted == sentinel_accepts:
        return "agreement"
    return "optimizer_only" if accepted else "sentinel_only"


def metric_columns(rows: Sequence[SignalRow], mapping: RewardMapping) -> MetricColumns:
    """Build the per-row numbers for ``rows`` (the core of one boundary).

    Raises:
        ValidationError: ``rows`` is empty.
    """
    if not rows:
        raise ValidationError("metrics need at least one core row")
    count, width = len(rows), len(RATIO_METRICS)
    num = np.zeros((count, width))
    den = np.zeros((count, width))
    optimizer = np.full(count, np.nan)
    sentinel = np.full(count, np.nan)
    column = {name: index for index, name in enumerate(RATIO_METRICS)}
    agree = np.zeros(count, dtype=bool)
    scored = np.zeros(count, dtype=bool)
    for i, row in enumerate(rows):
        reward, accepted = _optimizer_verdict(row, mapping)
        optimizer[i] = reward
        observation = row.sentinel
        den[i, column["coverage"]] = den[i, column["error_rate"]] = 1.0
        if observation is not None:
            num[i, column["coverage"]] = 1.0
            num[i, column["error_rate"]] = float(observation.outcome == "error")
            if observation.reward is not None:
                sentinel[i] = observation.reward
        if observation is not None and observation.outcome != "error" and accepted is not None:
            sentinel_accepts = observation.outcome == "accepted"
            scored[i], agree[i] = True, accepted == sentinel_accepts
            for name in ("pass_agreement", "optimizer_only_rate", "sentinel_only_rate"):
                den[i, column[name]] = 1.0
            num[i, column["pass_agreement"]] = float(agree[i])
            num[i, column["optimizer_only_rate"]] = float(accepted and not sentinel_accepts)
            num[i, column["sentinel_only_rate"]] = float(sentinel_accepts and not accepted)
        if not math.isnan(reward):
            den[i, column["saturation"]] = 1.0
            num[i, column["saturation"]] = float(reward >= 1.0 - SATURATION_EPSILON)
            if not math.isnan(sentinel[i]):
                den[i, column["reward_gap"]] = 1.0
                num[i, column["reward_gap"]] = reward - sentinel[i]
    # The top decile of scored rows by optimizer reward; ties go to the lower identity, so the
    # tail is the same on every run.
    tail_pool = [i for i in range(count) if scored[i] and not math.isnan(optimizer[i])]
    tail_pool.sort(key=lambda i: (-optimizer[i], rows[i].record_id, rows[i].candidate))
    for i in tail_pool[: math.ceil(TOP_TAIL_FRACTION * len(tail_pool))]:
        den[i, column["top_tail_disagreement"]] = 1.0
        num[i, column["top_tail_disagreement"]] = float(not agree[i])
    record_ids, groups = np.unique(np.array([row.record_id for row in rows]), return_inverse=True)
    return MetricColumns(
        record_ids=tuple(str(r) for r in record_ids),
        groups=groups.astype(np.int64).reshape(-1),
        numerators=num,
        denominators=den,
        optimizer=optimizer,
        sentinel=sentinel,
    )


def _rank_agreement(optimizer: FloatArray, sentinel: FloatArray) -> tuple[float | None, ...]:
    both = ~np.isnan(optimizer) & ~np.isnan(sentinel)
    left, right = optimizer[both], sentinel[both]
    distinct = sorted((len(np.unique(left)), len(np.unique(right))))
    if distinct[0] < 2 or distinct[1] < 3:
        return (None, None)
    # Imported here: scipy.stats costs seconds to import, and the modules that import this one
    # (control's integrity service and views: samples, comparisons) mostly never rank anything.
    from scipy import stats

    spearman = stats.spearmanr(left, right).statistic
    kendall = stats.kendalltau(left, right).statistic
    return (_rounded(float(spearman)), _rounded(float(kendall)))


def compute_metrics(rows: Sequence[SignalRow], mapping: RewardMapping) -> CoreMetrics:
    """Every R-I-6 metric over ``rows`` (pass the core only: diagnostics are never pooled)."""
    return metrics_from_columns(metric_columns(rows, mapping))


def metrics_from_columns(columns: MetricColumns) -> CoreMetrics:
    """The metrics of already-built columns (an audit builds them once for metrics and
    bootstrap)."""
    sums_num = columns.numerators.sum(axis=0)
    sums_den = columns.denominators.sum(axis=0)
    ratios = {
        name: (_rounded(sums_num[i] / sums_den[i]) if sums_den[i] > 0 else None)
        for i, name in enumerate(RATIO_METRICS)
    }
    spearman, kendall = _rank_agreement(columns.optimizer, columns.sentinel)
    return CoreMetrics(
        rows=len(columns.groups),
        records=len(columns.record_ids),
        scored=columns.scored,
        spearman=spearman,
        kendall=kendall,
        **ratios,
    )
