"""CertifiedAgentLoopManager through verl 0.9.1's real agent-loop code, against a real worker.

verl's default trainer config (hydra compose of ``ppo_trainer.yaml``, ``trainer.use_v1=false``:
the ``RayPPOTrainer`` of ``ray_trainer.py``) names our manager in
``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` and our reward-loop manager in
``reward.reward_manager``. Everything below the LLM is verl's own code run in-process: the
``AgentLoopWorker`` (built by its real ``__init__`` from that config; a stub LLM client answers
``generate`` with canned token ids), verl's ``single_turn_agent`` loop, ``_agent_loop_postprocess``
and ``_compute_score``, which sends each finished sample to a real ``RewardLoopWorker`` running
``CertifiedRewardLoopManager.run_single`` against a real rewardseal worker; the manager's
``generate_sequences`` is verl's (chunking, ``DataProto.concat``, metrics) plus our fill. What is
not verl's: Ray (the worker handles are in-process objects with the ``.remote`` a Ray handle
has) and the LLM server. Runs in .venv-integrations (``make test-integrations``); skipped
without verl, or without ``cachetools``, which verl 0.9.1's agent loop imports (through
``verl.workers.rollout.router``) but does not declare.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.control import ControlStack
from support.integrity_trainer import check_paused, create_binding, driver_gate
from support.verl_episodes import Played, manager_kwargs, play_batch, start_default_scoring_stack
from support.worker_stack import RunningStack, stop_stack

from rewardseal.core.errors import IntegrityHalted, ValidationError
from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.verl import ALL_UNSCORED_GROUP_REWARD
from rewardseal.trainers.verl.streaming import (
    MANAGER_FQN,
    WORKER_CLASS_NAME,
    agent_loop_manager_class,
    agent_loop_worker_class,
    fill_streamed_rewards,
    reward_positions,
)
from rewardseal_kit.tiny_models import SPECIAL, char_tokenizer
from rewardseal_mockmed import contract as mockmed
from rewardseal_mockmed.seeding import write_encounter

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
try:
    from verl.experimental.agent_loop import agent_loop as verl_agent_loop
except ImportError as exc:  # verl 0.9.1 imports cachetools without declaring it
    pytest.skip(f"verl's agent loop cannot be imported: {exc}", allow_module_level=True)
import numpy as np  # noqa: E402
import ray  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402
from support.integrity_trainer import integrity_control  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402
from verl.trainer.ppo.reward import extract_reward  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.import_utils import load_class_from_fqn  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

__all__ = ["integrity_control"]

EOS = SPECIAL.index("<eos>")
CHAT_TEMPLATE = "".join(
    [
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "{% if add_generation_prompt %}>{% endif %}",
    ]
)
PROMPT_LENGTH = 8
RESPONSE_LENGTH = 6
POLICY_UPDATE = 3
C = ALL_UNSCORED_GROUP_REWARD


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A character-level tokenizer and a one-layer Llama config, as verl's HFModelConfig reads."""
    from transformers import LlamaConfig

    tokenizer = char_tokenizer()
    target = tmp_path_factory.mktemp("model")
    tokenizer.save_pretrained(target)
    LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def base_config(model_dir: Path) -> DictConfig:
    """verl's default PPO trainer config naming both managers (composed once: about 8 s)."""
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            config_name="ppo_trainer",
            overrides=[
                "trainer.use_v1=false",
                "reward.reward_manager.source=importlib",
                "reward.reward_manager.name=CertifiedRewardLoopManager",
                "reward.reward_manager.module.path=pkg://rewardseal.trainers.verl.loop",
                f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER_FQN}",
                f"actor_rollout_ref.model.path={model_dir}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.n=2",
                f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
                f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            ],
        )
    with open_dict(config):
        config.actor_rollout_ref.model.custom_chat_template = CHAT_TEMPLATE
    return config


def streaming_config(base: DictConfig, reward_kwargs: dict[str, Any], workers: int) -> DictConfig:
    """A copy of ``base`` with ``reward.reward_kwargs`` and the number of agent-loop workers."""
    config = OmegaConf.create(OmegaConf.to_container(base))
    with open_dict(config):
        config.reward.reward_kwargs = reward_kwargs
        config.actor_rollout_ref.rollout.agent.num_workers = workers
    return config


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """A worker over the default-scoring MockMed bundle (VERIFIED 1.0, WRONG_EFFECT -1.0)."""
    running = await start_default_scoring_stack(data_dir)
    yield running
    await stop_stack(running)


class StubLLM:
    """The LLM server client's ``generate``: canned ids, ``2 + priority % 4`` response tokens."""

    async def generate(self, *, priority: int = 0, **_: Any) -> TokenOutput:
        tokens = [50 + step for step in range(1 + priority % 4)]
        return TokenOutput(token_ids=[*tokens, EOS], stop_reason="completed")


def response_length(row: int) -> int:
    """The response length of output row ``row`` (its priority is its row in the batch)."""
    return 2 + row % 4


class InProcessRewardWorker:
    """A ``RewardLoopWorker`` behind the ``.compute_score.remote`` a Ray handle has."""

    def __init__(self, worker: RewardLoopWorker) -> None:
        self.compute_score = SimpleNamespace(remote=worker.compute_score)


class InProcessAgentWorker:
    """An ``AgentLoopWorker`` behind the ``.generate_sequences.remote`` a Ray handle has."""

    def __init__(self, worker: Any) -> None:
        self.generate_sequences = SimpleNamespace(remote=worker.generate_sequences)


def build_manager(
    manager_cls: type[Any],
    worker_cls: type[Any],
    config: DictConfig,
    reward_handles: list[Any] | None,
) -> Any:
    """verl's ``__init__`` of the manager, its workers in-process instead of Ray actors."""
    manager = manager_cls(
        config=config,
        llm_client=StubLLM(),
        teacher_client=None,
        reward_loop_worker_handles=reward_handles,
    )
    count = config.actor_rollout_ref.rollout.agent.num_workers
    manager.agent_loop_workers = [
        InProcessAgentWorker(worker_cls(config, StubLLM(), None, reward_handles))
        for _ in range(count)
    ]
    return manager


async def play_unscored_group(stack: RunningStack, tag: str) -> Played:
    """Two samples whose rows were written without a baseline read: both unscored."""
    extra_infos: list[dict[str, Any]] = []
    for index in range(2):
        patient = f"patient-verl-{tag}-c-{index}"
        write_encounter(stack.database, patient_id=patient, note="Follow-up in 2 weeks.")
        extra_infos.append(
            {
                "episode_id": f"episode.verl.{tag}.c.{index}",
                "oracle_identity": {mockmed.IDENTITY_KEY: patient},
            }
        )
    return Played(
        extra_infos=extra_infos,
        uids=[f"uid-{tag}-c"] * 2,
        expected=[C, C],
        unscored=[True, True],
        group_unscored=[True, True],
    )


def trainer_batches(played: Played) -> tuple[DataProto, DataProto]:
    """The dataset batch and the generation batch, as ``RayPPOTrainer.fit`` makes them.

    One prompt per uid group of ``played`` (RLHFDataset's columns), a fresh ``uid`` per prompt,
    verl's own ``_get_gen_batch``, then ``repeat(rollout.n, interleave=True)``. The samples'
    ``extra_info`` then carries the per-sample episode ids the rollout minted (R-T-4).
    """
    prompts = len(played.uids) // 2
    raw_prompts = np.empty(prompts, dtype=object)
    for row in range(prompts):
        raw_prompts[row] = [{"role": "user", "content": f"note {row}"}]
    batch = DataProto.from_dict(
        tensors={"dummy_tensor": torch.zeros((prompts, 1), dtype=torch.uint8)},
        non_tensors={
            "raw_prompt": raw_prompts,
            "index": np.arange(prompts),
            "data_source": np.array(["mockmed"] * prompts, dtype=object),
            "extra_info": np.array([{} for _ in range(prompts)], dtype=object),
        },
    )
    batch.non_tensor_batch["uid"] = np.array(
        [str(uuid.uuid4()) for _ in range(prompts)], dtype=object
    )
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)
    gen_batch.meta_info["global_steps"] = POLICY_UPDATE
    gen_batch = gen_batch.repeat(repeat_times=2, interleave=True)
    gen_batch.non_tensor_batch["extra_info"] = np.array(played.extra_infos, dtype=object)
    return batch, gen_batch


def reward_tokens(output: DataProto) -> list[float]:
    """Each row's value on its reward token (verl's placement)."""
    positions = reward_positions(output.batch)
    rows = torch.arange(len(output))
    values: list[float] = output.batch["rm_scores"][rows, positions].tolist()
    return values


def check_rewards(output: DataProto, expected: list[float]) -> None:
    """Each reward on its sample's last response token, nothing else, no NaN."""
    rm_scores = output.batch["rm_scores"]
    assert not torch.isnan(rm_scores).any()
    positions = reward_positions(output.batch).tolist()
    assert positions == [response_length(row) - 1 for row in range(len(expected))]
    assert reward_tokens(output) == expected
    assert rm_scores.sum(dim=-1).tolist() == expected
    assert torch.count_nonzero(rm_scores).item() == sum(value != 0 for value in expected)


async def test_worker_hands_nan_for_the_unscored_sample(
    stack: RunningStack, base_config: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One agent-loop chunk, the uid group [V, R]: verl's _postprocess sees NaN for R and
    # builds rm_scores; verl's own worker sees None and leaves rm_scores out.
    config = streaming_config(base_config, manager_kwargs(stack, policy_update=POLICY_UPDATE), 1)
    reward_worker = RewardLoopWorker(config)
    handles = [InProcessRewardWorker(reward_worker)]
    played = await play_batch(stack, "chunk")
    _, gen_batch = trainer_batches(played)
    gen_batch.non_tensor_batch["priority"] = np.arange(len(gen_batch))
    seen: list[list[float | None]] = []
    postprocess = AgentLoopWorker._postprocess

    def spied(self: Any, inputs: list[Any], **kwargs: Any) -> Any:
        seen.append([item.reward_score for item in inputs])
        return postprocess(self, inputs, **kwargs)

    monkeypatch.setattr(AgentLoopWorker, "_postprocess", spied)
    ours = agent_loop_worker_class()(config, StubLLM(), None, handles)
    base = AgentLoopWorker(config, StubLLM(), None, handles)
    try:
        output = await ours.generate_sequences(gen_batch.slice(0, 2))
        # Re-scoring the same episodes is idempotent (ALREADY_EXISTS, then GetReceipt).
        plain = await base.generate_sequences(gen_batch.slice(0, 2))
    finally:
        await reward_worker.reward_manager.aclose()
    assert seen[0][0] == 1.0
    assert math.isnan(float(seen[0][1] or 0.0))
    assert seen[1] == [1.0, None]
    # Ours: rm_scores with NaN on R's reward token, its extra info as run_single made it.
    values = reward_tokens(output)
    assert values[0] == 1.0
    assert math.isnan(values[1])
    assert reward_positions(output.batch).tolist() == [1, 2]
    assert "reward_unscored" in output.meta_info["reward_extra_keys"]
    assert list(output.non_tensor_batch["reward_unscored"]) == [False, True]
    assert list(output.non_tensor_batch["reward_outcome"]) == [
        "VERIFIED",
        "RECONCILIATION_REQUIRED",
    ]
    # verl's own worker: the chunk has no rm_scores and no reward_extra_keys (the gap).
    assert "rm_scores" not in plain.batch
    assert "reward_extra_keys" not in plain.meta_info
    with pytest.raises(KeyError):
        extract_reward(plain)
    # The driver's fill, called directly: it needs the uids, then R takes its mate's 1.0.
    with pytest.raises(ValidationError, match="uid"):
        fill_streamed_rewards(output, None)
    fill_streamed_rewards(output, list(gen_batch.non_tensor_batch["uid"][:2]))
    assert reward_tokens(output) == [1.0, 1.0]


@pytest.mark.parametrize("workers", [2, 6])
async def test_manager_fills_unscored_samples_from_their_uid_group(
    stack: RunningStack, base_config: DictConfig, workers: int
) -> None:
    # Groups [V, R | V, W | R, R]: 2 workers split group b over two chunks, 6 give every sample
    # its own chunk (the R chunks are all-unscored): the fill runs on the concatenated batch.
    tag = f"stream{workers}"
    config = streaming_config(
        base_config, manager_kwargs(stack, policy_update=POLICY_UPDATE), workers
    )
    reward_worker = RewardLoopWorker(config)
    handles = [InProcessRewardWorker(reward_worker)]
    both = await both_groups(stack, tag)
    batch, gen_batch = trainer_batches(both)
    uids = list(gen_batch.non_tensor_batch["uid"])
    manager_cls = load_class_from_fqn(MANAGER_FQN, "AgentLoopManager")
    manager = build_manager(manager_cls, agent_loop_worker_class(), config, handles)
    try:
        output = await manager.generate_sequences(gen_batch)
    finally:
        await reward_worker.reward_manager.aclose()
    expected = [1.0, 1.0, 1.0, -1.0, C, C]
    check_rewards(output, expected)
    assert len(set(uids)) == 3
    assert uids[0] == uids[1] != uids[2]
    assert "timing" in output.meta_info  # verl's own generate_sequences ran
    # What the trainer reads next: extract_reward, then the union with its repeated batch.
    reward_tensor, extra = extract_reward(output)
    assert reward_tensor.sum(dim=-1).tolist() == expected
    assert list(extra["reward_unscored"]) == both.unscored
    assert list(extra["reward_episode_id"]) == [info["episode_id"] for info in both.extra_infos]
    trained = batch.repeat(repeat_times=2, interleave=True).union(output)
    assert list(trained.non_tensor_batch["uid"]) == uids
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=trained.batch["rm_scores"],
        response_mask=trained.batch["response_mask"],
        index=trained.non_tensor_batch["uid"],
    )
    outcome = [advantages[row, response_length(row) - 1].item() for row in range(6)]
    # Group a (1.0 and the filled 1.0) and the all-unscored group c teach nothing.
    assert outcome[0] == outcome[1] == outcome[4] == outcome[5] == 0.0
    assert outcome[2] > 0 > outcome[3]


async def both_groups(stack: RunningStack, tag: str) -> Played:
    """Groups [V, R | V, W | R, R]: one unscored sample with a scored mate, one unscored group."""
    played = await play_batch(stack, tag)
    unscored = await play_unscored_group(stack, tag)
    return Played(
        extra_infos=played.extra_infos + unscored.extra_infos,
        uids=played.uids + unscored.uids,
        expected=played.expected + unscored.expected,
        unscored=played.unscored + unscored.unscored,
        group_unscored=played.group_unscored + unscored.group_unscored,
    )


async def test_a_paused_boundary_stops_the_streamed_batch_with_the_audit_named(
    stack: RunningStack, base_config: DictConfig, integrity_control: ControlStack, tmp_path: Path
) -> None:
    # The driver's generate_sequences hands the whole training batch to ONE capture (the
    # workers' own scores: NaN is unscored, never the fill) and the gate (R-I-3, R-I-8).
    # Six records and no sentinel: incomplete_evidence, which pauses like a failure.
    config = streaming_config(base_config, manager_kwargs(stack, policy_update=POLICY_UPDATE), 2)
    reward_worker = RewardLoopWorker(config)
    manager_cls = load_class_from_fqn(MANAGER_FQN, "AgentLoopManager")
    handles = [InProcessRewardWorker(reward_worker)]
    manager = build_manager(manager_cls, agent_loop_worker_class(), config, handles)
    both = await both_groups(stack, "sgate")
    _, gen_batch = trainer_batches(both)
    tokenizer = char_tokenizer()
    binding = await create_binding(integrity_control)
    try:
        buffer = tmp_path / "buffer"
        with driver_gate(
            integrity_control, binding, buffer, tokenizer=tokenizer, install=True
        ) as made:
            with pytest.raises(IntegrityHalted) as caught:
                await manager.generate_sequences(gen_batch)
            audits = await asyncio.to_thread(made.client.list_audits, run_id=made.capture.run_id)
    finally:
        await reward_worker.reward_manager.aclose()
    rows = made.capture.last_rows
    assert [row.episode_id for row in rows] == [info["episode_id"] for info in both.extra_infos]
    assert [row.optimizer_raw for row in rows] == [1.0, None, 1.0, -1.0, None, None]
    assert {row.policy_update for row in rows} == {POLICY_UPDATE}  # the batch's global_steps
    # Each row digests its decoded response (the stub's tokens before <eos>).
    assert [row.output_digest for row in rows] == [
        output_digest(tokenizer.decode(list(range(50, 51 + row % 4)))) for row in range(6)
    ]
    check_paused(made.gate.gate, caught, audits, boundary=POLICY_UPDATE)


async def test_without_our_classes_the_step_fails(
    stack: RunningStack, base_config: DictConfig
) -> None:
    # [V, R | V, W] over 2 workers: verl's own classes give one chunk rm_scores and the other
    # none, and DataProto.concat (TensorDict's torch.cat) refuses the mismatched keys with a
    # KeyError; ours pay [1, 1, 1, -1].
    config = streaming_config(base_config, manager_kwargs(stack, policy_update=POLICY_UPDATE), 2)
    reward_worker = RewardLoopWorker(config)
    handles = [InProcessRewardWorker(reward_worker)]
    played = await play_batch(stack, "gap")
    _, gen_batch = trainer_batches(played)
    base = build_manager(AgentLoopManager, AgentLoopWorker, config, handles)
    ours = build_manager(agent_loop_manager_class(), agent_loop_worker_class(), config, handles)
    try:
        with pytest.raises(KeyError, match="rm_scores"):
            await base.generate_sequences(gen_batch.slice(0, len(gen_batch)))
        output = await ours.generate_sequences(gen_batch)
    finally:
        await reward_worker.reward_manager.aclose()
    check_rewards(output, [1.0, 1.0, 1.0, -1.0])


async def test_without_reward_workers_the_reward_model_path_is_untouched(
    base_config: DictConfig,
) -> None:
    # No reward workers (a colocated reward model): every score is None on purpose, no chunk
    # gets rm_scores and the trainer's compute_rm_score scores the batch. Called the way
    # ray_trainer calls it: synchronously, with no running event loop (auto_await).
    config = streaming_config(base_config, {}, 2)
    played = Played(
        extra_infos=[{"episode_id": f"episode.rm.{index}"} for index in range(4)],
        uids=["uid-rm-a", "uid-rm-a", "uid-rm-b", "uid-rm-b"],
        expected=[],
        unscored=[],
        group_unscored=[],
    )
    _, gen_batch = trainer_batches(played)
    manager = build_manager(agent_loop_manager_class(), agent_loop_worker_class(), config, None)
    output = await asyncio.to_thread(manager.generate_sequences, gen_batch)
    assert len(output) == 4
    assert "rm_scores" not in output.batch
    assert fill_streamed_rewards(output, None) is output


def test_the_fqn_loads_with_verls_loader(base_config: DictConfig) -> None:
    # ray_trainer.py: rollout.get("agent", {}).get("agent_loop_manager_class"), then
    # load_class_from_fqn(fqn, "AgentLoopManager"); verl's dataclass schema has the key.
    rollout = base_config.actor_rollout_ref.rollout
    fqn = rollout.get("agent", {}).get("agent_loop_manager_class")
    assert fqn == MANAGER_FQN
    assert omega_conf_to_dataclass(rollout).agent.agent_loop_manager_class == MANAGER_FQN
    cls = load_class_from_fqn(fqn, "AgentLoopManager")
    assert cls is agent_loop_manager_class()
    assert issubclass(cls, AgentLoopManager)
    worker_cls = agent_loop_worker_class()
    assert issubclass(worker_cls, verl_agent_loop.AgentLoopWorker)
    assert cls.agent_loop_workers_class.__ray_actor_class__ is worker_cls
    # Ray ships the actor class by reference: a worker process imports it by name.
    assert load_class_from_fqn(f"{cls.__module__}.{WORKER_CLASS_NAME}") is worker_cls
    assert ray.cloudpickle.loads(ray.cloudpickle.dumps(worker_cls)) is worker_cls
    assert len(ray.cloudpickle.dumps(worker_cls)) < 200


async def test_a_repeated_episode_id_is_refused_before_the_rollout(
    base_config: DictConfig,
) -> None:
    # verl's repeat copies the prompt's extra_info to its rollout.n samples: every run_single
    # would take the copy for a re-score and pay the first receipt twice (R-T-4).
    config = streaming_config(base_config, {}, 2)
    played = Played(
        extra_infos=[{"episode_id": "episode.dup.0"}] * 2 + [{"episode_id": "episode.dup.1"}] * 2,
        uids=["uid-dup-a", "uid-dup-a", "uid-dup-b", "uid-dup-b"],
        expected=[],
        unscored=[],
        group_unscored=[],
    )
    _, gen_batch = trainer_batches(played)
    calls: list[int] = []

    async def generate(chunk: Any) -> Any:
        calls.append(len(chunk))
        raise AssertionError("the rollout ran")

    manager = build_manager(agent_loop_manager_class(), agent_loop_worker_class(), config, None)
    manager.agent_loop_workers = [
        SimpleNamespace(generate_sequences=SimpleNamespace(remote=generate))
    ]
    with pytest.raises(ValidationError, match="R-T-4") as caught:
        await manager.generate_sequences(gen_batch)
    assert caught.value.reason == "duplicate_episode_id"
    assert calls == []
    # A validation batch is padded with copies of its first rows by verl itself: not refused.
    gen_batch.meta_info["validate"] = True
    with pytest.raises(AssertionError, match="the rollout ran"):
        await manager.generate_sequences(gen_batch)
