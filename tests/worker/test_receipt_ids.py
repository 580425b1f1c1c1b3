"""Receipt ids sort by issue time (issue 12): ``rcpt.``, the issue time in milliseconds, then
16 random bytes. A batch's ids land together at the end of the receipts' primary-key index
instead of on a leaf page each; the random part keeps them unique and unguessable."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.core.validation import validate_id
from rewardseal.rpc.worker_client import make_begin, make_descriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.engine import ScoreJob, Scorer, new_receipt_id
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.settings import KEY_FILE
from rewardseal_worker.store import WorkerStore

SHAPE = re.compile(r"^rcpt\.([0-9a-f]{12})([0-9a-f]{32})$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def millis_of(receipt_id: str) -> int:
    match = SHAPE.match(receipt_id)
    assert match, receipt_id
    return int(match.group(1), 16)


def test_an_id_is_the_issue_time_then_the_random_bytes() -> None:
    at = datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=UTC)
    random = bytes(range(16))
    receipt_id = new_receipt_id(random, at)
    assert validate_id(receipt_id, "receipt_id") == receipt_id  # R-MSG-10
    assert millis_of(receipt_id) == (at - EPOCH) // timedelta(milliseconds=1)
    assert receipt_id.endswith(random.hex())


def test_ids_sort_by_issue_time_whatever_their_random_part() -> None:
    start = datetime(2026, 12, 2, tzinfo=UTC)
    # The later the time, the smaller the random part: only the time can put them in order.
    ids = [
        new_receipt_id(bytes([255 - n]) * 16, start + timedelta(milliseconds=n)) for n in range(50)
    ]
    assert sorted(ids) == ids


def test_ids_of_one_moment_stay_unique() -> None:
    at = datetime(2026, 12, 2, tzinfo=UTC)
    ids = {new_receipt_id(issued_at=at) for _ in range(10_000)}
    assert len(ids) == 10_000
    assert {millis_of(receipt_id) for receipt_id in ids} == {millis_of(next(iter(ids)))}


def test_every_clock_keeps_the_shape() -> None:
    before = new_receipt_id(bytes(16), datetime(1969, 7, 20, tzinfo=UTC))
    last = new_receipt_id(bytes(16), datetime.max.replace(tzinfo=UTC))
    assert millis_of(before) == 0  # a clock before 1970 counts as the epoch
    assert millis_of(last) == (datetime.max.replace(tzinfo=UTC) - EPOCH) // timedelta(
        milliseconds=1
    )


def test_the_worker_names_receipts_by_their_issue_time(data_dir: Path, tmp_path: Path) -> None:
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    bundle = load_bundle(data_dir / "contracts" / "mockmed", trust=TrustSet([key.public_key]))
    ticks = itertools.count()
    start = datetime(2026, 12, 2, tzinfo=UTC)
    store = WorkerStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        scorer = Scorer(
            bundle=bundle,
            store=store,
            reader=make_reader(bundle.recipe, bundle.path),
            key=key,
            clock=lambda: start + timedelta(milliseconds=3 * next(ticks)),
        )
        digest = bundle.contract_digest
        ids = [f"episode.ids-{n:04d}" for n in range(20)]
        begun = scorer._begin_batch(
            [
                scorer.begin_job(make_begin(e, digest, {"patient_id": f"patient-ids-{n:03d}"}))
                for n, e in enumerate(ids)
            ]
        )
        assert not any(isinstance(outcome, Exception) for outcome in begun)
        assert bundle.certificate is not None
        outcomes = scorer.score_jobs_sync(
            [
                ScoreJob(
                    make_descriptor(
                        episode_id=e,
                        policy_checkpoint_id="ckpt.ids",
                        policy_update=bundle.certificate.issued_at_policy_update,
                        reward_contract_digest=digest,
                    )
                )
                for e in ids
            ]
        )
        receipts = []
        for outcome in outcomes:
            assert isinstance(outcome, SignedEnvelope), outcome
            receipt = RewardEvidenceReceipt.FromString(outcome.payload)
            issued = receipt.issued_at.ToDatetime(tzinfo=UTC)
            assert millis_of(receipt.receipt_id) == (issued - EPOCH) // timedelta(milliseconds=1)
            receipts.append(receipt)
        in_issue_order = sorted(receipts, key=lambda r: r.issued_at.ToDatetime(tzinfo=UTC))
        assert [r.receipt_id for r in in_issue_order] == sorted(r.receipt_id for r in receipts)
        assert len({r.issued_at.ToNanoseconds() for r in receipts}) == len(receipts)
        stored = store.receipt_by_id(receipts[-1].receipt_id)
        assert stored is not None
        assert stored.episode_id == receipts[-1].episode_id
    finally:
        store.close()
