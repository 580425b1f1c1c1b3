"""Deterministic retention (R-I-4) and sealed signal shards (R-I-3)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.integrity_builders import agreeing_rows, row, sealed, system

from rewardseal.core.errors import ShardCorrupt, ValidationError
from rewardseal.core.integrity import (
    BUILTIN_PROTOCOLS,
    RetainedRow,
    RetentionProtocol,
    retain,
    seal_shard,
    verify_shard,
)
from rewardseal.core.integrity.retention import rank_key

BALANCED = BUILTIN_PROTOCOLS["balanced_256"]
SMALL = RetentionProtocol("small_12", seed=42, core_size=8, diagnostic_size=4)


def varied_rows(count: int, boundary: int = 10) -> list:
    """Rows of every diagnostic family: errors, near-threshold, high rewards, split components."""
    rows = []
    for n in range(count):
        kind = n % 5
        if kind == 0:
            rows.append(row(n, optimizer=0.9, sentinel="error", boundary=boundary))
        elif kind == 1:
            rows.append(row(n, optimizer=0.51, sentinel="accepted", boundary=boundary))
        elif kind == 2:
            rows.append(row(n, optimizer=0.99, sentinel="refused", boundary=boundary))
        elif kind == 3:
            split = {"format": 1.0, "content": 0.0}
            rows.append(
                row(n, optimizer=0.2, sentinel="refused", components=split, boundary=boundary)
            )
        else:
            rows.append(row(n, optimizer=0.1, sentinel="refused", boundary=boundary))
    return rows


def test_a_boundary_that_fits_is_retained_whole_and_exact() -> None:
    rows = agreeing_rows(256)
    retention = retain(rows, BALANCED, system().mapping)
    assert retention.exact
    assert len(retention.core) == 256
    assert retention.diagnostics == ()
    assert retention.captured == 256


def test_a_larger_boundary_keeps_a_core_and_labelled_diagnostics() -> None:
    rows = varied_rows(400)
    retention = retain(rows, BALANCED, system().mapping)
    assert not retention.exact
    assert len(retention.core) == 192
    assert len(retention.diagnostics) == 64
    assert retention.captured == 400
    core_ids = {r.identity for r in retention.core}
    assert not core_ids & {r.row.identity for r in retention.diagnostics}
    families = {r.family for r in retention.diagnostics}
    assert families == {
        "verifier_error",
        "threshold_adjacent",
        "highest_optimizer_reward",
        "component_disagreement",
    }


def test_the_core_is_the_lowest_ranked_records_under_the_seed() -> None:
    rows = varied_rows(300)
    retention = retain(rows, BALANCED, system().mapping)
    ranked = sorted(rows, key=lambda r: (rank_key(42, r.record_id), r.candidate))
    assert list(retention.core) == ranked[:192]
    reseeded = retain(rows, dataclasses.replace(BALANCED, seed=43), system().mapping)
    assert {r.identity for r in reseeded.core} != {r.identity for r in retention.core}


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_retention_is_deterministic_whatever_the_input_order(shuffler) -> None:
    rows = varied_rows(40)
    shuffled = list(rows)
    shuffler.shuffle(shuffled)
    assert retain(shuffled, SMALL, system().mapping) == retain(rows, SMALL, system().mapping)


def test_retention_refuses_mixed_boundaries_and_duplicate_identities() -> None:
    with pytest.raises(ValidationError, match="policy updates"):
        retain(agreeing_rows(3, boundary=1) + agreeing_rows(3, boundary=2), SMALL, system().mapping)
    with pytest.raises(ValidationError, match="identity"):
        retain(agreeing_rows(3) + agreeing_rows(1), SMALL, system().mapping)
    with pytest.raises(ValidationError):
        retain([], SMALL, system().mapping)


def test_a_sealed_shard_verifies() -> None:
    reward_system = system()
    retention, manifest = sealed(varied_rows(40), reward_system, SMALL)
    assert verify_shard(manifest, retention.rows, shard_id=manifest.shard_id) == retention
    assert manifest.core_count == 8
    assert [e.row_digest for e in manifest.entries] == [r.row.digest for r in retention.rows]


def test_an_edited_row_is_refused() -> None:
    retention, manifest = sealed(agreeing_rows(30), system())
    rows = list(retention.rows)
    edited_row = dataclasses.replace(rows[3].row, optimizer_raw=0.5, optimizer_mapped=0.5)
    rows[3] = RetainedRow(edited_row, "core")
    with pytest.raises(ShardCorrupt, match="row 3") as caught:
        verify_shard(manifest, rows)
    assert caught.value.code.name == "INVALID_ARGUMENT"


@pytest.mark.parametrize("damage", ["drop", "add", "swap", "relabel", "manifest"])
def test_dropped_added_reordered_or_relabelled_rows_are_refused(damage: str) -> None:
    retention, manifest = sealed(varied_rows(40), system(), SMALL)
    rows = list(retention.rows)
    shard_id = manifest.shard_id
    if damage == "drop":
        rows.pop()
    elif damage == "add":
        rows.append(RetainedRow(row(999, optimizer=0.5, sentinel="accepted"), "core"))
    elif damage == "swap":
        rows[0], rows[1] = rows[1], rows[0]
    elif damage == "relabel":
        rows[-1] = RetainedRow(rows[-1].row, "core")
    else:
        manifest = dataclasses.replace(manifest, captured=manifest.captured + 1)
    with pytest.raises(ShardCorrupt):
        verify_shard(manifest, rows, shard_id=shard_id)


def test_sealing_needs_a_run_and_a_system_revision() -> None:
    retention = retain(agreeing_rows(3), SMALL, system().mapping)
    with pytest.raises(ValidationError):
        seal_shard(retention, run_id="", system_revision_id=system().revision_id)
    with pytest.raises(ValidationError):
        seal_shard(retention, run_id="run", system_revision_id="v1")
