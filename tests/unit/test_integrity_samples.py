"""How one row's two verdicts relate (rewardseal_server.integrity_audit.metrics.sample_outcome):
the reading an audit's samples are filtered by, the same one its rates are built from (R-I-6)."""

from __future__ import annotations

import dataclasses

import pytest
from support.integrity_builders import row, system

from rewardseal_server.integrity_audit import compute_metrics
from rewardseal_server.integrity_audit.metrics import sample_outcome


@pytest.mark.parametrize(
    ("optimizer", "sentinel", "expected"),
    [
        (1.0, "accepted", "agreement"),
        (0.0, "refused", "agreement"),
        (1.0, "refused", "optimizer_only"),
        (0.0, "accepted", "sentinel_only"),
        (1.0, "error", "error"),
        (1.0, None, "error"),
    ],
)
def test_each_pair_of_verdicts(optimizer: float, sentinel: str | None, expected: str) -> None:
    assert (
        sample_outcome(row(1, optimizer=optimizer, sentinel=sentinel), system().mapping) == expected
    )  # type: ignore[arg-type]


def test_an_unmapped_reward_follows_the_failure_behaviour() -> None:
    unmapped = dataclasses.replace(
        row(1, optimizer=1.0, sentinel="accepted"), optimizer_mapped=None
    )
    reject = system().mapping
    abstain = dataclasses.replace(reject, failure_behavior="abstain")
    assert sample_outcome(unmapped, reject) == "sentinel_only"  # refused by the optimizer
    assert sample_outcome(unmapped, abstain) == "error"  # no optimizer verdict at all


def test_outcomes_count_what_the_rates_count() -> None:
    rows = [
        row(i, optimizer=float(i % 2), sentinel=("accepted", "refused", "error")[i % 3])
        for i in range(30)
    ]
    mapping = system().mapping
    outcomes = [sample_outcome(r, mapping) for r in rows]
    metrics = compute_metrics(rows, mapping)
    scored = [o for o in outcomes if o != "error"]
    assert metrics.scored == len(scored)
    assert metrics.optimizer_only_rate == round(scored.count("optimizer_only") / len(scored), 9)
    assert metrics.pass_agreement == round(scored.count("agreement") / len(scored), 9)
