"""Calibration arithmetic: the exact one-sided Clopper-Pearson bound (R-CAL-1, R-CAL-4)."""

from __future__ import annotations

from scipy.stats import beta

from rewardseal.errors import ValidationError
from rewardseal.v1.certificate_pb2 import CalibrationSummary

METHOD = "clopper_pearson_one_sided"
"""The only method a calibration summary may name."""


def clopper_pearson_upper(false_accepts: int, trials: int, delta: float = 0.05) -> float:
    """Exact one-sided upper bound on a false-accept rate at confidence ``1 - delta``.

    With k false accepts in n trials it is the ``1 - delta`` quantile of Beta(k + 1, n - k),
    and 1.0 when k == n.
    """
    if trials < 1:
        raise ValidationError("the bound needs at least one trial")
    if not 0 <= false_accepts <= trials:
        raise ValidationError(f"false accepts {false_accepts} must be in 0..{trials}")
    if not 0 < delta < 1:
        raise ValidationError(f"delta must be in (0, 1), got {delta!r}")
    if false_accepts == trials:
        return 1.0
    return float(beta.ppf(1.0 - delta, false_accepts + 1, trials - false_accepts))


def delta_from_summary(summary: CalibrationSummary) -> float:
    """The certificate's delta, ``1 - confidence``, without binary floating-point noise.

    ``1 - 0.95`` is 0.050000000000000044 in binary floating point; rounded to 12 decimals it is
    0.05, so a delta of 0.05 meets a contract policy whose maximum is 0.05.
    """
    return round(1.0 - summary.confidence, 12)


def epsilon_from_summary(summary: CalibrationSummary) -> float:
    """Recompute epsilon from a summary's own counts and confidence; never trust a given one."""
    if summary.method != METHOD:
        raise ValidationError(f"calibration method {summary.method!r} is not {METHOD!r}")
    return clopper_pearson_upper(summary.false_accepts, summary.trials, 1.0 - summary.confidence)
