"""Where a batch runs: small batches on the event loop when the store and the oracle are files on
this host, everything else in a worker thread (issue 12; rewardseal_worker.batching).

A batch on the loop saves a thread hand-off and the GIL contention that comes with it, but stops
every other call while it runs: never over a network store or oracle, and never a large batch.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import make_begin, make_descriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker.bundle import ContractBundle, load_bundle
from rewardseal_worker.engine import INLINE_BATCH, ScoreJob, Scorer
from rewardseal_worker.oracles.http import HttpReader
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.settings import KEY_FILE, resolve_settings
from rewardseal_worker.store import WorkerStore

BUNDLE = Path("contracts") / "mockmed"
_episodes = itertools.count()


@pytest.fixture
def bundle(data_dir: Path) -> ContractBundle:
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    return load_bundle(data_dir / BUNDLE, trust=TrustSet([key.public_key]))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WorkerStore]:
    store = WorkerStore(f"sqlite:///{tmp_path / 'store.db'}")
    yield store
    store.close()


def make_scorer(
    bundle: ContractBundle, store: WorkerStore, data_dir: Path, inline_batch: int | None = None
) -> Scorer:
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    reader = make_reader(bundle.recipe, bundle.path)
    return Scorer(bundle=bundle, store=store, reader=reader, key=key, inline_batch=inline_batch)


def test_sqlite_store_and_sqlite_oracle_run_small_batches_on_the_loop(
    bundle: ContractBundle, store: WorkerStore, data_dir: Path
) -> None:
    scorer = make_scorer(bundle, store, data_dir)
    assert scorer.reader.local
    assert scorer.inline_batch == INLINE_BATCH > 0


def test_an_oracle_across_a_network_keeps_every_batch_in_a_thread(
    bundle: ContractBundle, store: WorkerStore, data_dir: Path
) -> None:
    reader = HttpReader(
        kind="rest",
        base_url=httpx.URL("http://127.0.0.1:9"),
        path="/records",
        collection="records",
        identity_params={"patient_id": "patient_id"},
        timeout_seconds=1.0,
        token=None,
    )
    try:
        key = SigningKey.load_or_create(data_dir / KEY_FILE)
        scorer = Scorer(bundle=bundle, store=store, reader=reader, key=key)
        assert not reader.local
        assert scorer.inline_batch == 0
    finally:
        reader.close()


def test_the_setting_is_read_from_the_environment(tmp_path: Path) -> None:
    name = "REWARDSEAL_WORKER_INLINE_BATCH"
    assert resolve_settings(data_dir=tmp_path / "unset", env={}).inline_batch is None
    assert resolve_settings(data_dir=tmp_path / "off", env={name: "0"}).inline_batch == 0
    assert resolve_settings(data_dir=tmp_path / "some", env={name: "16"}).inline_batch == 16
    with pytest.raises(ValidationError, match=name):
        resolve_settings(data_dir=tmp_path / "bad", env={name: "many"})


def test_inline_batch_must_not_be_negative(
    bundle: ContractBundle, store: WorkerStore, data_dir: Path
) -> None:
    with pytest.raises(ValidationError, match="inline_batch must be 0 or more"):
        make_scorer(bundle, store, data_dir, inline_batch=-1)


def begun_jobs(scorer: Scorer, count: int) -> list[ScoreJob]:
    """``count`` episodes begun (on patients of their own), as score jobs."""
    digest = scorer.bundle.contract_digest
    ids = [f"episode.inline-{next(_episodes):06d}" for _ in range(count)]
    begins = [
        scorer.begin_job(make_begin(episode_id, digest, {"patient_id": f"patient-i-{n:03d}"}))
        for n, episode_id in enumerate(ids)
    ]
    assert not any(isinstance(outcome, Exception) for outcome in scorer._begin_batch(begins))
    assert scorer.bundle.certificate is not None
    update = scorer.bundle.certificate.issued_at_policy_update
    return [
        ScoreJob(
            make_descriptor(
                episode_id=episode_id,
                policy_checkpoint_id="ckpt.inline",
                policy_update=update,
                reward_contract_digest=digest,
            )
        )
        for episode_id in ids
    ]


@pytest.mark.parametrize("inline_batch", [0, 2])
async def test_batch_calls_run_on_the_loop_up_to_inline_batch(
    bundle: ContractBundle, store: WorkerStore, data_dir: Path, inline_batch: int
) -> None:
    scorer = make_scorer(bundle, store, data_dir, inline_batch=inline_batch)
    threads: list[tuple[int, int]] = []

    def seen(receipts: Sequence[RewardEvidenceReceipt]) -> None:
        threads.append((len(receipts), threading.get_ident()))

    scorer.on_receipts = seen
    for count in (2, 3):
        outcomes = await scorer.score_jobs(begun_jobs(scorer, count))
        assert all(isinstance(outcome, SignedEnvelope) for outcome in outcomes), outcomes
    on_loop = [thread == threading.get_ident() for _, thread in threads]
    assert [size for size, _ in threads] == [2, 3]
    assert on_loop == [inline_batch >= 2, False]
