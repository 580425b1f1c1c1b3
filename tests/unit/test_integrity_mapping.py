"""The reward mapping (R-I-1): normalize, then scale and center, then the threshold; failures
follow the revision's failure behaviour."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardseal.core.errors import RewardMappingError, ValidationError
from rewardseal.core.integrity import MappedReward, Normalization, RewardMapping, map_reward
from rewardseal.core.integrity.mapping import FailureBehavior

ZERO_TEN = Normalization(0.0, 10.0)


def test_normalization_of_5_in_0_10_is_one_half() -> None:
    assert map_reward(5, RewardMapping(ZERO_TEN, threshold=0.5)).normalized == 0.5


def test_minimize_2_in_0_10_is_0_8() -> None:
    mapping = RewardMapping(Normalization(0.0, 10.0, "minimize"), threshold=0.5)
    result = map_reward(2, mapping)
    assert result.normalized == pytest.approx(0.8)
    assert result.accepted is True


def test_11_in_0_10_is_refused() -> None:
    with pytest.raises(RewardMappingError) as caught:
        map_reward(11, RewardMapping(ZERO_TEN, threshold=0.5, failure_behavior="raise"))
    assert caught.value.metadata == {"failure": "out_of_range"}
    assert caught.value.code.name == "INVALID_ARGUMENT"


def test_scale_and_center_give_0_625_which_fails_threshold_0_7() -> None:
    mapping = RewardMapping(Normalization(0.0, 1.0), threshold=0.7, scale=0.5, center=0.25)
    result = map_reward(0.75, mapping)
    assert result.mapped == 0.625
    assert result.accepted is False


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("reject", MappedReward(None, None, False, "out_of_range")),
        ("abstain", MappedReward(None, None, None, "out_of_range")),
    ],
)
def test_failure_behaviour_reject_and_abstain(
    behaviour: FailureBehavior, expected: MappedReward
) -> None:
    mapping = RewardMapping(ZERO_TEN, threshold=0.5, failure_behavior=behaviour)
    assert map_reward(-1, mapping) == expected


@pytest.mark.parametrize("raw", [math.nan, math.inf, -math.inf, None, "5", True])
def test_a_raw_reward_that_is_not_a_finite_number_is_a_failure(raw: object) -> None:
    rejected = map_reward(raw, RewardMapping(ZERO_TEN, threshold=0.5))
    assert rejected == MappedReward(None, None, False, "not_finite")
    with pytest.raises(RewardMappingError):
        map_reward(raw, RewardMapping(ZERO_TEN, threshold=0.5, failure_behavior="raise"))


def test_a_bad_mapping_document_is_refused() -> None:
    with pytest.raises(ValidationError, match="threshold_outside_mapped_range"):
        RewardMapping.from_json({"normalization": {"min": 0, "max": 1}, "threshold": 2})
    with pytest.raises(ValidationError, match="normalization_range_empty"):
        RewardMapping.from_json({"normalization": {"min": 1, "max": 1}, "threshold": 0})


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(-1e6, 1e6),
    width=st.floats(1e-3, 1e6),
    fraction=st.floats(0.0, 1.0),
    scale=st.floats(1e-3, 10.0),
    center=st.floats(-10.0, 10.0),
    minimize=st.booleans(),
)
def test_mapped_rewards_stay_in_the_mapped_range(
    low: float, width: float, fraction: float, scale: float, center: float, minimize: bool
) -> None:
    norm = Normalization(low, low + width, "minimize" if minimize else "maximize")
    mapping = RewardMapping(norm, threshold=center, scale=scale, center=center)
    raw = min(max(low + fraction * width, norm.minimum), norm.maximum)
    result = map_reward(raw, mapping)
    assert result.normalized is not None
    assert result.mapped is not None
    assert -1e-9 <= result.normalized <= 1 + 1e-9
    bottom, top = mapping.mapped_range
    assert bottom - 1e-6 <= result.mapped <= top + 1e-6
    assert result.accepted is (result.mapped >= mapping.threshold)
