"""The streaming agent-loop manager's rules without verl, ray or torch (R-T-1).

The pure part of :mod:`rewardseal.trainers.verl.streaming`: the NaN a worker hands verl for an
unscored sample, and the per-uid value each NaN reward token gets on the driver. The verl
classes themselves run in tests/integrations/test_verl_streaming.py.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys

import pytest

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.trainers.verl import ALL_UNSCORED_GROUP_REWARD
from rewardseal.trainers.verl import streaming as verl_streaming
from rewardseal.trainers.verl.streaming import (
    MANAGER_FQN,
    agent_loop_manager_class,
    agent_loop_worker_class,
    streamed_fills,
    streamed_score,
)

NAN = math.nan


def test_an_unscored_sample_is_handed_to_verl_as_nan() -> None:
    assert math.isnan(streamed_score(None))
    assert streamed_score(-1.0) == -1.0
    assert streamed_score(0.0) == 0.0  # a scored 0.0 stays a score, not a hole
    assert isinstance(streamed_score(1), float)


def test_nan_rows_take_their_groups_scored_mean() -> None:
    # verl's interleaved groups [V, R | V, W] as reward tokens: the R row is NaN.
    scores = [1.0, NAN, 1.0, -1.0]
    uids = ["a", "a", "b", "b"]
    assert streamed_fills(scores, uids) == {1: 1.0}


def test_fill_spans_the_whole_batch_not_one_worker_chunk() -> None:
    # One worker per sample: the NaN row's mates are in other chunks; the driver sees them.
    scores = [0.5, NAN, 1.0, NAN, -1.0, 0.0]
    uids = ["u", "u", "u", "v", "v", "v"]
    assert streamed_fills(scores, uids) == {1: 0.75, 3: -0.5}


def test_an_all_unscored_group_gets_the_group_constant() -> None:
    scores: list[float | None] = [NAN, NAN, 1.0, None, NAN]
    uids = ["c", "c", "a", "a", "d"]
    fills = streamed_fills(scores, uids)
    assert fills == {
        0: ALL_UNSCORED_GROUP_REWARD,
        1: ALL_UNSCORED_GROUP_REWARD,
        3: 1.0,
        4: ALL_UNSCORED_GROUP_REWARD,
    }


def test_never_zero_for_an_unscored_sample_inside_a_scored_group() -> None:
    fills = streamed_fills([NAN, -1.0, -1.0, NAN, 1.0], ["g", "g", "g", "h", "h"])
    assert fills == {0: -1.0, 3: 1.0}
    assert all(value != 0.0 for value in fills.values())


def test_scored_rows_are_left_alone() -> None:
    assert streamed_fills([1.0, -1.0, 0.0], ["a", "a", "b"]) == {}
    assert streamed_fills([], []) == {}


def test_unhashable_uids_are_grouped_by_their_text() -> None:
    fills = streamed_fills([NAN, 2.0], [["x"], ["x"]])
    assert fills == {0: 2.0}


def test_misaligned_scores_and_uids_are_refused() -> None:
    with pytest.raises(ValidationError, match="3 reward scores for 2 uids"):
        streamed_fills([1.0, NAN, 1.0], ["a", "a"])


def test_the_fqn_names_the_lazy_manager_attribute() -> None:
    assert MANAGER_FQN == "rewardseal.trainers.verl.streaming.CertifiedAgentLoopManager"
    module, name = MANAGER_FQN.rsplit(".", 1)
    assert module == verl_streaming.__name__
    assert name == verl_streaming.MANAGER_CLASS_NAME


def test_module_imports_without_verl_ray_or_torch() -> None:
    code = (
        "import sys, rewardseal.trainers.verl.streaming as m; "
        "m.streamed_fills([float('nan'), 1.0], ['a', 'a']); "
        "bad = sorted({'verl', 'ray', 'torch'} & set(sys.modules)); "
        "assert not bad, f'imported {bad}'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_without_verl_the_factories_say_so() -> None:
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here; tests/integrations/test_verl_streaming.py runs it")
    for build in (agent_loop_worker_class, agent_loop_manager_class):
        with pytest.raises(RewardSealError, match="verl is not installed") as got:
            build()
        assert got.value.reason == "verl_missing"
    for name in ("CertifiedAgentLoopManager", "CertifiedAgentLoopWorker"):
        with pytest.raises(RewardSealError, match="install verl"):
            getattr(verl_streaming, name)
    with pytest.raises(AttributeError):
        verl_streaming.NoSuchThing  # noqa: B018 (the lazy attribute hook refuses other names)
