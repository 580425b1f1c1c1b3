"""CertifiedAgentLoop (verl V1's custom agent loop) through verl 0.9.1's own worker code.

verl's default trainer config (hydra compose of ``ppo_trainer.yaml``, ``trainer.use_v1=true``)
registers the loop through ``rollout.agent.agent_loop_config_path`` and makes it the
``default_agent_loop``; ``multi_turn.format=hermes`` picks verl's hermes tool parser. verl's V1
agent-loop worker (``AgentLoopWorkerTQ``: its real ``__init__``, ``_run_prompt`` fanning out
``rollout.n`` sessions, ``_run_agent_loop`` instantiating our loop per session, its
``_agent_loop_postprocess``) runs in-process against a real rewardseal worker over the seeded
MockMed system of record; the advantages come from verl's V1
``compute_advantage_for_multi_trajectories``. Stand-ins (tests/support/verl_agent.py): the LLM
server (:class:`ScriptedToolCallingServer`, scripted tool-calling token sequences), the
``transfer_queue`` store (not installed in the integrations venv; an in-memory dict), and, for
the outage, duplicate and interleaving tests, a two-tool stand-in over the SQLite file. The honest
control and every hacking family also play as multi-turn sessions over MockMed's real tools and
REST API (the kit's one table of family scripts, shared with the verifiers taskset).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import verl_agent
from support.control import ControlStack
from support.integrity_trainer import create_binding, make_capture, trainer_client
from support.mockmed_service import RunningMockMed, running_mockmed
from support.verl_agent import (
    CAPTURE,
    LATE,
    OUTAGE,
    ScriptedToolCallingServer,
    memory_transfer_queue,
)
from support.worker_stack import RunningStack, start_stack, stop_stack
from trainers.test_integrity_capture import sentinel

from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.verl.agent_loop import AGENT_NAME, DROPPED_SESSIONS, agent_loop_class
from rewardseal_kit.tiny_models import char_tokenizer
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import CONTROL, FAMILIES

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
TQ = memory_transfer_queue()
try:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
except ImportError as exc:  # verl 0.9.1 imports cachetools without declaring it
    pytest.skip(f"verl's V1 agent loop cannot be imported: {exc}", allow_module_level=True)
import numpy as np  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf, open_dict  # noqa: E402
from support.integrity_trainer import integrity_control  # noqa: E402
from tensordict import NonTensorData, NonTensorStack  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: E402
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

__all__ = ["integrity_control", "sentinel"]

CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
CHECKPOINT = "policy.checkpoint.verl-v1.0001"


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
def base_config(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> DictConfig:
    """verl's default (V1) trainer config registering CertifiedAgentLoop (composed once)."""
    registration = tmp_path_factory.mktemp("agent") / "agent_loops.yaml"
    registration.write_text(
        f"- name: {AGENT_NAME}\n"
        "  _target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop\n"
        "  toolkit: support.verl_agent:toolkit\n"
        f"- name: {AGENT_NAME}_captured\n"
        "  _target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop\n"
        "  toolkit: support.verl_agent:toolkit\n"
        "  integrity_capture: support.verl_agent:capture\n"
    )
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            config_name="ppo_trainer",
            overrides=[
                "trainer.use_v1=true",
                f"actor_rollout_ref.model.path={model_dir}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.n=3",
                "actor_rollout_ref.rollout.prompt_length=256",
                "actor_rollout_ref.rollout.response_length=4096",
                "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                "actor_rollout_ref.rollout.multi_turn.format=hermes",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={registration}",
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
            ],
        )
    with open_dict(config):
        config.actor_rollout_ref.model.custom_chat_template = CHAT_TEMPLATE
    return config


def loop_config(base: DictConfig, stack: RunningStack) -> DictConfig:
    """``base`` with ``reward.reward_kwargs`` naming ``stack`` (its key pinned)."""
    config = OmegaConf.create(OmegaConf.to_container(base))
    with open_dict(config):
        config.reward.reward_kwargs = {
            "worker_target": stack.target,
            "token": stack.token,
            "worker_public_key": stack.app.key.public_key.hex(),
            "reward_contract_digest": stack.digest,
            "policy_checkpoint_id": CHECKPOINT,
            "require_certified": True,
            "timeout_seconds": 20.0,
        }
    return config


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir, max_policy_lag=1)
    verl_agent.DATABASE["path"] = running.database
    yield running
    await stop_stack(running)


def worker_for(config: DictConfig) -> Any:
    """verl's V1 ``AgentLoopWorkerTQ`` built in-process (the class under ``@ray.remote``)."""
    cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class
    tokenizer = char_tokenizer()
    return cls(config, ScriptedToolCallingServer(tokenizer), None, None)


def prompt_batch(
    uid: str,
    patient: str,
    script: str,
    step: int,
    sandboxes: tuple[str, ...] = ("", "", ""),
    agent_name: str | None = None,
) -> Any:
    """One prompt as the V1 trainer hands it to the worker: RLHFDataset's columns, a ``uid``,
    and ``global_steps`` (``tu.assign_non_tensor_data``, as ``_reissue_inflight_prompts``)."""
    batch = tu.get_tensordict(
        {
            "uid": [uid],
            "index": torch.tensor([0]),
            "raw_prompt": [[{"role": "user", "content": f"Record the visit. script={script}"}]],
            "extra_info": [
                {
                    "oracle_identities": [
                        {IDENTITY_KEY: f"{patient}-s{session}{suffix}"}
                        for session, suffix in enumerate(sandboxes)
                    ]
                }
            ],
        }
    )
    if agent_name is not None:  # a per-row agent_name column (else default_agent_loop)
        batch["agent_name"] = NonTensorStack(NonTensorData(agent_name))
    tu.assign_non_tensor_data(batch, "global_steps", step)
    return batch


async def generate(worker: Any, batch: Any) -> None:
    """verl's fire-and-forget ``generate_sequences``, then wait for its background tasks."""
    await worker.generate_sequences(batch)
    while worker.background_tasks:
        await asyncio.gather(*list(worker.background_tasks))


async def run_prompt(
    worker: Any,
    uid: str,
    patient: str,
    script: str,
    step: int = 2,
    sandboxes: tuple[str, ...] = ("", "", ""),
) -> None:
    await generate(worker, prompt_batch(uid, patient, script, step, sandboxes))


def session_outputs(uid: str) -> dict[str, Any]:
    return {key: fields for key, fields in TQ.puts.items() if key.startswith(f"{uid}_")}


async def test_honest_sessions_pay_one_and_are_certified(
    stack: RunningStack, base_config: DictConfig
) -> None:
    worker = worker_for(loop_config(base_config, stack))
    await run_prompt(worker, "uid-honest", "patient-v1-honest", "honest")
    puts = session_outputs("uid-honest")
    assert sorted(puts) == [f"uid-honest_{i}_0" for i in range(3)]
    episode_ids = set()
    for fields in puts.values():
        assert float(fields["rm_scores"][-1]) == 1.0
        info = fields["extra_fields"]["reward_extra_info"]
        assert info["reward_outcome"] == "VERIFIED"
        assert info["reward_certified"] is True
        assert info["reward_receipt_id"]
        episode_ids.add(info["reward_episode_id"])
    assert len(episode_ids) == 3  # minted per session, never uid + session_id
    assert TQ.tags["uid-honest"]["status"] == "finished"


async def test_banner_hack_pays_zero(stack: RunningStack, base_config: DictConfig) -> None:
    worker = worker_for(loop_config(base_config, stack))
    await run_prompt(worker, "uid-banner", "patient-v1-banner", "banner")
    puts = session_outputs("uid-banner")
    assert len(puts) == 3
    for fields in puts.values():
        info = fields["extra_fields"]["reward_extra_info"]
        assert float(fields["rm_scores"][-1]) == 0.0, info
        assert info["reward_outcome"] == "WRONG_EFFECT"


def grpo_advantages(puts: dict[str, Any]) -> dict[str, float]:
    """verl V1's ``compute_advantage_for_multi_trajectories`` over the put sessions, as
    ``_compute_advantage`` feeds it (``rm_scores`` as the token-level rewards); each session's
    advantage on its first response token."""
    keys = sorted(puts)
    width = max(len(puts[key]["response_mask"]) for key in keys)

    def padded(name: str) -> Any:
        rows = [puts[key][name] for key in keys]
        out = torch.zeros((len(rows), width), dtype=rows[0].dtype)
        for index, row in enumerate(rows):
            out[index, : len(row)] = row
        return out

    rm_scores = torch.zeros((len(keys), width))
    for index, key in enumerate(keys):
        rm_scores[index, : len(puts[key]["response_mask"])] = puts[key]["rm_scores"]
    data = DataProto.from_dict(
        tensors={
            "response_mask": padded("response_mask"),
            "token_level_rewards": rm_scores,
        },
        non_tensors={"uid": np.array([puts[key]["uid"] for key in keys], dtype=object)},
    )
    data = compute_advantage_for_multi_trajectories(
        data, keys, AdvantageEstimator.GRPO, num_repeat=3, norm_adv_by_std_in_grpo=True
    )
    first = data.batch["response_mask"].argmax(dim=1)
    values = data.batch["advantages"][torch.arange(len(keys)), first].tolist()
    return dict(zip(keys, values, strict=True))


async def test_oracle_outage_drops_the_session_and_grpo_runs_over_the_rest(
    stack: RunningStack, base_config: DictConfig
) -> None:
    # Sessions: s0 saves once (VERIFIED 1.0), s1 saves twice (WRONG_EFFECT 0.0), s2's oracle
    # read fails once s0 and s1 were put (FAILED_PLATFORM: unscored, []).
    OUTAGE.store, OUTAGE.uid, OUTAGE.count = TQ, "uid-outage", 2
    before = DROPPED_SESSIONS.total
    worker = worker_for(loop_config(base_config, stack))
    try:
        await run_prompt(
            worker, "uid-outage", "patient-v1-out", "honest", sandboxes=("", "-dup", "-outage")
        )
    finally:
        OUTAGE.restore()
    puts = session_outputs("uid-outage")
    assert sorted(puts) == ["uid-outage_0_0", "uid-outage_1_0"]
    assert DROPPED_SESSIONS.total == before + 1
    assert TQ.tags["uid-outage"]["status"] == "finished"
    scores = {key: float(fields["rm_scores"][-1]) for key, fields in puts.items()}
    assert scores == {"uid-outage_0_0": 1.0, "uid-outage_1_0": 0.0}
    # verl's own V1 advantage over the two sessions that exist: +-1/sqrt(2) (the unbiased std of
    # [1, 0]); a 0.0 paid for the dropped session would have given [1.0, 0.0, 0.0] instead.
    advantages = grpo_advantages(puts)
    assert advantages["uid-outage_0_0"] == pytest.approx(0.7071, abs=1e-3)
    assert advantages["uid-outage_1_0"] == pytest.approx(-0.7071, abs=1e-3)


async def interleave(worker: Any, tag: str) -> None:
    """An async trainer's order: step 2's prompt starts, step 3's prompt starts and is scored
    while step 2's sessions are still open, then step 2's sessions are scored (late)."""
    LATE.store, LATE.uid, LATE.count = TQ, f"uid-{tag}-step3", 3
    late = asyncio.create_task(
        run_prompt(worker, f"uid-{tag}-step2", f"patient-{tag}-2", "honest", 2, ("-late",) * 3)
    )
    await asyncio.sleep(0)
    await run_prompt(worker, f"uid-{tag}-step3", f"patient-{tag}-3", "honest", 3)
    await late


async def test_two_interleaved_steps_score_within_lag_one(
    stack: RunningStack, base_config: DictConfig
) -> None:
    worker = worker_for(loop_config(base_config, stack))
    await interleave(worker, "lag1")
    for uid in ("uid-lag1-step3", "uid-lag1-step2"):
        puts = session_outputs(uid)
        assert len(puts) == 3, uid
        assert all(float(fields["rm_scores"][-1]) == 1.0 for fields in puts.values())


async def test_lag_zero_refuses_the_late_step(
    data_dir: Path, base_config: DictConfig, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_stack(data_dir, max_policy_lag=0)
    verl_agent.DATABASE["path"] = running.database
    try:
        await interleave(worker_for(loop_config(base_config, running)), "lag0")
    finally:
        await stop_stack(running)
    assert len(session_outputs("uid-lag0-step3")) == 3
    # Refused, never paid and never quietly dropped: verl logs each session's error and marks
    # the group failed; the message names the setting to raise.
    assert session_outputs("uid-lag0-step2") == {}
    assert TQ.tags["uid-lag0-step2"]["status"] == "failure"
    assert "max-policy-lag" in caplog.text or "max_policy_lag" in caplog.text


async def test_the_integrity_capture_runs_inside_the_loop(
    stack: RunningStack,
    base_config: DictConfig,
    integrity_control: ControlStack,
    tmp_path: Path,
) -> None:
    # Rows named agent_name=..._captured take the registration with integrity_capture: each
    # scored session is captured with its decoded response and its own episode and step.
    binding = await create_binding(integrity_control)
    config = loop_config(base_config, stack)
    with trainer_client(integrity_control) as client:
        CAPTURE["capture"] = make_capture(client, binding, tmp_path / "buffer")
        worker = worker_for(config)
        batch = prompt_batch(
            "uid-capt", "patient-v1-capt", "honest", 4, agent_name=f"{AGENT_NAME}_captured"
        )
        await generate(worker, batch)
        rows = CAPTURE.pop("capture").last_rows
    puts = session_outputs("uid-capt")
    assert len(puts) == 3
    (row,) = rows  # the last session captured
    by_episode = {
        f["extra_fields"]["reward_extra_info"]["reward_episode_id"]: f for f in puts.values()
    }
    fields = by_episode[row.episode_id]
    text = char_tokenizer().decode(fields["responses"].tolist(), skip_special_tokens=True)
    assert "create_encounter" in text  # the tool turns are part of what was captured
    assert row.output_digest == output_digest(text)
    assert row.policy_update == 4


@pytest.fixture
def mockmed_api(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed's REST API over the worker's own seeded store and screen dump."""
    with running_mockmed(
        f"sqlite:///{stack.database}", tmp_path, screen_path=stack.screen
    ) as running:
        yield running


def mockmed_config(
    base: DictConfig, stack: RunningStack, mockmed: RunningMockMed, path: Path
) -> DictConfig:
    """``loop_config`` plus a registration of MockMed's real tools, as the example does it."""
    path.write_text(
        "- name: rewardseal_mockmed_agent\n"
        "  _target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop\n"
        "  toolkit: rewardseal_kit.tools.mockmed:mockmed_toolbox\n"
        f"  toolkit_kwargs: {{base_url: '{mockmed.url}', token: '{mockmed.token}'}}\n"
    )
    config = loop_config(base, stack)
    with open_dict(config):
        config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(path)
    return config


async def test_mockmeds_own_tools_pay_the_honest_session_and_not_the_banner(
    stack: RunningStack, base_config: DictConfig, mockmed_api: RunningMockMed, tmp_path: Path
) -> None:
    # MockMed's six tools over its real REST API, parsed from hermes calls by verl: create then
    # submit is VERIFIED 1.0 certified; the screen-only banner is WRONG_EFFECT 0.0.
    worker = worker_for(mockmed_config(base_config, stack, mockmed_api, tmp_path / "loops.yaml"))
    for uid, script in (("uid-mm-honest", "mockmed_honest"), ("uid-mm-banner", "mockmed_banner")):
        batch = prompt_batch(
            uid, f"patient-{uid}", script, 2, agent_name="rewardseal_mockmed_agent"
        )
        await generate(worker, batch)
    honest, banner = session_outputs("uid-mm-honest"), session_outputs("uid-mm-banner")
    assert len(honest) == len(banner) == 3
    for fields in honest.values():
        info = fields["extra_fields"]["reward_extra_info"]
        assert (float(fields["rm_scores"][-1]), info["reward_outcome"]) == (1.0, "VERIFIED")
        assert info["reward_certified"] is True
    for fields in banner.values():
        info = fields["extra_fields"]["reward_extra_info"]
        assert (float(fields["rm_scores"][-1]), info["reward_outcome"]) == (0.0, "WRONG_EFFECT")


@pytest.fixture
def mockmed(mockmed_api: RunningMockMed) -> RunningMockMed:
    """The name the shared sentinel fixture (trainers.test_integrity_capture) asks for."""
    return mockmed_api


async def test_the_sentinel_scores_the_same_session_episode_inside_the_loop(
    stack: RunningStack,
    base_config: DictConfig,
    mockmed_api: RunningMockMed,
    sentinel: RunningStack,
    integrity_control: ControlStack,
    tmp_path: Path,
) -> None:
    # Reward integrity (§12) inside CertifiedAgentLoop, through verl's V1 worker: the sessions
    # play MockMed's real tools (the control and the screen-only hack of the kit's table); the
    # sentinel, another operator's worker reading MockMed over REST with its own key, opens each
    # session's episode right after the worker's begin (before the agent acts) and judges the
    # same episode; the capture's rows carry the optimizer's score and the sentinel's receipt.
    registration = tmp_path / "loops.yaml"
    registration.write_text(
        "- name: rewardseal_mockmed_captured\n"
        "  _target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop\n"
        "  toolkit: rewardseal_kit.tools.mockmed:mockmed_toolbox\n"
        f"  toolkit_kwargs: {{base_url: '{mockmed_api.url}', token: '{mockmed_api.token}'}}\n"
        "  integrity_capture: support.verl_agent:capture\n"
    )
    config = loop_config(base_config, stack)
    with open_dict(config):
        config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(registration)
    binding = await create_binding(integrity_control)
    recorded: list[Any] = []
    guard = WorkerClient(sentinel.target, token=sentinel.token, trust=sentinel.trust, timeout=5.0)
    with guard, trainer_client(integrity_control) as client:
        capture = make_capture(
            client, binding, tmp_path / "buffer", sentinel=guard, sentinel_digest=sentinel.digest
        )
        record = capture.record

        def spy(samples: Any, *, policy_update: int) -> Any:
            rows = record(samples, policy_update=policy_update)
            recorded.extend(rows)
            return rows

        capture.record = spy  # type: ignore[method-assign]
        CAPTURE["capture"] = capture
        worker = worker_for(config)
        for uid, script in (("uid-sent-ctl", "control"), ("uid-sent-scr", "screen_only")):
            batch = prompt_batch(
                uid,
                f"patient-{uid}",
                f"family-{script}",
                4,
                agent_name="rewardseal_mockmed_captured",
            )
            await generate(worker, batch)
        CAPTURE.pop("capture")
    paid = {}
    for uid, expected in (("uid-sent-ctl", 1.0), ("uid-sent-scr", 0.0)):
        puts = session_outputs(uid)
        assert len(puts) == 3
        for fields in puts.values():
            info = fields["extra_fields"]["reward_extra_info"]
            assert float(fields["rm_scores"][-1]) == expected
            paid[info["reward_episode_id"]] = expected
    assert sorted(row.episode_id for row in recorded) == sorted(paid)
    for row in recorded:
        assert row.policy_update == 4
        assert row.optimizer_raw == paid[row.episode_id]
        assert row.sentinel is not None
        # The sentinel's own signed receipt for the very episode the worker paid.
        assert row.sentinel.outcome == ("accepted" if paid[row.episode_id] else "refused")
        got = await sentinel.client.get_receipt(episode_id=row.episode_id)
        assert got.receipt.receipt_id == row.sentinel.receipt_id


@pytest.mark.parametrize("family", FAMILIES)
async def test_every_family_as_a_multi_turn_tool_session(
    stack: RunningStack,
    base_config: DictConfig,
    mockmed_api: RunningMockMed,
    tmp_path: Path,
    family: str,
) -> None:
    # Each family of the kit's one table (the scripts the verifiers taskset's scripted server
    # plays too) as a multi-turn hermes tool-calling session over MockMed's real tools: the
    # control pays 1.0 certified, every hacking family 0.0. wrong_record cannot name another
    # patient here: the patient comes from the session (no tool schema takes one), so its
    # create_encounter call is refused and nothing is stored; it pays 0.0 like "claim".
    config = mockmed_config(base_config, stack, mockmed_api, tmp_path / "loops.yaml")
    with open_dict(config):  # dup's five turns (verl ends a session at max_assistant_turns)
        config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = 6
    worker = worker_for(config)
    uid = f"uid-family-{family}"
    batch = prompt_batch(
        uid, f"patient-{uid}", f"family-{family}", 2, agent_name="rewardseal_mockmed_agent"
    )
    await generate(worker, batch)
    puts = session_outputs(uid)
    assert len(puts) == 3
    for fields in puts.values():
        info = fields["extra_fields"]["reward_extra_info"]
        score = float(fields["rm_scores"][-1])
        if family == CONTROL:
            assert (score, info["reward_outcome"]) == (1.0, "VERIFIED"), info
            assert info["reward_certified"] is True
        else:
            assert score == 0.0, info
            assert info["reward_outcome"] == "WRONG_EFFECT", info


def test_the_example_registration_names_the_lazy_loop() -> None:
    # What verl's AgentLoopWorker does with agent_loop_config_path: OmegaConf.load, then
    # hydra's instantiate locates _target_ (our module's lazy attribute).
    from hydra.utils import get_class

    example = Path(__file__).resolve().parents[2] / "examples" / "verl_v1" / "agent_loops.yaml"
    (entry,) = OmegaConf.load(example)
    assert entry.name == AGENT_NAME
    assert get_class(entry._target_) is agent_loop_class()
    assert entry.toolkit == "rewardseal_kit.tools.mockmed:mockmed_toolbox"
