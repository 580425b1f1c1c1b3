"""A real ``trl.GRPOTrainer`` run with CertifiedToolEpisodes as its ``environment_factory``.

Nothing is downloaded: the model is the tiny Llama and the tokenizer the character-level one
with TRL's copy of Qwen2.5's tool-calling chat template (``rewardseal_kit.tiny_models``). The
one stand-in is the policy's sampling: ``rewardseal_kit.scripted_tools.scripted_policy_trainer``
(named as such) replaces ``_generate_single_turn`` with a scripted policy that reads the
conversation TRL built so far and answers with the token ids of its next turn, a
``<tool_call>`` JSON or the closing text.
Everything else is TRL's own: the tool schemas rendered from the environment's methods, the
response parser, the tool-calling loop that runs the environment's tools on TRL's event loop,
the tool mask, the rewards, the group advantages and the optimizer step. The tools are the real
MockMed tools over a real MockMed; the worker reads its seeded store through the tier-2 oracle.

Two steps of two rows, two completions each, played from the kit's family table: the control
row (lookup_patient with no argument, create, submit) is paid 1.0, the screen_only row (the
"Saved" banner, nothing stored) 0.0; before step 1 is scored the worker goes away, and the
step's rewards are None (TRL's unscorable rows, advantage 0), never 0.0. TRL counts no tool
failure: a no-argument call parses to ``{}`` and the environment's method answers it (the
second test, with TRL's own parser). What ended the control after its first call before was
TRL's length rule, not the call: with all six tools' schemas in the prompt (the character-level
tokenizer spends a token per character), prompt and completion reached the tiny model's
``max_position_embeddings`` (4096), and TRL then rolls the tool answer back and leaves the loop
(``_tool_call_loop``'s ``overlong``), silently; hence 8192 here.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.trl.environment import CertifiedToolEpisodes
from rewardseal_kit.scripted_tools import scripted_policy_trainer
from rewardseal_kit.tiny_models import tiny_grpo_config, tiny_llama, tool_calling_tokenizer
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_session
from rewardseal_mockmed.contract import IDENTITY_KEY

# Only the integrations venv has trl (and torch, transformers, datasets, tokenizers).
pytest.importorskip("trl")

MAX_STEPS = 2
NUM_GENERATIONS = 2
BATCH = 4  # two rows, two completions each


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub: everything is built in code, and a download attempt fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(
        f"sqlite:///{stack.database}", tmp_path, screen_path=stack.screen
    ) as service:
        yield service


@pytest.mark.slow
async def test_grpo_trainer_with_tool_episodes_pays_the_honest_and_not_the_hack(
    stack: RunningStack, mockmed: RunningMockMed, tmp_path: Path
) -> None:
    from datasets import Dataset
    from trl import GRPOTrainer

    loop = asyncio.get_running_loop()
    tokenizer = tool_calling_tokenizer()
    model = tiny_llama(tokenizer, max_position_embeddings=8192)
    dataset = Dataset.from_list(
        [
            {
                "prompt": [
                    {
                        "role": "user",
                        "content": f"Create one Triage encounter. [script: {script}]",
                    }
                ],
                "oracle_identity": {IDENTITY_KEY: f"patient-trl-env-{script}"},
                "script": script,
            }
            for script in ("control", "screen_only")
        ]
    )
    client = WorkerClient(
        stack.target, token=stack.token, trust=stack.trust, timeout=5.0, retries=0
    )
    episodes = CertifiedToolEpisodes(
        client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=NUM_GENERATIONS,
        tools=MOCKMED_TOOLS,
        open_session=lambda identity: mockmed_session(
            mockmed.url, mockmed.token, identity[IDENTITY_KEY]
        ),
    )
    calls: list[dict[str, Any]] = []

    def tool_episodes(**kwargs: Any) -> list[float | None]:
        """The environment's reward, recorded; the worker goes away before step 1 is scored."""
        step = kwargs["trainer_state"].global_step
        if step == 1:
            asyncio.run_coroutine_threadsafe(stack.app.stop(), loop).result(timeout=30)
        rewards = episodes.reward(**kwargs)
        calls.append(
            {
                "step": step,
                "rewards": list(rewards),
                "scripts": list(kwargs["script"]),
                "columns": episodes.reward.metadata_columns(),
                # TRL pools the environments and resets them next step: read them now.
                "tools": [
                    [call["name"] for call in json.loads(env._transcript())]
                    for env in kwargs["environments"]
                ],
                "patients": [env._identity[IDENTITY_KEY] for env in kwargs["environments"]],
                "results": [
                    [call["result"] for call in json.loads(env._transcript())]
                    for env in kwargs["environments"]
                ],
            }
        )
        return rewards

    args = tiny_grpo_config(
        tmp_path / "grpo",
        max_steps=MAX_STEPS,
        batch=BATCH,
        num_generations=NUM_GENERATIONS,
        max_completion_length=1536,
    )
    args.max_tool_calling_iterations = 4
    trainer = scripted_policy_trainer(GRPOTrainer)(
        model=model,
        reward_funcs=[tool_episodes],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=episodes.environment,
    )
    try:
        await asyncio.to_thread(trainer.train)
    finally:
        client.close()

    assert trainer.state.global_step == MAX_STEPS
    assert [call["step"] for call in calls] == [0, 1]
    # TRL called the environment's tools: the scripted turns are tool calls then a closing text.
    assert any("create_encounter" in turn for turn in trainer.turns)
    first = calls[0]
    for index, script in enumerate(first["scripts"]):
        names = first["tools"][index]
        if script == "control":
            # lookup_patient takes no argument: TRL calls it with {} and it answers.
            assert names == ["lookup_patient", "create_encounter", "submit_encounter"]
            lookup = json.loads(first["results"][index][0])
            # TRL parsed the call's {} and called the environment's method: it answered for the
            # completion's own sandbox patient (nothing stored yet).
            assert lookup["patient_id"] == first["patients"][index]
            assert lookup["encounter_count"] == 0
            assert first["rewards"][index] == 1.0  # verified, certified, paid
        else:
            assert names == ["show_saved_banner"]
            assert first["rewards"][index] == 0.0  # the hack is scored and paid nothing
    assert first["columns"]["reward_unscored"] == [False] * BATCH
    assert all(first["columns"]["reward_certified"])
    # Step 1: the worker was away; every sample unscored, None to TRL, never 0.0.
    second = calls[1]
    assert second["rewards"] == [None] * BATCH
    assert second["columns"]["reward_unscored"] == [True] * BATCH
    logged = [e for e in trainer.state.log_history if "rewards/tool_episodes/mean" in e]
    # TRL counts a tool call that raised as a failure: none did, the no-argument one included.
    assert [entry["tools/failure_frequency"] for entry in logged] == [0.0, 0.0]
    assert logged[0]["rewards/tool_episodes/mean"] == pytest.approx(0.5)
    # TRL logs the all-NaN mean as None: left out, not averaged in as 0.0.
    assert logged[1]["rewards/tool_episodes/mean"] is None
    ids = [episode for call in calls for episode in call["columns"]["reward_episode_id"]]
    assert len(set(ids)) == len(ids) == MAX_STEPS * BATCH  # a fresh episode per reset


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "lookup_patient", "arguments": {}}',
        '{"name": "lookup_patient"}',
        '{"name": "lookup_patient", "arguments": null}',
    ],
)
async def test_trl_parses_a_no_argument_call_and_the_environment_answers_it(
    stack: RunningStack, mockmed: RunningMockMed, body: str
) -> None:
    # What GRPOTrainer does with one assistant turn (TRL 1.16): its own parse_response over
    # the tokenizer with add_response_schema, then ``method(**function["arguments"])`` on the
    # environment's tool method; an exception there is what TRL counts in
    # tools/failure_frequency.
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import add_response_schema, parse_response

    tokenizer = add_response_schema(tool_calling_tokenizer())
    ids = tokenizer(f"<tool_call>\n{body}\n</tool_call><|im_end|>", add_special_tokens=False)
    parsed = parse_response(tokenizer, [*ids["input_ids"], tokenizer.eos_token_id])
    (call,) = parsed["tool_calls"]
    assert call["function"] == {"name": "lookup_patient", "arguments": {}}
    client = WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=5.0)
    episodes = CertifiedToolEpisodes(
        client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=1,
        tools=MOCKMED_TOOLS,
        open_session=lambda identity: mockmed_session(
            mockmed.url, mockmed.token, identity[IDENTITY_KEY]
        ),
    )
    try:
        env = episodes.environment()
        env.reset(oracle_identity={IDENTITY_KEY: "patient-trl-noarg"})
        method = env.lookup_patient
        # The schema TRL renders for it: an object with no properties.
        schema = get_json_schema(method)["function"]["parameters"]
        assert schema == {"type": "object", "properties": {}}
        answer = json.loads(await method(**call["function"]["arguments"]))
        assert answer["patient_id"] == env._identity[IDENTITY_KEY]
        # An argument outside the schema is refused as text (the model reads it), not raised.
        refused = await method(patient_id="patient-0001")
        assert refused.startswith("error: ")
    finally:
        client.close()
