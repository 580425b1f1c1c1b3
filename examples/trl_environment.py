"""Train a tool-using agent with TRL's GRPOTrainer in multi-turn MockMed episodes, paid only by
certified receipts (docs/trainers.md, *TRL: multi-turn tool environments*).

    python examples/trl_environment.py              # starts MockMed and a seeded worker
    python examples/trl_environment.py --ready-file worker.json --mockmed-url http://...:8080
    python examples/trl_environment.py --policy tiny    # the tiny model samples (noise)

Needs ``trl`` (and torch, transformers, datasets, jmespath) beside the rewardseal packages; the
repository's ``make setup-integrations`` venv has them. Nothing is downloaded: the model is the
tiny Llama with the character-level tokenizer and TRL's Qwen2.5 tool-calling template
(:mod:`rewardseal_kit.tiny_models`). The tiny model's samples are noise and never call a tool,
so by default the turns come from the scripted policy (``--policy scripted``,
:mod:`rewardseal_kit.scripted_tools`, the stand-in for sampling, playing the kit's family
table): one row plays the honest control (look up the patient, create the triage encounter,
submit it), the other the screen-only hack (show the "Saved" banner, store nothing).
Everything else is TRL's own loop over the real tools:

1. **Where the worker is**: as examples/trl_grpo.py (its ready file, or one started here).
2. **The episode**: ``CertifiedToolEpisodes.environment`` is the ``environment_factory``; each
   ``reset`` mints an episode id, gives the completion its own sandbox patient and begins the
   episode at the worker; the MockMed tools (``rewardseal_kit.tools.mockmed``) are its methods.
3. **What pays**: ``CertifiedToolEpisodes.reward`` scores the batch's episodes in one call and
   never turns an unscored episode into 0.0.

It prints one line per step (paid, scored, unscored, certified as examples/trl_grpo.py words
them, and the tools each episode called), one for the run, and exits 0 when
every completion got a certified receipt and, with the scripted policy, the honest episodes
were paid 1.0 and the hacks 0.0; ``--summary PATH`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

# The worker and MockMed are found (or started) as examples/trl_grpo.py does.
from trl_grpo import Services, run_tally, services

from rewardseal.trainers.trl import CertifiedToolEpisodes
from rewardseal_kit.tools.mockmed import MOCKMED_TOOLS, mockmed_session
from rewardseal_mockmed.contract import IDENTITY_KEY

CHECKPOINT = "policy_checkpoint_example_0"
NUM_GENERATIONS = 2
SCRIPTS = ("control", "screen_only")  # families of the kit's table, one row each: 4 completions


def train(found: Services, steps: int, policy: str, output_dir: Path) -> list[dict[str, Any]]:
    """A GRPO run of ``steps`` steps; what each step was paid."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from rewardseal_kit.scripted_tools import scripted_policy_trainer
    from rewardseal_kit.tiny_models import tiny_grpo_config, tiny_llama, tool_calling_tokenizer

    tokenizer = tool_calling_tokenizer()
    model = tiny_llama(tokenizer, max_position_embeddings=8192)
    dataset = Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "user", "content": f"Create one Triage encounter. [script: {name}]"}
                ],
                "oracle_identity": {IDENTITY_KEY: f"patient-example-tools-{name}"},
                "script": name,
            }
            for name in SCRIPTS
        ]
    )
    episodes = CertifiedToolEpisodes(
        found.worker,
        reward_contract_digest=found.worker.reward_contract_digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=NUM_GENERATIONS,
        tools=MOCKMED_TOOLS,
        open_session=lambda identity: mockmed_session(
            found.mockmed_url, found.mockmed_token, identity[IDENTITY_KEY]
        ),
    )
    logged: list[dict[str, Any]] = []

    def mockmed_tools(**kwargs: Any) -> list[float | None]:
        """The episodes' reward, and one printed line per step."""
        rewards = episodes.reward(**kwargs)
        columns = episodes.reward.metadata_columns()
        tally = episodes.reward.last_tally()  # "paid": a receipt's own positive scalar
        step = {
            "step": kwargs["trainer_state"].global_step,
            **asdict(tally),
            "rewards": list(rewards),
            "scripts": list(kwargs["script"]),
            "outcomes": list(columns["reward_outcome"]),
            "tools": [
                [call["name"] for call in json.loads(env._transcript())]
                for env in kwargs["environments"]
            ],
        }
        logged.append(step)
        print(
            f"step {step['step']}: {tally.line()}; "
            + "; ".join(
                f"{script}: {'+'.join(tools) or 'no tool'} -> {outcome}"
                for script, tools, outcome in zip(
                    step["scripts"], step["tools"], step["outcomes"], strict=True
                )
            ),
            flush=True,
        )
        return rewards

    args = tiny_grpo_config(
        output_dir,
        max_steps=steps,
        batch=len(SCRIPTS) * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=1536 if policy == "scripted" else 32,
    )
    args.max_tool_calling_iterations = 4
    trainer_class = scripted_policy_trainer(GRPOTrainer) if policy == "scripted" else GRPOTrainer
    trainer = trainer_class(
        model=model,
        reward_funcs=[mockmed_tools],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=episodes.environment,
    )
    trainer.train()
    return logged


def _as_scripted(step: dict[str, Any]) -> bool:
    """Honest episodes paid 1.0, hacks 0.0."""
    expected = {"control": 1.0, "screen_only": 0.0}
    return all(
        reward == expected[script]
        for script, reward in zip(step["scripts"], step["rewards"], strict=True)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path, help="the worker's ready file")
    parser.add_argument("--mockmed-url", help="MockMed's base URL (with --ready-file)")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default 2)")
    parser.add_argument(
        "--policy",
        choices=("scripted", "tiny"),
        default="scripted",
        help="who plays the turns: the scripted policy (default) or the tiny model's samples",
    )
    parser.add_argument("--output-dir", type=Path, help="TRL's output directory")
    parser.add_argument("--summary", type=Path, help="write what each step was paid as JSON")
    args = parser.parse_args(argv)
    with (
        services(args) as found,
        tempfile.TemporaryDirectory(prefix="rewardseal-grpo-tools-") as scratch,
    ):
        steps = train(found, args.steps, args.policy, args.output_dir or Path(scratch))
        digest = found.worker.reward_contract_digest
    total = run_tally(steps)
    if args.summary is not None:
        summary = {"contract_digest": digest, "policy": args.policy, "steps": steps}
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"{len(steps)} step{'' if len(steps) == 1 else 's'}, {total.line()}")
    ok = bool(steps) and total.certified == total.completions
    if args.policy == "scripted":
        ok = ok and all(_as_scripted(step) for step in steps)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
