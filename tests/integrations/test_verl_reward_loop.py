"""CertifiedRewardLoopManager through verl 0.9.1's real reward-loop code, against a real worker.

verl's default trainer config (hydra compose of ``verl/trainer/config/ppo_trainer.yaml``) names
the manager with ``reward.reward_manager.source=importlib`` and
``module.path=pkg://rewardseal.trainers.verl.loop``, the settings go in
``reward.reward_kwargs``. A real ``RewardLoopWorker`` (the plain class ``RewardLoopManager``
wraps with ``ray.remote``) builds the manager with verl's own ``load_reward_manager`` and runs
``compute_score_batch`` (one ``run_single`` per sample, ``asyncio.gather``); the driver half is
verl's own ``RewardLoopManager.compute_rm_score`` (pad, chunk over workers, ``ray.get``,
``assemble_rm_scores``, extra-info columns) run with in-process worker handles instead of Ray
actors. With a ``LoopGate`` installed on the driver, a paused boundary stops
``compute_rm_score`` with ``IntegrityHalted`` naming the audit. Runs in .venv-integrations
(``make test-integrations``); skipped without verl.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.control import ControlStack
from support.integrity_trainer import check_paused, create_binding, driver_gate
from support.verl_episodes import (
    Played,
    free_port,
    manager_kwargs,
    play_batch,
    start_default_scoring_stack,
)
from support.worker_stack import RunningStack, stop_stack

from rewardseal.core.errors import CertificationRefused, IntegrityHalted, ValidationError
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal.trainers.groups import METADATA_COLUMNS
from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.verl import ALL_UNSCORED_GROUP_REWARD
from rewardseal.trainers.verl.loop import (
    DEFAULT_NAME,
    LOOP_EXTRA_COLUMNS,
    register_with_verl_reward_loop,
    reward_loop_manager_class,
)
from rewardseal_kit.tiny_models import char_tokenizer

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402
from support.integrity_trainer import integrity_control  # noqa: E402
from support.verl_batches import RESPONSE_LENGTHS, verl_batch  # noqa: E402
from verl.experimental.reward_loop import reward_loop as verl_reward_loop  # noqa: E402
from verl.experimental.reward_loop.reward_loop import (  # noqa: E402
    RewardLoopManager,
    RewardLoopWorker,
)
from verl.trainer.ppo.reward import resolve_reward_manager_cls  # noqa: E402

__all__ = ["integrity_control"]

LOOP_COLUMNS = set(METADATA_COLUMNS) | set(LOOP_EXTRA_COLUMNS)
RESPONSE = "abcdef"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A character-level tokenizer saved where ``actor_rollout_ref.model.path`` points."""
    tokenizer = char_tokenizer()
    target = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def base_config(tokenizer_dir: Path) -> Iterator[DictConfig]:
    """verl's default PPO trainer config naming our manager (composed once: about 7 s)."""
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        yield compose(
            config_name="ppo_trainer",
            overrides=[
                "reward.reward_manager.source=importlib",
                "reward.reward_manager.name=CertifiedRewardLoopManager",
                "reward.reward_manager.module.path=pkg://rewardseal.trainers.verl.loop",
                f"actor_rollout_ref.model.path={tokenizer_dir}",
            ],
        )


def loop_config(base: DictConfig, reward_kwargs: dict[str, Any], **reward: Any) -> DictConfig:
    """A copy of ``base`` with ``reward.reward_kwargs`` set (``+reward.reward_kwargs.*=``)."""
    config = OmegaConf.create(OmegaConf.to_container(base))
    with open_dict(config):
        config.reward.reward_kwargs = reward_kwargs
        for key, value in reward.items():
            OmegaConf.update(config, f"reward.{key}", value)
    return config


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """A worker over the default-scoring MockMed bundle."""
    running = await start_default_scoring_stack(data_dir)
    yield running
    await stop_stack(running)


async def close_worker(worker: RewardLoopWorker) -> None:
    await worker.reward_manager.aclose()


def extra_columns(outputs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The columns ``compute_rm_score`` builds from the per-sample extra info."""
    infos = [output.get("reward_extra_info", {}) for output in outputs]
    keys = list(infos[0])
    return {key: [info[key] for info in infos] for key in keys}


def check_placement(rm_scores: Any, batch: Any, expected: list[float]) -> None:
    """Each reward sits on its sample's last valid response token; every other entry is 0."""
    assert rm_scores.shape == batch.batch["responses"].shape
    for row, length in enumerate(RESPONSE_LENGTHS[: len(expected)]):
        assert rm_scores[row, length - 1].item() == expected[row]
        others = torch.cat([rm_scores[row, : length - 1], rm_scores[row, length:]])
        assert torch.count_nonzero(others).item() == 0
    assert rm_scores.sum(dim=-1).tolist() == expected


def check_columns(columns: dict[str, list[Any]], played: Played) -> None:
    """R-T-3: one entry per sample in every column, aligned with the batch."""
    assert set(columns) == LOOP_COLUMNS
    assert all(len(values) == len(played.uids) for values in columns.values())
    assert columns["reward_episode_id"] == [info["episode_id"] for info in played.extra_infos]
    assert columns["reward_outcome"] == [
        "VERIFIED",
        "RECONCILIATION_REQUIRED",
        "VERIFIED",
        "WRONG_EFFECT",
    ]
    assert columns["reward_unscored"] == played.unscored
    assert columns["reward_certified"] == [True] * 4
    assert columns["reward_error"] == [""] * 4
    assert all(columns["reward_receipt_id"])


async def test_reward_loop_worker_then_driver_assembly(
    stack: RunningStack, base_config: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = loop_config(base_config, manager_kwargs(stack))
    cls = resolve_reward_manager_cls(config)
    assert cls is reward_loop_manager_class()
    worker = RewardLoopWorker(config)
    assert isinstance(worker.reward_manager, cls)
    played = await play_batch(stack, "loop")
    batch = verl_batch(played, global_steps=2)
    try:
        outputs = await worker.compute_score_batch(batch)
        # Idempotent: scoring the same batch again returns the stored receipts: the worker
        # answers ALREADY_EXISTS naming each, and the manager fetches it with GetReceipt.
        fetched: list[str | None] = []
        get_receipt = AsyncWorkerClient.get_receipt

        async def spied(self: Any, **kwargs: Any) -> Any:
            fetched.append(kwargs.get("receipt_id"))
            return await get_receipt(self, **kwargs)

        monkeypatch.setattr(AsyncWorkerClient, "get_receipt", spied)
        again = await worker.compute_score_batch(batch)
    finally:
        await close_worker(worker)
    scores = [output["reward_score"] for output in outputs]
    assert scores == [1.0, None, 1.0, -1.0]
    rm_scores = cls.assemble_rm_scores(batch, scores)
    # The unscored sample of group a took its mate's 1.0 (R-T-1); group b is paid as scored.
    check_placement(rm_scores, batch, [1.0, 1.0, 1.0, -1.0])
    columns = extra_columns(outputs)
    check_columns(columns, played)
    assert [output["reward_score"] for output in again] == scores
    assert sorted(fetched) == sorted(columns["reward_receipt_id"])
    assert extra_columns(again) == columns
    # The receipts are the stored ones, stated at verl's global_steps and verified (R-T-5).
    for episode_id, receipt_id in zip(
        columns["reward_episode_id"], columns["reward_receipt_id"], strict=True
    ):
        stored = await stack.client.get_receipt(episode_id=episode_id)
        assert stored.receipt.receipt_id == receipt_id
        assert stored.receipt.policy_update == 2


class InProcessWorker:
    """A ``RewardLoopWorker`` behind the ``.compute_score_batch.remote`` a Ray handle has."""

    def __init__(self, worker: RewardLoopWorker, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = worker
        self.compute_score_batch = SimpleNamespace(remote=self._remote)
        self._loop = loop

    def _remote(self, chunk: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(self.worker.compute_score_batch(chunk), self._loop)


def in_process_manager(
    config: DictConfig, workers: list[RewardLoopWorker], monkeypatch: pytest.MonkeyPatch
) -> RewardLoopManager:
    """verl's driver-side ``RewardLoopManager`` over ``workers`` run on this event loop."""
    loop = asyncio.get_running_loop()
    manager = RewardLoopManager.__new__(RewardLoopManager)
    manager.config = config
    manager.reward_model_manager = None
    manager.reward_manager_cls = resolve_reward_manager_cls(config)
    manager.reward_loop_workers = [InProcessWorker(worker, loop) for worker in workers]
    monkeypatch.setattr(
        verl_reward_loop.ray, "get", lambda futures: [future.result() for future in futures]
    )
    return manager


async def test_compute_rm_score_pads_chunks_and_assembles(
    stack: RunningStack, base_config: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 samples over 3 workers: verl pads with copies of the first rows, scored concurrently.
    config = loop_config(base_config, manager_kwargs(stack), num_workers=3)
    workers = [RewardLoopWorker(config) for _ in range(3)]
    manager = in_process_manager(config, workers, monkeypatch)
    cls = manager.reward_manager_cls
    calls: list[str] = []
    run_single = cls.run_single

    async def counted(self: Any, data: Any) -> dict[str, Any]:
        calls.append(str(data.non_tensor_batch["extra_info"][0]["episode_id"]))
        return await run_single(self, data)

    monkeypatch.setattr(cls, "run_single", counted)
    played = await play_batch(stack, "rm")
    batch = verl_batch(played, global_steps=4)
    try:
        reward = await asyncio.to_thread(manager.compute_rm_score, batch)
    finally:
        for worker in workers:
            await close_worker(worker)
    # The two padding copies re-scored samples 0 and 1 concurrently: idempotent, same receipts.
    episode_ids = [info["episode_id"] for info in played.extra_infos]
    assert sorted(calls) == sorted([*episode_ids, *episode_ids[:2]])
    check_placement(reward.batch["rm_scores"], batch, [1.0, 1.0, 1.0, -1.0])
    columns = {
        key: list(reward.non_tensor_batch[key]) for key in reward.meta_info["reward_extra_keys"]
    }
    check_columns(columns, played)


async def test_unreachable_worker_leaves_groups_constant_and_flagged(
    base_config: DictConfig,
) -> None:
    kwargs = {
        "worker_target": f"127.0.0.1:{free_port()}",
        "token": "t",
        "worker_public_key": bytes(range(32)).hex(),
        "reward_contract_digest": "sha256:" + "0" * 64,
        "policy_checkpoint_id": "policy.checkpoint.verl.0001",
        "timeout_seconds": 2.0,
        "policy_update": 1,
    }
    config = loop_config(base_config, kwargs)
    worker = RewardLoopWorker(config)
    played = Played(
        extra_infos=[{"episode_id": f"episode.loop.gone.{index}"} for index in range(4)],
        uids=["g0", "g0", "g1", "g1"],
        expected=[],
        unscored=[],
        group_unscored=[],
    )
    batch = verl_batch(played, global_steps=None)
    try:
        outputs = await worker.compute_score_batch(batch)
    finally:
        await close_worker(worker)
    scores = [output["reward_score"] for output in outputs]
    assert scores == [None] * 4
    rm_scores = worker.reward_manager.assemble_rm_scores(batch, scores)
    check_placement(rm_scores, batch, [ALL_UNSCORED_GROUP_REWARD] * 4)
    columns = extra_columns(outputs)
    assert set(columns) == LOOP_COLUMNS
    assert columns["reward_unscored"] == [True] * 4
    assert columns["reward_error"] == ["unavailable"] * 4
    assert columns["reward_outcome"] == ["ERROR"] * 4
    assert columns["reward_receipt_id"] == [""] * 4


async def test_require_certified_stops_on_an_expired_certificate(
    stack: RunningStack, base_config: DictConfig
) -> None:
    # The seeded certificate expires after 1000 policy updates: at 5000 it is not current.
    worker = RewardLoopWorker(loop_config(base_config, manager_kwargs(stack)))
    played = await play_batch(stack, "expired")
    try:
        with pytest.raises(CertificationRefused, match="EXPIRED"):
            await worker.compute_score_batch(verl_batch(played, global_steps=5000))
    finally:
        await close_worker(worker)


def test_registry_source_resolves_the_same_class(base_config: DictConfig) -> None:
    cls = register_with_verl_reward_loop()
    assert register_with_verl_reward_loop() is cls
    config = loop_config(base_config, {})
    with open_dict(config):
        config.reward.reward_manager.source = "register"
        config.reward.reward_manager.name = DEFAULT_NAME
    assert resolve_reward_manager_cls(config) is cls


def test_assembly_refuses_an_episode_id_repeated_across_samples() -> None:
    # A dataset column copied to every rollout.n sample: each run_single would take it for a
    # re-score of one episode, so the driver's whole batch is where it is refused (R-T-4).
    rows = Played(
        extra_infos=[{"episode_id": "episode.dataset.row.0"}, {"episode_id": "episode.row.1"}],
        uids=["uid-0", "uid-1"],
        expected=[],
        unscored=[],
        group_unscored=[],
    )
    batch = verl_batch(rows, global_steps=1).repeat(repeat_times=2, interleave=True)
    with pytest.raises(ValidationError, match="R-T-4"):
        reward_loop_manager_class().assemble_rm_scores(batch, [1.0, 1.0, 0.0, 0.0])


async def test_a_paused_boundary_stops_compute_rm_score_with_the_audit_named(
    stack: RunningStack,
    base_config: DictConfig,
    integrity_control: ControlStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The workers score one sample at a time with no capture of their own; the driver's
    # assemble_rm_scores hands the whole batch to ONE capture and the gate (R-I-3, R-I-8).
    # Four records and no sentinel: incomplete_evidence, which pauses like a failure.
    config = loop_config(base_config, manager_kwargs(stack), num_workers=3)
    workers = [RewardLoopWorker(config) for _ in range(3)]
    manager = in_process_manager(config, workers, monkeypatch)
    tokenizer = char_tokenizer()
    binding = await create_binding(integrity_control)
    played = await play_batch(stack, "gate")
    batch = verl_batch(played, global_steps=2)
    letters = tokenizer.convert_tokens_to_ids(list(RESPONSE))
    batch.batch["responses"][:, :] = torch.tensor(letters[: batch.batch["responses"].shape[1]])
    try:
        buffer = tmp_path / "buffer"
        with driver_gate(
            integrity_control, binding, buffer, tokenizer=tokenizer, install=True
        ) as made:
            with pytest.raises(IntegrityHalted) as caught:
                await asyncio.to_thread(manager.compute_rm_score, batch)
            audits = await asyncio.to_thread(made.client.list_audits, run_id=made.capture.run_id)
    finally:
        for worker in workers:
            await close_worker(worker)
    assert all(worker.reward_manager.capture is None for worker in workers)
    # verl's two padding copies are cut before assembly: four rows, each worker's own score.
    rows = made.capture.last_rows
    assert [row.episode_id for row in rows] == [info["episode_id"] for info in played.extra_infos]
    assert [row.optimizer_raw for row in rows] == [1.0, None, 1.0, -1.0]
    assert [row.output_digest for row in rows] == [
        output_digest(RESPONSE[:length]) for length in RESPONSE_LENGTHS
    ]
    check_paused(made.gate.gate, caught, audits, boundary=2)
