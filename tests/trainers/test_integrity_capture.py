"""Capture inside the TRL reward function (R-I-3, R-I-5) on real parts: the optimizer worker
(``sql``) and an independent sentinel worker (``rest`` channel, its own seeded data directory and
key) reading the same MockMed, a real control plane, MockMed's actor running each completion.

The capture never changes what the trainer sees: the same batch with and without it gives the
same rewards, metadata columns and logged metrics. Each row's sentinel observation is the
sentinel's own signed receipt for the same episode; with the sentinel down, the rows are marked
sentinel errors, never agreement or disagreement.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.control import ControlStack
from support.integrity_trainer import create_binding, make_capture
from support.integrity_trainer import trainer_client as control_client
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack
from trainers.test_trl_reward import Logs, TrainerState

from rewardseal.core.signing import SigningKey
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.integrity.capture import IntegrityCapture, output_digest
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal_kit.actors import MockMedActor
from rewardseal_kit.extradup import CONTROL, mockmed_write_spec, scripted_completion
from rewardseal_kit.mockmed import IDENTITY_KEY
from rewardseal_worker.seed import REST_BUNDLE, REST_TOKEN_ENV, REST_URL_ENV, seed_mockmed
from rewardseal_worker.settings import KEY_FILE


def signed_digest(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


FAMILIES = (CONTROL, "dup", CONTROL, "claim")


@pytest.fixture
async def optimizer(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def mockmed(optimizer: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{optimizer.database}", tmp_path) as service:
        yield service


@pytest.fixture
async def sentinel(
    mockmed: RunningMockMed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningStack]:
    """Another operator's worker: its own data dir and key, reading MockMed over REST."""
    rest_dir = tmp_path / "sentinel"
    seed_mockmed(rest_dir, key=SigningKey.load_or_create(rest_dir / KEY_FILE), trials=300)
    monkeypatch.setenv(REST_URL_ENV, mockmed.url)
    monkeypatch.setenv(REST_TOKEN_ENV, mockmed.token)
    running = await start_stack(rest_dir, contract=REST_BUNDLE.name)
    yield running
    if not getattr(running, "stopped", False):  # a test may have stopped it already
        await stop_stack(running)


def _worker(stack: RunningStack) -> WorkerClient:
    return WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=5.0)


async def _score(
    function: CertifiedRewardFunction, prefix: str, patients: tuple[str, str]
) -> tuple[list[float | None], dict[str, list[Any]], Logs]:
    """One TRL batch of two groups of two (the families above), called as TRL 1.16 does."""
    completions = [
        scripted_completion(family, mockmed_write_spec(patients[index // 2]))
        for index, family in enumerate(FAMILIES)
    ]
    logs = Logs()
    rewards = await asyncio.to_thread(
        lambda: function(
            prompts=["Create the triage encounter."] * 4,
            completions=completions,
            completion_ids=[[1, 2, 3]] * 4,
            trainer_state=TrainerState(global_step=2),
            oracle_identity=[{IDENTITY_KEY: patients[index // 2]} for index in range(4)],
            episode_id=[f"{prefix}-0001"] * 2 + [f"{prefix}-0002"] * 2,
            log_extra=logs.log_extra,
            log_metric=logs.log_metric,
        )
    )
    return rewards, function.metadata_columns(), logs


def _function(
    optimizer: RunningStack,
    client: WorkerClient,
    mockmed: RunningMockMed,
    capture: IntegrityCapture | None,
) -> CertifiedRewardFunction:
    return CertifiedRewardFunction(
        client,
        reward_contract_digest=optimizer.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        actor=MockMedActor(mockmed.url, mockmed.token),
        capture=capture,
    )


def _without_nonces(columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The columns with each minted episode id's random tail taken off (the rest must match)."""
    kept = dict(columns)
    kept["reward_episode_id"] = [i.rsplit(".", 1)[0] for i in columns["reward_episode_id"]]
    return kept


async def test_capture_never_changes_what_the_trainer_sees_and_keeps_the_sentinels_receipts(
    optimizer: RunningStack,
    mockmed: RunningMockMed,
    sentinel: RunningStack,
    integrity_control: ControlStack,
    tmp_path: Path,
) -> None:
    binding = await create_binding(integrity_control)
    with (
        _worker(optimizer) as client,
        _worker(sentinel) as guard,
        control_client(integrity_control) as cc,
    ):
        plain = await _score(
            _function(optimizer, client, mockmed, None), "row", ("patient-a1", "patient-b1")
        )
        capture = make_capture(
            cc, binding, tmp_path / "buffer", sentinel=guard, sentinel_digest=sentinel.digest
        )
        captured = await _score(
            _function(optimizer, client, mockmed, capture), "row", ("patient-a2", "patient-b2")
        )
        rows = capture.last_rows
        shard_id = await asyncio.to_thread(capture.seal, 2)
    # R-I-5: identical rewards, columns (but for each episode id's nonce) and logged metrics.
    assert plain[0] == captured[0] == [1.0, 0.0, 1.0, 0.0]
    assert _without_nonces(plain[1]) == _without_nonces(captured[1])
    assert plain[2].metrics == captured[2].metrics
    assert plain[2].extra.keys() == captured[2].extra.keys()
    # One row per sample, the optimizer's own numbers, the exact outputs by digest.
    episode_ids = captured[1]["reward_episode_id"]
    assert [row.episode_id for row in rows] == episode_ids
    assert [row.optimizer_raw for row in rows] == [1.0, 0.0, 1.0, 0.0]
    assert [(row.candidate, row.group_id) for row in rows] == [
        (0, "2:0"),
        (1, "2:0"),
        (0, "2:1"),
        (1, "2:1"),
    ]
    assert rows[0].output_digest == output_digest(
        scripted_completion(CONTROL, mockmed_write_spec("patient-a2"))
    )
    # The sentinel judged the same episodes itself, with its own key: it agrees here.
    outcomes = [row.sentinel.outcome if row.sentinel else None for row in rows]
    assert outcomes == ["accepted", "refused", "accepted", "refused"]
    for row, episode_id in zip(rows, episode_ids, strict=True):
        assert row.sentinel is not None
        got = await sentinel.client.get_receipt(episode_id=episode_id)  # verified: its key
        assert got.receipt.receipt_id == row.sentinel.receipt_id
        assert row.sentinel.receipt_digest == signed_digest(got.envelope.payload)
    assert shard_id is not None


async def test_a_sentinel_outage_marks_rows_sentinel_errors_and_pays_the_same(
    optimizer: RunningStack,
    mockmed: RunningMockMed,
    sentinel: RunningStack,
    integrity_control: ControlStack,
    tmp_path: Path,
) -> None:
    binding = await create_binding(integrity_control)
    with (
        _worker(optimizer) as client,
        _worker(sentinel) as guard,
        control_client(integrity_control) as cc,
    ):
        capture = make_capture(
            cc, binding, tmp_path / "buffer", sentinel=guard, sentinel_digest=sentinel.digest
        )
        await stop_stack(sentinel)
        sentinel.stopped = True  # type: ignore[attr-defined]
        rewards, columns, _ = await _score(
            _function(optimizer, client, mockmed, capture), "down", ("patient-c1", "patient-d1")
        )
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    assert columns["reward_error"] == [""] * 4
    rows = capture.last_rows
    assert len(rows) == 4
    for row in rows:
        assert row.sentinel is not None
        assert row.sentinel.outcome == "error"
        assert row.sentinel.reward is None
        assert row.sentinel.error is not None
        assert row.sentinel.error.startswith("unavailable")
