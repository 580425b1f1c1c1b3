"""The store's reads behind the operator console, on SQLite and PostgreSQL: the receipt
timeline over policy updates, per-contract activity, and the audit log newest first."""

from __future__ import annotations

import json

import pytest
from support.control_store_builders import (
    ADMIN,
    FAILED,
    VERIFIED,
    WRONG,
    contract_version,
    seed_receipts,
)

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import ValidationError
from rewardseal_control.store import ControlStore


def test_timeline_spans_every_recorded_update_with_counts_and_certified(
    store: ControlStore,
) -> None:
    # Receipts at updates 100..104 (one FAILED, one WRONG, one tier-1) and 200, 201 (expired).
    digest = seed_receipts(store)
    spans = store.receipts.timeline(digest, buckets=4)
    # 102 updates in 4 spans of 26: 100-125, 126-151 (empty: left out), 152-177 (empty), 178-201.
    assert [(s.first_update, s.last_update) for s in spans] == [(100, 125), (178, 201)]
    first, last = spans
    assert dict(first.counts) == {VERIFIED: 3, WRONG: 1, FAILED: 1}
    assert first.certified == 4  # the tier-1 receipt is development only
    assert dict(last.counts) == {VERIFIED: 1, WRONG: 1}
    assert last.certified == 0  # its certificate had expired
    assert sum(s.total for s in store.receipts.timeline(digest, buckets=500)) == 7
    one = store.receipts.timeline(digest, buckets=1)
    assert [(one[0].first_update, one[0].last_update, one[0].total)] == [(100, 201, 7)]


def test_timeline_of_a_contract_without_receipts_is_empty(store: ControlStore) -> None:
    contract = contract_version(3)
    digest, _ = store.contracts.register_contract(contract, contract_digest(contract))
    assert store.receipts.timeline(digest) == []
    assert digest not in store.receipts.activity()


@pytest.mark.parametrize("buckets", [0, 501, True])
def test_timeline_refuses_a_bucket_count_out_of_range(store: ControlStore, buckets: int) -> None:
    digest = seed_receipts(store)
    with pytest.raises(ValidationError, match="buckets"):
        store.receipts.timeline(digest, buckets=buckets)


def test_activity_counts_receipts_and_the_newest_update_per_contract(
    store: ControlStore,
) -> None:
    digest = seed_receipts(store)
    activity = store.receipts.activity()
    assert activity[digest].total == 7
    assert activity[digest].newest_policy_update == 201


def test_the_audit_log_reads_newest_first_and_pages_below_an_id(store: ControlStore) -> None:
    seed_receipts(store)  # registers two keys: two audit rows
    entries = store.audit_log.latest(10)
    assert [e.action for e in entries] == ["issuer_key.register", "issuer_key.register"]
    assert entries[0].id > entries[1].id
    assert entries[0].actor == ADMIN
    assert json.loads(entries[0].details)["role"] == "organization"
    older = store.audit_log.latest(1, before=entries[0].id)
    assert [e.id for e in older] == [entries[1].id]
    assert store.audit_log.latest(5, before=entries[1].id) == []
    for bad in ({"limit": 0}, {"limit": 501}, {"limit": 5, "before": 0}):
        with pytest.raises(ValidationError):
            store.audit_log.latest(**bad)  # type: ignore[arg-type]
