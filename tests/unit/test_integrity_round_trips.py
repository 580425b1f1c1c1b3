"""Every integrity type reads back from its own ``to_json``, equal (and with the same digest),
as built by the shared builders (``tests/support/integrity_builders.py``)."""

from __future__ import annotations

from support.integrity_builders import agreeing_rows, audit, sealed, system, varied_rows

from rewardseal.core.integrity import (
    AuditReport,
    RetainedRow,
    RewardSystem,
    ShardManifest,
    SignalRow,
)


def test_rows_and_observations_round_trip() -> None:
    for built in varied_rows():
        assert SignalRow.from_json(built.to_json()) == built
        assert SignalRow.from_json(built.to_json()).digest == built.digest


def test_systems_manifests_and_reports_round_trip() -> None:
    reward_system = system()
    assert RewardSystem.from_json(reward_system.to_json()) == reward_system
    retention, manifest = sealed(agreeing_rows(30), reward_system)
    assert ShardManifest.from_json(manifest.to_json()) == manifest
    assert [RetainedRow.from_json(r.to_json()) for r in retention.rows] == list(retention.rows)
    report = audit(agreeing_rows(30), reward_system=reward_system)
    assert AuditReport.from_json(report.to_json()) == report
