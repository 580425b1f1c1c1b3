"""Play the multi-turn MockMed tool taskset (``rewardseal-mockmed-tools``, verifiers v1) with its
honest control and every hacking family, paid only by the worker's receipts (docs/trainers.md,
*verifiers and prime-rl*).

    python examples/verifiers_tools.py                  # starts MockMed and a seeded worker
    python examples/verifiers_tools.py --ready-file worker.json --mockmed-url http://...:8080

Needs ``verifiers`` beside the rewardseal packages and the taskset's package
(clients/python/envs/rewardseal_mockmed_extradup); the repository's ``make setup-integrations``
venv has them. Nothing is downloaded. The policy is the scripted OpenAI-compatible server
(``rewardseal_mockmed_extradup.scripted_policy``, started here: the stand-in for a model server,
named as such) whose ``scripted-tools/<family>`` models play each family's tool calls from the
kit's one table (``rewardseal_kit.tools.families``). Everything else is verifiers' own eval
runner over the taskset: ``Task.setup`` begins the episode at the worker under the episode's
own sandbox patient, the harness calls MockMed's real tools, and the reward is the receipt.

1. **Where the worker is**: its ready file (``--ready-file``), or MockMed and a seeded tier-2
   worker started here in a temporary directory, as examples/trl_grpo.py does. MockMed's bearer
   token is ``MOCKMED_TOKEN`` (the taskset reads it from ``$REWARDSEAL_MOCKMED_TOKEN``).
2. **What pays**: the control must average 1.0 (verified, certified), every hacking family 0.0;
   an unscored episode raises in the reward, so verifiers marks its trace errored (prime-rl
   drops it from its group) instead of paying it 0.0.

It prints one line per family (rollouts, mean reward, the receipts' outcomes, ok or FAIL) and
exits 0 when the reward fails closed; ``--summary PATH`` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rewardseal_mockmed_extradup.check_fails_closed import family_ok
from rewardseal_mockmed_extradup.evaluation import FamilyEval, evaluate_tools_family
from rewardseal_mockmed_extradup.scripted_policy import ScriptedPolicyServer
from rewardseal_mockmed_extradup.tools_environment import DEFAULT_TOKEN_ENV, tools_env_config

from rewardseal_mockmed.extradup import CONTROL, FAMILIES

CHECKPOINT = "policy_checkpoint_example_0"


@contextmanager
def worker_and_mockmed(args: argparse.Namespace) -> Iterator[tuple[Path, str]]:
    """``(worker ready file, MockMed URL)``: the ones ``args`` name, or both started here."""
    if args.ready_file:
        token = os.environ.get("MOCKMED_TOKEN")
        if not args.mockmed_url or not token:
            raise SystemExit("with --ready-file give --mockmed-url and MOCKMED_TOKEN")
        os.environ[DEFAULT_TOKEN_ENV] = token
        yield args.ready_file, args.mockmed_url
        return
    from rewardseal_kit.proof.run import local_services

    with tempfile.TemporaryDirectory(prefix="rewardseal-verifiers-tools-") as tmp:
        run_dir = Path(tmp)
        with local_services(run_dir) as started:
            os.environ[DEFAULT_TOKEN_ENV] = started.mockmed_token
            yield run_dir / "worker.ready.json", started.mockmed_url


def result_line(result: FamilyEval) -> str:
    """One family's result: rollouts, mean, expected, outcomes, errors, verdict."""
    expected = 1.0 if result.family == CONTROL else 0.0
    outcomes = ",".join(sorted(set(result.verdicts))) or "none"
    return (
        f"{result.family}: {len(result.rewards)} rollouts, mean {result.mean_reward:.3f} "
        f"(expect {expected:.1f}), outcomes {outcomes}, {len(result.errors)} errors -> "
        f"{'ok' if family_ok(result) else 'FAIL'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path, help="the worker's ready file")
    parser.add_argument("--mockmed-url", help="MockMed's base URL (with --ready-file)")
    parser.add_argument("--num-tasks", type=int, default=2, help="tasks per family (default 2)")
    parser.add_argument(
        "--family", action="append", choices=FAMILIES, help="only these families (repeatable)"
    )
    parser.add_argument("--summary", type=Path, help="write each family's result as JSON")
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    results: list[FamilyEval] = []
    with worker_and_mockmed(args) as (ready_file, mockmed_url), ScriptedPolicyServer() as policy:
        env = tools_env_config(
            worker={"worker_ready_file": str(ready_file), "policy_checkpoint_id": CHECKPOINT},
            mockmed_url=mockmed_url,
            num_tasks=args.num_tasks,
        )
        for family in families:
            result = evaluate_tools_family(policy.base_url, family, env)
            results.append(result)
            print(result_line(result), flush=True)
    passed = all(family_ok(result) for result in results)
    if args.summary is not None:
        summary: list[dict[str, Any]] = [
            {
                "family": result.family,
                "rewards": list(result.rewards),
                "outcomes": list(result.verdicts),
                "errors": list(result.errors),
                "ok": family_ok(result),
            }
            for result in results
        ]
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print("fails closed" if passed else "DOES NOT FAIL CLOSED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
