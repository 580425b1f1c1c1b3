"""Grouped bootstrap intervals for the ratio metrics (R-I-6).

The resampling unit is the source record: rows of one record (several candidates of one prompt)
are not independent, so resampling rows would make intervals too narrow. Each resample draws
``G`` records with replacement; a record drawn ``c`` times adds ``c`` times its row sums. With the
per-record sums in a ``G x 2K`` matrix, every resample's numerators and denominators are one row
of ``counts @ sums``, so 10,000 resamples are a few matrix products, in chunks that bound memory.
The generator is numpy's PCG64 seeded with ``seed``: the same inputs give identical intervals.
"""

from __future__ import annotations

import warnings
from typing import Final

import numpy as np

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity.reports import Interval
from rewardseal_server.integrity_audit.metrics import DECIMALS, RATIO_METRICS, MetricColumns

__all__ = ["CONFIDENCE", "RESAMPLES", "SEED", "grouped_bootstrap"]

RESAMPLES: Final = 10_000
SEED: Final = 42
CONFIDENCE: Final = 0.95
CHUNK: Final = 1_000
"""Resamples per matrix product: 1,000 x 512 records of int64 counts is 4 MB."""


def grouped_bootstrap(
    columns: MetricColumns,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Interval]:
    """Percentile intervals of every ratio metric, resampling records (metrics that no
    resample can compute, e.g. a reward gap without sentinel rewards, are left out).

    Raises:
        ValidationError: ``resamples`` < 1 or ``confidence`` outside (0, 1).
    """
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValidationError("the bootstrap needs resamples >= 1 and confidence in (0, 1)")
    groups = len(columns.record_ids)
    width = len(RATIO_METRICS)
    per_record = np.zeros((groups, 2 * width))
    np.add.at(per_record[:, :width], columns.groups, columns.numerators)
    np.add.at(per_record[:, width:], columns.groups, columns.denominators)
    rng = np.random.Generator(np.random.PCG64(seed))
    ratios = np.empty((resamples, width))
    for start in range(0, resamples, CHUNK):
        size = min(CHUNK, resamples - start)
        draws = rng.integers(0, groups, size=(size, groups))
        # Row r of `counts` says how often each record was drawn in resample start + r.
        offsets = draws + (np.arange(size) * groups)[:, None]
        counts = np.bincount(offsets.ravel(), minlength=size * groups).reshape(size, groups)
        sums = counts @ per_record
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios[start : start + size] = sums[:, :width] / sums[:, width:]
    tail = (1.0 - confidence) / 2.0 * 100.0
    intervals: dict[str, Interval] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: reported as absent
        bounds = np.nanpercentile(ratios, [tail, 100.0 - tail], axis=0)
    for index, name in enumerate(RATIO_METRICS):
        low, high = bounds[0, index], bounds[1, index]
        if np.isfinite(low) and np.isfinite(high):
            intervals[name] = Interval(round(float(low), DECIMALS), round(float(high), DECIMALS))
    return intervals
