"""ControlStore receipt index (R-C-5) on SQLite and PostgreSQL: idempotent recording, per-item
refusals, concurrent forwarders, filters and the per-contract summary.

The index takes receipts as RecordReceipts hands them over, opened (``support...opened``): what
opening refuses (signature, payload type, strict parse, rules, envelope flags) is tested at the
service (tests/control/test_control_service.py) and in core (tests/unit/test_receipts.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from support.control_store import get_receipt
from support.control_store_builders import (
    FAILED,
    VERIFIED,
    WORKER_KEY,
    WRONG,
    all_pages,
    contract_version,
    opened,
    sealed,
    seed_receipts,
    seeded,
)

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import (
    DuplicateEpisode,
    NotFound,
    SignatureError,
    ValidationError,
)
from rewardseal.core.receipts import seal_receipt
from rewardseal.core.signing import SigningKey
from rewardseal.core.validation import parse_strict
from rewardseal.v1.enums_pb2 import CertificateState, RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_control.store import (
    MAX_PAGE_SIZE,
    ControlStore,
    ReceiptFilter,
)

# ---------------------------------------------------------------------- receipts


def test_record_receipts_is_idempotent_by_receipt_id(store: ControlStore) -> None:
    seeded(store)
    envelope = sealed("episode.0001")
    [result] = store.receipts.record_receipts(opened(envelope))
    assert result.receipt_id == "rcpt.episode.0001"
    assert result.recorded
    assert not result.duplicate
    assert result.error is None
    [again] = store.receipts.record_receipts(opened(envelope))
    assert again.recorded
    assert again.duplicate
    assert again.error is None
    stored = get_receipt(store, "rcpt.episode.0001")
    assert stored.envelope == envelope
    assert stored.receipt.episode_id == "episode.0001"
    assert store.receipts.list_receipts().items == [stored]


def test_record_receipts_refuses_items_one_by_one(store: ControlStore) -> None:
    digest = seeded(store)
    good = sealed("episode.0001")
    other_payload = sealed("episode.0001", outcome=WRONG)  # same receipt id, other content
    same_episode = sealed("episode.0001")
    receipt = parse_strict(RewardEvidenceReceipt, same_episode.payload)
    receipt.receipt_id = "rcpt.other.0001"
    same_episode = seal_receipt(receipt, WORKER_KEY)
    unregistered_key = SigningKey.from_seed(b"\x09" * 32)
    foreign = sealed("episode.0003", key=unregistered_key)
    unknown_contract = sealed("episode.0004", contract=contract_version(9))
    # A field this schema does not know on the envelope, outside the signed payload: it opens,
    # but it would be stored with the envelope.
    envelope_field = SignedEnvelope.FromString(
        sealed("episode.0006").SerializeToString() + b"\xf8\x3f\x01"
    )
    in_batch_twice = sealed("episode.0007")

    results = store.receipts.record_receipts(
        opened(
            good,
            other_payload,
            same_episode,
            foreign,
            unknown_contract,
            envelope_field,
            in_batch_twice,
            in_batch_twice,
            keys=(unregistered_key,),
        )
    )
    assert [(r.recorded, r.duplicate) for r in results] == [
        (True, False),
        (False, False),
        (False, False),
        (False, False),
        (False, False),
        (False, False),
        (True, False),
        (True, True),
    ]
    assert isinstance(results[1].error, ValidationError)
    assert "other content" in results[1].error.message
    assert isinstance(results[2].error, DuplicateEpisode)
    assert results[2].error.metadata == {"receipt_id": "rcpt.episode.0001"}
    assert isinstance(results[3].error, SignatureError)
    assert results[3].error.reason == "signature_invalid"
    assert isinstance(results[4].error, NotFound)
    assert isinstance(results[5].error, ValidationError)
    assert "does not know" in results[5].error.message
    assert results[5].receipt_id == ""
    summary = store.receipts.receipt_summary(digest)
    assert summary.total == 2


def test_record_receipts_takes_only_opened_receipts(store: ControlStore) -> None:
    seeded(store)
    [result] = store.receipts.record_receipts([sealed("episode.0001")])  # type: ignore[list-item]
    assert not result.recorded
    assert isinstance(result.error, ValidationError)
    assert result.receipt_id == ""
    assert store.receipts.list_receipts().items == []


def test_concurrent_forwarders_store_each_receipt_once(store: ControlStore) -> None:
    """Overlapping batches from several forwarders at once: every receipt stored exactly once."""
    digest = seeded(store)
    receipts = opened(*(sealed(f"episode.c{n:03d}", policy_update=100 + n % 40) for n in range(40)))
    batches = [receipts[start : start + 25] for start in (0, 5, 10, 15)] * 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(store.receipts.record_receipts, batches))
    assert all(r.recorded and r.error is None for batch in outcomes for r in batch)
    fresh = [r.receipt_id for batch in outcomes for r in batch if not r.duplicate]
    assert sorted(fresh) == sorted(f"rcpt.episode.c{n:03d}" for n in range(40))
    assert store.receipts.receipt_summary(digest).total == 40


def test_list_receipts_pages(store: ControlStore) -> None:
    seed_receipts(store)
    pages = all_pages(store.receipts.list_receipts, 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    ids = [r.receipt.episode_id for p in pages for r in p.items]  # type: ignore[attr-defined]
    assert ids == [f"episode.a00{n}" for n in range(1, 8)]  # by policy update
    filtered = ReceiptFilter(certified=False)
    pages = all_pages(lambda **kw: store.receipts.list_receipts(filtered, **kw), 1)
    assert [len(p.items) for p in pages] == [1, 1, 1]


def test_list_receipts_filters(store: ControlStore) -> None:
    digest = seed_receipts(store)

    def episodes(**filters: object) -> list[str]:
        page = store.receipts.list_receipts(ReceiptFilter(**filters), page_size=MAX_PAGE_SIZE)  # type: ignore[arg-type]
        return [r.receipt.episode_id for r in page.items]

    assert len(episodes(contract_digest=digest)) == 7
    assert episodes(contract_digest=contract_digest(contract_version(3))) == []
    assert episodes(reward_outcome=WRONG) == ["episode.a003", "episode.a007"]
    assert len(episodes(reward_outcome=RewardOutcome.REWARD_OUTCOME_UNSPECIFIED)) == 7
    # The outcome does not enter `certified` (R-SCORE-4): the unscored a004 is certified.
    assert episodes(certified=True) == [f"episode.a00{n}" for n in range(1, 5)]
    assert episodes(min_policy_update=103, max_policy_update=200) == [
        "episode.a004",
        "episode.a005",
        "episode.a006",
    ]
    assert episodes(min_policy_update=201) == ["episode.a007"]
    assert episodes(reward_outcome=WRONG, certified=False) == ["episode.a007"]
    unscored = store.receipts.list_receipts(ReceiptFilter(reward_outcome=FAILED)).items[0].receipt
    assert not unscored.HasField("scalar_reward")  # never 0.0 in its place
    expired = store.receipts.list_receipts(ReceiptFilter(min_policy_update=200)).items[0].receipt
    assert expired.certificate_state == CertificateState.CERTIFICATE_STATE_EXPIRED

    for bad in (
        {"min_policy_update": 5, "max_policy_update": 4},
        {"min_policy_update": -1},
        {"max_policy_update": 2**53},
        {"reward_outcome": 99},
        {"contract_digest": "sha256:short"},
    ):
        with pytest.raises(ValidationError):
            store.receipts.list_receipts(ReceiptFilter(**bad))


def test_receipt_summary(store: ControlStore) -> None:
    digest = seed_receipts(store)
    summary = store.receipts.receipt_summary(digest)
    assert summary.total == 7
    assert dict(summary.counts) == {VERIFIED: 4, WRONG: 2, FAILED: 1}
    assert summary.certified == 4
    assert summary.certified_share == pytest.approx(4 / 7)
    assert summary.unscored_share == pytest.approx(1 / 7)
    other = contract_digest(contract_version(5))
    with pytest.raises(NotFound):
        store.receipts.receipt_summary(other)
    store.contracts.register_contract(contract_version(5), None)
    empty = store.receipts.receipt_summary(other)
    assert (empty.total, empty.certified_share, empty.unscored_share) == (0, 0.0, 0.0)
