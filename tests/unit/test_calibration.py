"""The exact one-sided Clopper-Pearson bound against the R-CAL-1 reference values.

R-CAL-1: epsilon is the ``1 - delta`` quantile of Beta(k + 1, n - k), 1.0 when k == n.
R-CAL-4: epsilon is recomputed from a calibration summary's own counts, never taken as given.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from rewardseal.core.calibration import (
    METHOD,
    clopper_pearson_upper,
    delta_from_summary,
    epsilon_from_summary,
)
from rewardseal.core.errors import ValidationError
from rewardseal.v1.certificate_pb2 import CalibrationSummary

DELTA = 0.05


def decimals(reference: str) -> int:
    """How many decimal places a reference value is stated to."""
    return len(reference.split(".")[1])


# Six significant digits as stated in R-CAL-1.
SIX_DIGIT_REFERENCES = [
    pytest.param(0, 15, "0.181036", id="R-CAL-1-0/15-is-0.181036"),
    pytest.param(0, 18, "0.153318", id="R-CAL-1-0/18-is-0.153318"),
    pytest.param(1, 300, "0.0157146", id="R-CAL-1-1/300-is-0.0157146"),
]

# Stated to five significant digits in R-CAL-1: rounding to the stated decimals must give them.
FIVE_DIGIT_REFERENCES = [
    pytest.param(0, 300, "0.0099361", id="R-CAL-1-0/300-is-0.0099361"),
    pytest.param(0, 600, "0.0049804", id="R-CAL-1-0/600-is-0.0049804"),
    pytest.param(0, 700, "0.0042705", id="R-CAL-1-0/700-is-0.0042705"),
]


@pytest.mark.parametrize(("k", "n", "reference"), SIX_DIGIT_REFERENCES)
def test_reference_value_to_six_significant_digits(k, n, reference):
    value = clopper_pearson_upper(k, n, DELTA)
    assert float(f"{value:.6g}") == float(f"{float(reference):.6g}")


@pytest.mark.parametrize(("k", "n", "reference"), FIVE_DIGIT_REFERENCES)
def test_reference_value_to_its_stated_digits(k, n, reference):
    value = clopper_pearson_upper(k, n, DELTA)
    assert round(value, decimals(reference)) == float(reference)


@pytest.mark.parametrize(("k", "n", "reference"), SIX_DIGIT_REFERENCES[:2] + FIVE_DIGIT_REFERENCES)
def test_zero_false_accepts_matches_the_closed_form(k, n, reference):
    # With k = 0 the bound solves (1 - p)^n = delta: p = 1 - delta^(1/n).
    assert k == 0
    value = clopper_pearson_upper(0, n, DELTA)
    assert math.isclose(value, 1.0 - DELTA ** (1.0 / n), rel_tol=1e-9)


@pytest.mark.parametrize(
    "n", [1, 2, 15, 300, 10_000], ids=lambda n: f"R-CAL-1-k=n={n}-is-exactly-1.0"
)
def test_all_false_accepts_bound_is_one(n):
    value = clopper_pearson_upper(n, n, DELTA)
    assert value == 1.0
    assert isinstance(value, float)


def test_returns_a_plain_float():
    assert type(clopper_pearson_upper(0, 300, DELTA)) is float


def test_default_delta_is_five_percent():
    assert clopper_pearson_upper(0, 300) == clopper_pearson_upper(0, 300, 0.05)


def test_bound_decreases_with_trials_at_zero_false_accepts():
    trials = [1, 2, 5, 15, 18, 50, 300, 600, 700, 5_000]
    bounds = [clopper_pearson_upper(0, n, DELTA) for n in trials]
    assert all(a > b for a, b in pairwise(bounds))
    assert all(0.0 < b < 1.0 for b in bounds)


def test_bound_increases_with_false_accepts():
    bounds = [clopper_pearson_upper(k, 300, DELTA) for k in range(301)]
    assert all(a < b for a, b in pairwise(bounds))
    assert bounds[-1] == 1.0


def test_bound_grows_as_confidence_grows():
    # A smaller delta (higher confidence) gives a wider, larger bound.
    deltas = [0.5, 0.2, 0.1, 0.05, 0.01, 0.001]
    bounds = [clopper_pearson_upper(1, 300, d) for d in deltas]
    assert all(a < b for a, b in pairwise(bounds))


def test_bound_is_above_the_observed_rate():
    for k in range(0, 300, 7):
        assert clopper_pearson_upper(k, 300, DELTA) > k / 300


@pytest.mark.parametrize(
    ("k", "n", "delta", "match"),
    [
        pytest.param(0, 0, DELTA, "at least one trial", id="R-CAL-1-n=0-raises"),
        pytest.param(0, -5, DELTA, "at least one trial", id="R-CAL-1-negative-n-raises"),
        pytest.param(301, 300, DELTA, "false accepts", id="R-CAL-1-k>n-raises"),
        pytest.param(-1, 300, DELTA, "false accepts", id="R-CAL-1-k<0-raises"),
        pytest.param(0, 300, 0.0, "delta", id="R-CAL-1-delta-0-raises"),
        pytest.param(0, 300, 1.0, "delta", id="R-CAL-1-delta-1-raises"),
        pytest.param(0, 300, -0.05, "delta", id="R-CAL-1-negative-delta-raises"),
        pytest.param(0, 300, 1.5, "delta", id="R-CAL-1-delta-above-1-raises"),
        pytest.param(0, 300, math.nan, "delta", id="R-CAL-1-delta-nan-raises"),
    ],
)
def test_argument_errors_raise_validation_error(k, n, delta, match):
    with pytest.raises(ValidationError, match=match):
        clopper_pearson_upper(k, n, delta)


def summary(**overrides: object) -> CalibrationSummary:
    fields: dict[str, object] = {
        "trials": 300,
        "false_accepts": 0,
        "method": METHOD,
        "confidence": 0.95,
    }
    fields.update(overrides)
    return CalibrationSummary(**fields)  # type: ignore[arg-type]


def test_epsilon_from_summary_recomputes_the_reference():
    epsilon = epsilon_from_summary(summary())
    assert round(epsilon, decimals("0.0099361")) == 0.0099361


@pytest.mark.parametrize(
    ("trials", "false_accepts"),
    [
        pytest.param(15, 0, id="R-CAL-4-0/15-recomputed"),
        pytest.param(300, 1, id="R-CAL-4-1/300-recomputed"),
        pytest.param(700, 0, id="R-CAL-4-0/700-recomputed"),
        pytest.param(18, 18, id="R-CAL-4-18/18-recomputed-1.0"),
    ],
)
def test_epsilon_from_summary_uses_the_summary_counts(trials, false_accepts):
    epsilon = epsilon_from_summary(summary(trials=trials, false_accepts=false_accepts))
    assert math.isclose(epsilon, clopper_pearson_upper(false_accepts, trials, DELTA), rel_tol=1e-9)


def test_epsilon_from_summary_uses_the_summary_confidence():
    at_99 = epsilon_from_summary(summary(confidence=0.99))
    assert math.isclose(at_99, clopper_pearson_upper(0, 300, 0.01), rel_tol=1e-9)
    assert at_99 > epsilon_from_summary(summary())


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("", id="R-CAL-4-empty-method-refused"),
        pytest.param("wilson", id="R-CAL-4-wilson-refused"),
        pytest.param("clopper_pearson_two_sided", id="R-CAL-4-two-sided-refused"),
        pytest.param(METHOD.upper(), id="R-CAL-4-case-changed-method-refused"),
    ],
)
def test_epsilon_from_summary_refuses_another_method(method):
    with pytest.raises(ValidationError, match="method"):
        epsilon_from_summary(summary(method=method))


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"trials": 0}, id="R-CAL-4-zero-trials-refused"),
        pytest.param({"false_accepts": 301}, id="R-CAL-4-k>n-refused"),
        pytest.param({"confidence": 0.0}, id="R-CAL-4-confidence-0-refused"),
        pytest.param({"confidence": 1.0}, id="R-CAL-4-confidence-1-refused"),
    ],
)
def test_epsilon_from_summary_refuses_bad_counts(overrides):
    with pytest.raises(ValidationError):
        epsilon_from_summary(summary(**overrides))


@pytest.mark.parametrize(
    ("confidence", "delta"),
    [(0.95, 0.05), (0.99, 0.01), (0.999, 0.001), (0.9, 0.1)],
)
def test_delta_from_summary_has_no_float_noise(confidence: float, delta: float) -> None:
    # 1 - 0.95 == 0.050000000000000044: unrounded, a 0.05 delta would fail a 0.05 policy maximum.
    assert 1.0 - 0.95 > 0.05  # the noise this removes
    assert delta_from_summary(CalibrationSummary(confidence=confidence)) == delta
