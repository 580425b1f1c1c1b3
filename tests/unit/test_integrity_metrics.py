"""Audit metrics over the uniform core and the record-grouped bootstrap (R-I-6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.integrity_builders import agreeing_rows, row, system

from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    RetainedRow,
    RetentionProtocol,
    retain,
    seal_shard,
)
from rewardseal_server.integrity_audit import (
    audit_boundary,
    boundary_trends,
    compute_metrics,
    grouped_bootstrap,
)
from rewardseal_server.integrity_audit.metrics import RATIO_METRICS, metric_columns

MAPPING = system().mapping


def graded_rows(count: int, *, seed: int = 3, candidates: int = 2) -> list:
    """Graded rewards: the sentinel tracks the optimizer with noise, some disagreements."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(count):
        for candidate in range(candidates):
            reward = float(rng.uniform())
            noisy = float(np.clip(reward + rng.normal(0, 0.15), 0.0, 1.0))
            rows.append(
                row(
                    n,
                    candidate=candidate,
                    optimizer=reward,
                    sentinel="accepted" if noisy >= 0.5 else "refused",
                    sentinel_reward=noisy,
                    subgroups={"language": "de" if n % 3 else "en"},
                )
            )
    return rows


def test_hand_counted_rates() -> None:
    rows = [
        row(1, optimizer=1.0, sentinel="accepted"),  # agree
        row(2, optimizer=1.0, sentinel="refused"),  # optimizer only: the hacking signal
        row(3, optimizer=0.0, sentinel="accepted"),  # sentinel only
        row(4, optimizer=0.0, sentinel="refused"),  # agree
        row(5, optimizer=0.0, sentinel="error"),  # an error: not scored
        row(6, optimizer=1.0, sentinel=None),  # not observed: not covered
    ]
    metrics = compute_metrics(rows, MAPPING)
    assert (metrics.rows, metrics.records, metrics.scored) == (6, 6, 4)
    assert metrics.coverage == pytest.approx(5 / 6)
    assert metrics.error_rate == pytest.approx(1 / 6)
    assert metrics.pass_agreement == 0.5
    assert metrics.optimizer_only_rate == 0.25
    assert metrics.sentinel_only_rate == 0.25
    assert metrics.reward_gap == 0.0  # +1 and -1 cancel
    assert metrics.saturation == 0.5  # three of six optimizer rewards at 1.0
    assert metrics.top_tail_disagreement == 0.0  # the top row (rec-1) agrees
    assert metrics.spearman is None  # binary rewards are not graded
    assert metrics.kendall is None


def test_rank_agreement_when_rewards_are_graded() -> None:
    metrics = compute_metrics(graded_rows(100), MAPPING)
    assert metrics.spearman is not None
    assert metrics.kendall is not None
    assert 0.8 < metrics.spearman <= 1.0
    assert 0.6 < metrics.kendall <= metrics.spearman


def test_metrics_and_intervals_are_identical_across_two_runs() -> None:
    rows = graded_rows(150)
    first = (compute_metrics(rows, MAPPING), grouped_bootstrap(metric_columns(rows, MAPPING)))
    second = (compute_metrics(rows, MAPPING), grouped_bootstrap(metric_columns(rows, MAPPING)))
    assert first == second
    assert set(first[1]) == set(RATIO_METRICS)
    for name, interval in first[1].items():
        value = first[0].value(name)
        assert value is not None
        assert interval.low <= value + 1e-9
        assert value - 1e-9 <= interval.high


def test_another_seed_gives_other_intervals() -> None:
    columns = metric_columns(graded_rows(150), MAPPING)
    assert grouped_bootstrap(columns, seed=42) != grouped_bootstrap(columns, seed=7)


def test_the_resampling_unit_is_the_record() -> None:
    """Candidates of one record move together: duplicating every row within its record leaves
    the intervals as they were, where resampling rows would narrow them."""
    once = graded_rows(80, candidates=1)
    twice = once + [dataclasses.replace(r, candidate=1) for r in once]
    columns_once, columns_twice = metric_columns(once, MAPPING), metric_columns(twice, MAPPING)
    assert len(columns_twice.record_ids) == 80
    assert grouped_bootstrap(columns_once) == grouped_bootstrap(columns_twice)


def test_diagnostic_rows_never_change_core_rates() -> None:
    """The same core with no diagnostics or with 50 hostile ones audits to the same numbers."""
    reward_system = system()
    protocol = RetentionProtocol("tiny", seed=42, core_size=120, diagnostic_size=50)
    retention = retain(agreeing_rows(120), protocol, reward_system.mapping)
    hostile = tuple(
        RetainedRow(
            row(1000 + n, optimizer=1.0, sentinel="refused" if n % 2 else "error"),
            "diagnostic",
            "verifier_error" if n % 2 == 0 else "highest_optimizer_reward",
        )
        for n in range(50)
    )
    stormy = dataclasses.replace(
        retention, captured=170, exact=False, rows=retention.rows + hostile
    )
    reports = []
    for variant in (retention, stormy):
        manifest = seal_shard(variant, run_id="run", system_revision_id=reward_system.revision_id)
        reports.append(
            audit_boundary(
                manifest,
                variant.rows,
                system=reward_system,
                protocol=protocol,
                profile=BUILTIN_PROFILES["human_aligned_integrity"],
                resamples=1_000,
            )
        )
    calm_report, stormy_report = reports
    assert stormy_report.diagnostic_rows == 50
    assert stormy_report.diagnostic_families == {
        "verifier_error": 25,
        "highest_optimizer_reward": 25,
    }
    assert stormy_report.metrics == calm_report.metrics
    assert stormy_report.intervals == calm_report.intervals
    assert stormy_report.decision == calm_report.decision
    pooled = [*stormy.core, *(r.row for r in hostile)]
    assert compute_metrics(pooled, MAPPING) != calm_report.metrics  # pooling would have


def test_boundary_trends_use_matched_records_only() -> None:
    protocol = BUILTIN_PROTOCOLS["exhaustive"]
    early = retain(agreeing_rows(40, boundary=10), protocol, MAPPING)
    drifted = agreeing_rows(40, boundary=20)
    # By the later boundary the optimizer pays records 0..9 that the sentinel refuses.
    drifted[:10] = [row(n, optimizer=1.0, sentinel="refused", boundary=20) for n in range(10)]
    extra = [row(500 + n, optimizer=1.0, sentinel="accepted", boundary=20) for n in range(5)]
    late = retain(drifted + extra, protocol, MAPPING)
    trends = boundary_trends([late, early], MAPPING)
    assert [t.boundary for t in trends] == [10, 20]
    assert [t.records for t in trends] == [40, 40]  # the five new records are not matched
    assert trends[0].optimizer_only_rate == 0.0
    assert trends[1].optimizer_only_rate == pytest.approx(10 / 40)
    assert boundary_trends([early], MAPPING) == ()
