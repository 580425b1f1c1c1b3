"""``rewardseal-kit proof-learning``: its options and what it does (heavy imports in :func:`run`).

    rewardseal-kit proof-learning --json out.json --markdown out.md [--png out.png]
                     [--steps 30] [--prompts 32] [--generations 4] [--warm-start-steps 300]
                     [--run-dir DIR]

Starts control, the tier-2 worker (parameterized bundle) and MockMed as child processes in a
temporary directory (``--run-dir`` keeps them, the worker's receipt store included, in DIR),
trains both runs, audits run (a), writes the reports. The sizes default to the full run
(:class:`~rewardseal_kit.proof.learning.config.LearningConfig`); smaller ones are for tests.
Exit status: 0 the run is whole, 1 a bookkeeping check failed (the reports name it), 2 it could
not run. Which way the runs went never changes the exit status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from rewardseal_kit.proof.harness import EXIT_NOT_RUN, conclude, guarded, run_directory

__all__ = ["HELP", "add_arguments", "main", "run"]

HELP: Final = (
    "train a tiny policy with TRL's GRPO twice, paid by a screen and by a certified reward"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``proof-learning`` subcommand's options (defaults: the full run)."""
    from rewardseal_kit.proof.learning.config import LearningConfig

    default = LearningConfig()
    parser.add_argument("--json", type=Path, required=True, help="write the JSON report here")
    parser.add_argument("--markdown", type=Path, required=True, help="write the Markdown here")
    parser.add_argument("--png", type=Path, help="write the chart here (matplotlib)")
    parser.add_argument("--steps", type=int, default=default.steps, help="GRPO steps per run")
    parser.add_argument(
        "--prompts", type=int, default=default.prompts_per_step, help="tasks per step"
    )
    parser.add_argument(
        "--generations", type=int, default=default.num_generations, help="completions per task"
    )
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=default.warm_start_steps,
        help="supervised warm-start steps",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="start the services in this new directory and keep it"
    )


def run(args: argparse.Namespace) -> int:
    """Run the learning proof as ``args`` say, write the reports; the exit status."""
    from rewardseal.core.errors import ValidationError
    from rewardseal_kit.proof.learning.config import LearningConfig
    from rewardseal_kit.proof.learning.report import (
        check_learning,
        final_numbers,
        render_learning_markdown,
        write_learning_png,
    )
    from rewardseal_kit.proof.learning.run import run_learning

    try:
        config = LearningConfig(
            steps=args.steps,
            prompts_per_step=args.prompts,
            num_generations=args.generations,
            warm_start_steps=args.warm_start_steps,
        )
    except ValidationError as exc:
        print(f"proof-learning: {exc.message}", file=sys.stderr)
        return EXIT_NOT_RUN

    def work() -> dict[str, Any]:
        with run_directory(args.run_dir) as run_dir:
            return run_learning(config, run_dir)

    document, status = guarded(work)
    if document is None:
        return status
    problems = check_learning(document)
    document = {**document, "problems": problems}
    for name, result in document["runs"].items():
        numbers = final_numbers(result)
        print(
            f"run {name} ({result['pays']}): final true success "
            f"{numbers['final_true_success']}, claimed {numbers['final_claimed_success']}, "
            f"hacks {numbers['final_hack_share']}"
        )
    gate = document["gate"]
    print(f"gate on run a: paused at boundary {gate['paused_at']}")
    return conclude(
        args,
        document,
        render_learning_markdown(document, problems),
        problems,
        draw=lambda path: write_learning_png(document, path),
        done=f"{document['seconds']['total']:.0f} s; ",
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m rewardseal_kit.proof.learning``, as ``rewardseal-kit proof-learning``."""
    parser = argparse.ArgumentParser(prog="rewardseal-kit proof-learning", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))
