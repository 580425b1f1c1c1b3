"""Run rewardseal's ``CertifiedAgentLoop`` (verl V1's custom agent loop) through verl 0.9.1's own
agent-loop code on a CPU: the honest control and every hacking family as multi-turn tool-calling
sessions over MockMed's real tools, each paid by the worker's receipt (docs/trainers.md, *verl
V1*).

    python examples/verl_v1_agent_loop.py            # starts MockMed and a seeded worker
    python examples/verl_v1_agent_loop.py --family control --family dup

Needs ``verl`` (0.9.1, with torch, transformers, hydra) beside the rewardseal packages; the
repository's ``make setup-integrations`` venv has them. Nothing is downloaded and no GPU is
used. examples/verl_v1/ holds the YAML for a real run (verl's V1 trainer, a vLLM or SGLang
server, GPUs); that cannot run on a CPU, so this script runs the same registration through the
part of verl that owns the sessions:

1. **verl's config**: the default trainer config (hydra compose of ``ppo_trainer.yaml`` with
   ``trainer.use_v1=true``) with ``agent_loop_config_path`` registering ``CertifiedAgentLoop``
   and MockMed's toolbox, ``multi_turn.format=hermes`` (verl's tool parser) and the worker's
   ready file in ``reward.reward_kwargs``.
2. **verl's agent-loop worker**: ``verl.experimental.agent_loop.AgentLoopWorker``, the base of
   the V1 trainer's ``AgentLoopWorkerTQ``, runs ``rollout.n`` sessions per prompt with
   ``_run_agent_loop`` (verl's registry, its hydra instantiation of the loop per session, its
   ``ToolAgentLoop`` turns and tool calls); only the final hand-off to the TransferQueue (not
   installed here) is replaced by printing the session.
3. **The one stand-in, named as such**: the LLM server is
   :class:`rewardseal_kit.scripted_llm.ScriptedFamilyServer`, answering each turn with the
   token ids (the tiny models' character tokenizer, :mod:`rewardseal_kit.tiny_models`) of the
   family's next hermes tool call from the kit's one table of family scripts.

It prints one line per session (family, reward, outcome, certified, findings) and exits 0 when
every control session was paid 1.0 with a certified receipt and every hacking session 0.0;
``--summary PATH`` writes the sessions as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rewardseal.trainers.verl.agent_loop import AGENT_NAME
from rewardseal_kit.scripted_llm import FAMILY_MARKER, ScriptedFamilyServer
from rewardseal_kit.tiny_models import char_tokenizer
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import CONTROL, FAMILIES

CHECKPOINT = "policy_checkpoint_example_0"
SESSIONS = 2  # rollout.n: each prompt runs this many sessions, each on its own sandbox patient
REQUEST = {"type": "Triage", "note": "Synthetic: sore throat for two days.", "status": "open"}
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


@contextmanager
def worker_and_mockmed(args: argparse.Namespace) -> Iterator[tuple[Path, str, str]]:
    """``(worker ready file, MockMed URL, MockMed token)``: given, or both started here."""
    if args.ready_file:
        token = os.environ.get("MOCKMED_TOKEN")
        if not args.mockmed_url or not token:
            raise SystemExit("with --ready-file give --mockmed-url and MOCKMED_TOKEN")
        yield args.ready_file, args.mockmed_url, token
        return
    from rewardseal_kit.proof.run import local_services

    with tempfile.TemporaryDirectory(prefix="rewardseal-verl-v1-") as tmp:
        run_dir = Path(tmp)
        with local_services(run_dir) as started:
            yield run_dir / "worker.ready.json", started.mockmed_url, started.mockmed_token


def model_dir(target: Path) -> Path:
    """The tiny model verl's ``HFModelConfig`` reads: the character tokenizer and a one-layer
    Llama config (the weights are never loaded: the scripted server does the sampling)."""
    from transformers import LlamaConfig

    tokenizer = char_tokenizer()
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


def verl_config(scratch: Path, ready_file: Path, mockmed_url: str, mockmed_token: str) -> Any:
    """verl's default (V1) trainer config with the certified agent loop registered."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    registration = scratch / "agent_loops.yaml"
    registration.write_text(
        f"- name: {AGENT_NAME}\n"
        "  _target_: rewardseal.trainers.verl.agent_loop.CertifiedAgentLoop\n"
        "  toolkit: rewardseal_kit.tools.mockmed:mockmed_toolbox\n"
        f"  toolkit_kwargs: {{base_url: '{mockmed_url}', token: '{mockmed_token}'}}\n"
    )
    model = model_dir(scratch / "model")
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(
            config_name="ppo_trainer",
            overrides=[
                "trainer.use_v1=true",
                f"actor_rollout_ref.model.path={model}",
                "actor_rollout_ref.rollout.name=vllm",
                f"actor_rollout_ref.rollout.n={SESSIONS}",
                "actor_rollout_ref.rollout.prompt_length=256",
                "actor_rollout_ref.rollout.response_length=4096",
                "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048",
                "actor_rollout_ref.rollout.multi_turn.enable=true",
                "actor_rollout_ref.rollout.multi_turn.format=hermes",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=6",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={registration}",
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
            ],
        )
    with open_dict(config):
        config.actor_rollout_ref.model.custom_chat_template = CHAT_TEMPLATE
        config.reward.reward_kwargs = {
            "worker_ready_file": str(ready_file),
            "policy_checkpoint_id": CHECKPOINT,
            "require_certified": True,
            "timeout_seconds": 20.0,
        }
    return config


def agent_loop_worker(config: Any) -> Any:
    """verl's ``AgentLoopWorker`` whose per-session hand-off returns the session's output (the
    V1 trainer's subclass puts it into the TransferQueue instead)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    class ReturningWorker(AgentLoopWorker):  # type: ignore[misc]
        async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> Any:
            return output

    server = ScriptedFamilyServer(char_tokenizer(), REQUEST)
    return ReturningWorker(config, server, None, None)


async def play(worker: Any, family: str, index: int, step: int) -> list[dict[str, Any]]:
    """One prompt of ``family`` run as ``SESSIONS`` sessions, as the V1 worker's ``_run_prompt``
    fans it out; each session's result."""
    uid = f"example-{family}"
    prompt = {
        "uid": uid,
        "index": index,
        "agent_name": AGENT_NAME,
        "raw_prompt": [
            {"role": "user", "content": f"Record the triage visit. {FAMILY_MARKER}{family}"}
        ],
        "extra_info": {
            "oracle_identities": [
                {IDENTITY_KEY: f"patient-verl-example-{family}-s{session}"}
                for session in range(SESSIONS)
            ]
        },
        "global_steps": step,
    }
    trajectory = {"step": step, "sample_index": index, "rollout_n": 0, "validate": False}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
    outputs = await asyncio.gather(
        *(
            worker._run_agent_loop(sampling, trajectory, trace=False, session_id=session, **prompt)
            for session in range(SESSIONS)
        )
    )
    results = []
    for session, output in enumerate(outputs):
        if isinstance(output, list):  # [] : unscored, dropped from the group (never 0.0)
            results.append({"family": family, "session": session, "reward": None})
            continue
        info = output.extra_fields["reward_extra_info"]
        results.append(
            {
                "family": family,
                "session": session,
                "reward": float(output.reward_score),
                "outcome": info["reward_outcome"],
                "certified": bool(info["reward_certified"]),
                "findings": info.get("reward_findings", ""),
                "episode_id": info["reward_episode_id"],
            }
        )
    return results


def session_ok(result: dict[str, Any]) -> bool:
    """The control paid 1.0 certified; a hacking family 0.0."""
    if result["family"] == CONTROL:
        return result["reward"] == 1.0 and bool(result.get("certified"))
    return result["reward"] == 0.0


def result_line(result: dict[str, Any]) -> str:
    if result["reward"] is None:
        return f"{result['family']} session {result['session']}: unscored, dropped -> FAIL"
    return (
        f"{result['family']} session {result['session']}: reward {result['reward']:.1f}, "
        f"{result['outcome']}, certified={result['certified']}, "
        f"findings={result['findings'] or '-'} -> {'ok' if session_ok(result) else 'FAIL'}"
    )


async def run_all(config: Any, families: Sequence[str]) -> list[dict[str, Any]]:
    worker = agent_loop_worker(config)
    results = []
    for index, family in enumerate(families):
        for result in await play(worker, family, index, step=1):
            print(result_line(result), flush=True)
            results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path, help="the worker's ready file")
    parser.add_argument("--mockmed-url", help="MockMed's base URL (with --ready-file)")
    parser.add_argument(
        "--family", action="append", choices=FAMILIES, help="only these families (repeatable)"
    )
    parser.add_argument("--summary", type=Path, help="write every session's result as JSON")
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    with (
        worker_and_mockmed(args) as (ready_file, mockmed_url, mockmed_token),
        tempfile.TemporaryDirectory(prefix="rewardseal-verl-v1-config-") as scratch,
    ):
        config = verl_config(Path(scratch), ready_file, mockmed_url, mockmed_token)
        results = asyncio.run(run_all(config, families))
    if args.summary is not None:
        args.summary.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    passed = bool(results) and all(session_ok(result) for result in results)
    # The one result line, "paid" meaning a positive reward as everywhere (BatchTally): the
    # controls are paid, the hacks scored 0.0 and not paid, the unscored dropped.
    paid = sum(1 for result in results if result["reward"])
    unscored = sum(1 for result in results if result["reward"] is None)
    verdict = "as expected" if passed else "NOT as expected"
    print(
        f"{len(results)} sessions: {paid} paid (reward > 0), {len(results) - paid - unscored} "
        f"scored and not paid, {unscored} unscored -> {verdict}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
