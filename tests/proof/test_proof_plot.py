"""The proof chart's drawing logic: unscored trials are their own hatched segment (never a 0
bar), each bar names its n, shares never pass 1, and the legend speaks in words."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal_kit.proof.plot import LEGEND, bars
from rewardseal_kit.proof.report import Row
from rewardseal_kit.proof.rewards import CERTIFIED_T2, SCREEN_T0


def row(condition: str, reward: str, *, paid: int, unscored: int = 0, trials: int = 3) -> Row:
    return Row(
        condition=condition,
        gold="pay",
        reward=reward,
        tier=0 if reward == SCREEN_T0 else 2,
        trials=trials,
        paid=paid,
        silent_incorrect_success=0,
        over_refusal=0,
        unscored=unscored,
        certified=0,
        scope="synthetic",
        outcomes=(),
    )


ROWS = [
    row("control", SCREEN_T0, paid=3),
    row("control", CERTIFIED_T2, paid=3),
    row("dup", SCREEN_T0, paid=3),
    row("dup", CERTIFIED_T2, paid=0),
    row("oracle_outage", SCREEN_T0, paid=3),
    row("oracle_outage", CERTIFIED_T2, paid=0, unscored=3),
]


def test_an_unscored_row_is_a_full_unscored_segment_not_a_zero_bar() -> None:
    outage = bars(ROWS)[-1]
    assert (outage.paid, outage.unscored) == (0.0, 1.0)
    assert outage.label == "n=3\n0 paid\n3 unscored"


def test_a_refused_row_is_a_real_zero_with_its_n() -> None:
    refused = bars(ROWS)[3]
    assert (refused.paid, refused.unscored) == (0.0, 0.0)
    assert refused.label == "n=3\n0 paid"


def test_partly_unscored_stacks_on_the_paid_share_and_stays_within_1() -> None:
    (mixed,) = bars([row("control", CERTIFIED_T2, paid=1, unscored=2)])
    assert mixed.paid == pytest.approx(1 / 3)
    assert mixed.unscored == pytest.approx(2 / 3)
    assert mixed.paid + mixed.unscored <= 1.0


def test_bars_sit_beside_each_other_per_condition() -> None:
    drawn = bars(ROWS)
    xs = [(bar.condition, bar.reward, bar.x) for bar in drawn]
    assert xs[0][2] < xs[1][2] < xs[2][2] < xs[3][2]
    assert drawn[1].x - drawn[0].x == pytest.approx(drawn[3].x - drawn[2].x)


def test_impossible_counts_and_unknown_rewards_are_refused() -> None:
    with pytest.raises(ValidationError, match="2 paid and 2 unscored of 3 trials"):
        bars([row("control", CERTIFIED_T2, paid=2, unscored=2)])
    with pytest.raises(ValidationError, match="no place for reward"):
        bars([replace(ROWS[0], reward="judge")])


def test_no_trials_draws_nothing() -> None:
    (empty,) = bars([row("control", SCREEN_T0, paid=0, trials=0)])
    assert (empty.paid, empty.unscored, empty.label) == (0.0, 0.0, "n=0\n0 paid")


def test_legend_names_each_reward_in_words() -> None:
    # The PNG itself is drawn (and its magic checked) by test_proof_report's real proof run.
    assert LEGEND == {
        SCREEN_T0: "screen reward, tier 0",
        CERTIFIED_T2: "certified reward, tier 2",
    }
