"""ControlStore contracts and issuer keys (R-C-1, R-C-2) on SQLite and PostgreSQL: idempotent
registration, digests, roles, validity windows, retirement and the worker trust set."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.control_store import list_audit
from support.control_store_builders import (
    ADMIN,
    ORG_KEY,
    ORGANIZATION,
    T0,
    WORKER,
    WORKER_KEY,
    all_pages,
    contract_version,
    key_message,
    seeded,
)

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import (
    NotFound,
    ValidationError,
)
from rewardseal.core.signing import (
    SigningKey,
    TrustSet,
)
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.store import (
    ControlStore,
)
from rewardseal_kit.mockmed import mockmed_contract

# ---------------------------------------------------------------------- contracts


def test_register_contract_is_idempotent_and_recomputes_the_digest(store: ControlStore) -> None:
    contract = mockmed_contract()
    digest = contract_digest(contract)
    assert store.contracts.register_contract(contract, digest) == (digest, True)
    assert store.contracts.register_contract(contract, digest) == (digest, False)
    assert store.contracts.register_contract(contract, None) == (digest, False)

    registered = store.contracts.get_contract(digest)
    assert registered.reward_contract_digest == digest
    assert contract_digest(registered.contract) == digest
    assert registered.registered_at.ToDatetime().year >= 2024


def test_register_contract_refuses_a_digest_mismatch(store: ControlStore) -> None:
    contract = mockmed_contract()
    other = contract_digest(contract_version(2))
    with pytest.raises(ValidationError, match="does not match"):
        store.contracts.register_contract(contract, other)
    with pytest.raises(ValidationError):
        store.contracts.register_contract(contract, "")  # the claim is required when passed
    with pytest.raises(NotFound):
        store.contracts.get_contract(contract_digest(contract))


def test_register_contract_refuses_invalid_contracts(store: ControlStore) -> None:
    broken = mockmed_contract()
    broken.contract_id = "bad id"
    with pytest.raises(ValidationError):
        store.contracts.register_contract(broken, None)
    # Protobuf keeps unknown fields; add one on the wire (field 1023, varint 1).
    wire = mockmed_contract().SerializeToString() + b"\xf8\x3f\x01"
    with pytest.raises(ValidationError, match="does not know"):
        store.contracts.register_contract(RewardContract.FromString(wire), None)


def test_get_contract_refuses_a_malformed_digest(store: ControlStore) -> None:
    with pytest.raises(ValidationError):
        store.contracts.get_contract("sha256:XYZ")
    with pytest.raises(NotFound):
        store.contracts.get_contract("sha256:" + "0" * 64)


def test_list_contracts_pages(store: ControlStore) -> None:
    digests = []
    for n in range(7):
        digest, created = store.contracts.register_contract(
            contract_version(n), None, at=T0 + timedelta(seconds=n)
        )
        assert created
        digests.append(digest)
    pages = all_pages(store.contracts.list_contracts, 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    listed = [c.reward_contract_digest for p in pages for c in p.items]  # type: ignore[attr-defined]
    assert listed == digests  # oldest registration first, each exactly once
    assert store.contracts.list_contracts().next_page_token == ""
    items, token = store.contracts.list_contracts(page_size=7)
    assert len(items) == 7
    assert token == ""


# ---------------------------------------------------------------------- issuer keys


def test_register_issuer_key(store: ControlStore) -> None:
    key, created = store.keys.register_issuer_key(
        key_message(WORKER_KEY, WORKER), ADMIN, "first worker", at=T0
    )
    assert created
    assert key.key_id == WORKER_KEY.key_id
    assert key.public_key == WORKER_KEY.public_key
    assert key.role == WORKER
    assert not key.retired
    assert key.not_before.ToDatetime() == T0.replace(tzinfo=None)
    assert not key.HasField("not_after")
    again, created = store.keys.register_issuer_key(
        key_message(WORKER_KEY, WORKER, key_id=WORKER_KEY.key_id), ADMIN, "again"
    )
    assert not created
    assert again == key
    assert store.keys.get_issuer_key(WORKER_KEY.key_id) == key


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key_id": ORG_KEY.key_id}, "does not name public_key"),
        ({"role": IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED}, "role"),
        ({"public_key": b"\x01" * 31}, "public_key"),
        ({"retired": True}, "retired"),
        ({"not_before": T0, "not_after": T0}, "not_after"),
        ({"display_name": "x\x00y"}, "control characters"),
    ],
)
def test_register_issuer_key_refusals(
    store: ControlStore, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER, **fields), ADMIN, "r")
    assert store.keys.list_issuer_keys().items == []
    assert list_audit(store).items == []


def test_a_key_keeps_its_role_and_window(store: ControlStore) -> None:
    store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), ADMIN, "", at=T0)
    with pytest.raises(ValidationError, match="another role"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, ORGANIZATION), ADMIN, "escalate")
    with pytest.raises(ValidationError, match="validity window"):
        store.keys.register_issuer_key(
            key_message(WORKER_KEY, WORKER, not_before=T0 - timedelta(days=1)), ADMIN, ""
        )


@pytest.mark.parametrize("actor", ["", "Bearer abc", "admin token", "1admin", "a" * 200])
def test_actor_must_be_a_name(store: ControlStore, actor: str) -> None:
    with pytest.raises(ValidationError, match="actor"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), actor, "r")


def test_list_issuer_keys_pages_and_filters_by_role(store: ControlStore) -> None:
    workers = [SigningKey.from_seed(bytes([n]) * 32) for n in range(5)]
    for n, key in enumerate(workers):
        store.keys.register_issuer_key(
            key_message(key, WORKER), ADMIN, "", at=T0 + timedelta(seconds=n)
        )
    store.keys.register_issuer_key(
        key_message(ORG_KEY, ORGANIZATION), ADMIN, "", at=T0 + timedelta(seconds=9)
    )
    pages = all_pages(lambda **kw: store.keys.list_issuer_keys(WORKER, **kw), 2)
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert [k.key_id for p in pages for k in p.items] == [k.key_id for k in workers]  # type: ignore[attr-defined]
    assert [k.key_id for k in store.keys.list_issuer_keys(ORGANIZATION).items] == [ORG_KEY.key_id]
    assert len(store.keys.list_issuer_keys().items) == 6
    # A token made under one role filter does not continue another.
    token = store.keys.list_issuer_keys(WORKER, page_size=2).next_page_token
    with pytest.raises(ValidationError, match="other filters"):
        store.keys.list_issuer_keys(ORGANIZATION, page_size=2, page_token=token)


def test_retired_key_is_not_active(store: ControlStore) -> None:
    seeded(store)
    now = T0 + timedelta(hours=1)
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now) is not None
    retired = store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "rotated", at=now)
    assert retired.retired
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now) is None
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now + timedelta(days=1)) is None
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER) is None  # default: now
    # Before its retirement it was active (history stays answerable).
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now - timedelta(seconds=1)) is not None
    assert WORKER_KEY.key_id not in store.keys.worker_trust(now)
    # Retiring again changes nothing; a retired key is never registered again.
    assert store.keys.retire_issuer_key(
        WORKER_KEY.key_id, ADMIN, "again", at=now + timedelta(1)
    ) == (retired)
    with pytest.raises(ValidationError, match="retired"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), ADMIN, "revive")


def test_retire_refusals(store: ControlStore) -> None:
    with pytest.raises(NotFound):
        store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "gone")
    seeded(store)
    with pytest.raises(ValidationError, match="reason"):
        store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "  ")
    with pytest.raises(ValidationError):
        store.keys.retire_issuer_key("ed25519:sha256:nothex", ADMIN, "r")
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, T0) is not None


def test_validity_windows(store: ControlStore) -> None:
    start, end = T0 + timedelta(days=1), T0 + timedelta(days=2)
    store.keys.register_issuer_key(
        key_message(ORG_KEY, ORGANIZATION, not_before=start, not_after=end), ADMIN, "", at=T0
    )
    key_id = ORG_KEY.key_id
    assert store.keys.active_key(key_id, ORGANIZATION, start - timedelta(microseconds=1)) is None
    assert store.keys.active_key(key_id, ORGANIZATION, start) is not None  # inclusive start
    assert store.keys.active_key(key_id, ORGANIZATION, end - timedelta(microseconds=1)) is not None
    assert store.keys.active_key(key_id, ORGANIZATION, end) is None  # exclusive end
    # The role must match: an organization key is not a worker key.
    assert store.keys.active_key(key_id, WORKER, start) is None
    with pytest.raises(ValidationError):
        store.keys.active_key(key_id, IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED, start)
    with pytest.raises(ValidationError, match="timezone"):
        store.keys.active_key(key_id, ORGANIZATION, start.replace(tzinfo=None))
    # Unknown keys are simply not active.
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, start) is None


def test_worker_trust_holds_active_worker_keys_only(store: ControlStore) -> None:
    later = SigningKey.from_seed(b"\x07" * 32)
    retired = SigningKey.from_seed(b"\x08" * 32)
    seeded(store)
    store.keys.register_issuer_key(
        key_message(later, WORKER, not_before=T0 + timedelta(days=3)), ADMIN, "", at=T0
    )
    store.keys.register_issuer_key(key_message(retired, WORKER), ADMIN, "", at=T0)
    store.keys.retire_issuer_key(retired.key_id, ADMIN, "compromised", at=T0 + timedelta(hours=1))
    now = T0 + timedelta(days=1)
    trust = store.keys.worker_trust(now)
    assert isinstance(trust, TrustSet)
    assert trust.key_ids == {WORKER_KEY.key_id}
    assert store.keys.trust_set(ORGANIZATION, now).key_ids == {ORG_KEY.key_id}
    assert store.keys.worker_trust(T0 + timedelta(days=4)).key_ids == {
        WORKER_KEY.key_id,
        later.key_id,
    }
