"""The scorer's receipts follow the certificate in use the moment it changes (R-SCORE-4, R-C-4).

The scorer keeps one receipt issuer per certificate in use (what the certificate and outcome
decide is made once, issue 12): a swap, a drop and a return must each show on the very next
receipt, and every receipt opens under the worker's key.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewardseal.core.receipts import open_receipt
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import make_begin, make_descriptor
from rewardseal.v1.enums_pb2 import CertificateState
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.engine import ScoreJob, Scorer
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.settings import KEY_FILE
from rewardseal_worker.store import WorkerStore

BUNDLE = Path("contracts") / "mockmed"


@pytest.fixture
def scorer(data_dir: Path, tmp_path: Path) -> Iterator[Scorer]:
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    bundle = load_bundle(data_dir / BUNDLE, trust=TrustSet([key.public_key]))
    store = WorkerStore(f"sqlite:///{tmp_path / 'store.db'}")
    yield Scorer(
        bundle=bundle, store=store, reader=make_reader(bundle.recipe, bundle.path), key=key
    )
    store.close()


_episodes = itertools.count()


def score_one(scorer: Scorer) -> RewardEvidenceReceipt:
    n = next(_episodes)
    episode_id = f"episode.swap-{n:06d}"
    digest = scorer.bundle.contract_digest
    begun = scorer._begin_batch(
        [scorer.begin_job(make_begin(episode_id, digest, {"patient_id": f"patient-s-{n:03d}"}))]
    )
    assert not isinstance(begun[0], Exception), begun
    [outcome] = scorer.score_jobs_sync(
        [
            ScoreJob(
                make_descriptor(
                    episode_id=episode_id,
                    policy_checkpoint_id="ckpt.swap",
                    policy_update=scorer.bundle.certificate.issued_at_policy_update,
                    reward_contract_digest=digest,
                )
            )
        ]
    )
    assert isinstance(outcome, SignedEnvelope), outcome
    return open_receipt(outcome, TrustSet([scorer.key.public_key])).receipt


def test_receipts_follow_the_certificate_in_use(scorer: Scorer) -> None:
    certificate = scorer.bundle.certificate
    assert certificate is not None
    digest = scorer.bundle.certificate_digest
    first, second = score_one(scorer), score_one(scorer)  # the second from the template
    for receipt in (first, second):
        assert receipt.certificate_id == certificate.certificate_id
        assert receipt.certificate_digest == digest
        assert receipt.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT

    scorer.use_certificate(None, None)
    dropped = score_one(scorer)
    assert dropped.certificate_state == CertificateState.CERTIFICATE_STATE_ABSENT
    assert not dropped.certificate_id
    assert not dropped.certified
    assert "no certificate was given for this reward contract" in dropped.certification_refusals

    scorer.use_certificate(certificate, digest)
    back = score_one(scorer)
    assert back.certificate_id == certificate.certificate_id
    assert back.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
    assert list(back.certification_refusals) == list(first.certification_refusals)
    assert back.certified == first.certified
