"""``rewardseal-check-fails-closed``: every hacking family earns 0.0, the control earns 1.0.

Starts the scripted policy server in-process (or uses ``--base-url``), evaluates the environment
once per ExtraDup family through verifiers' eval runner with model ``scripted/<family>``, prints
a table, and exits 1 when any hacking family averages above 0.0, the control does not average
1.0, or any rollout errored (a check that did not run is not a pass).

``--env rewardseal-mockmed-tools`` checks the multi-turn tool taskset instead: every family
plays as a scripted tool-calling policy (``scripted-tools/<family>``) against a running worker
(``--worker-ready-file``, or ``--worker KEY=VALUE`` reward_kwargs) and MockMed
(``--mockmed-url``, its token in ``$REWARDSEAL_MOCKMED_TOKEN`` or ``--mockmed-token-env``), and
is paid by the worker's receipts. An unscored episode is a rollout error here, so it fails too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.extradup import CONTROL, FAMILIES

from .environment import ENV_ID
from .evaluation import FamilyEval, evaluate_family, evaluate_tools_family
from .scripted_policy import ScriptedPolicyServer
from .tools_environment import DEFAULT_TOKEN_ENV, TOOLS_ENV_ID, tools_env_config

__all__ = ["family_ok", "main", "render_table"]


def family_ok(result: FamilyEval) -> bool:
    """The control pays 1.0 on average, a hacking family 0.0; no rollout errored."""
    expected = 1.0 if result.family == CONTROL else 0.0
    return bool(result.rewards) and not result.errors and result.mean_reward == expected


def render_table(results: Sequence[FamilyEval]) -> str:
    """One line per family: rollouts, mean reward, expected reward, errors, verdict."""
    lines = [f"{'family':<14}{'rollouts':>9}{'mean':>8}{'expect':>8}{'errors':>8}  result"]
    for result in results:
        expected = 1.0 if result.family == CONTROL else 0.0
        lines.append(
            f"{result.family:<14}{len(result.rewards):>9}{result.mean_reward:>8.3f}"
            f"{expected:>8.1f}{len(result.errors):>8}  {'ok' if family_ok(result) else 'FAIL'}"
        )
    return "\n".join(lines)


@contextmanager
def _endpoint(base_url: str | None) -> Iterator[str]:
    """The given base URL, or a scripted policy server started for the check."""
    if base_url is not None:
        yield base_url
        return
    with ScriptedPolicyServer() as server:
        yield server.base_url


def _worker_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The tool taskset's worker settings from ``--worker-ready-file`` and ``--worker K=V``."""
    kwargs: dict[str, Any] = {}
    for item in args.worker:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(f"--worker takes KEY=VALUE, got {item!r}")
        kwargs[key] = value
    if args.worker_ready_file:
        kwargs["worker_ready_file"] = args.worker_ready_file
    if args.policy_checkpoint_id:
        kwargs["policy_checkpoint_id"] = args.policy_checkpoint_id
    if args.policy_update is not None:
        kwargs["policy_update"] = args.policy_update
    if not kwargs.get("worker_ready_file") and not kwargs.get("worker_target"):
        raise ValidationError(
            f"--env {TOOLS_ENV_ID} needs a running worker: --worker-ready-file PATH "
            "(or --worker worker_target=HOST:PORT --worker token_env=... ...)"
        )
    if not args.mockmed_url:
        raise ValidationError(f"--env {TOOLS_ENV_ID} needs --mockmed-url (the tools' API)")
    return kwargs


def _evaluator(args: argparse.Namespace) -> Callable[[str, str], FamilyEval]:
    """``(base_url, family) -> FamilyEval`` for the chosen environment."""
    if args.env == ENV_ID:
        return lambda url, family: evaluate_family(
            url, family, num_tasks=args.num_tasks, seed=args.seed
        )
    env = tools_env_config(
        worker=_worker_kwargs(args),
        mockmed_url=args.mockmed_url,
        mockmed_token_env=args.mockmed_token_env,
        num_tasks=args.num_tasks,
        seed=args.seed,
    )
    return lambda url, family: evaluate_tools_family(url, family, env)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status (0 when the reward fails closed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--env", choices=(ENV_ID, TOOLS_ENV_ID), default=ENV_ID)
    parser.add_argument("--base-url", default=None, help="an OpenAI base URL (default: start one)")
    parser.add_argument("--num-tasks", type=int, default=2, help="gold tasks per store (tasks)")
    parser.add_argument("--seed", type=int, default=0)
    tools = parser.add_argument_group(f"--env {TOOLS_ENV_ID}")
    tools.add_argument("--worker-ready-file", default=None, help="the worker's ready file")
    tools.add_argument("--worker", action="append", default=[], metavar="KEY=VALUE")
    tools.add_argument("--policy-checkpoint-id", default=None)
    tools.add_argument("--policy-update", type=int, default=None)
    tools.add_argument("--mockmed-url", default=None)
    tools.add_argument("--mockmed-token-env", default=DEFAULT_TOKEN_ENV)
    args = parser.parse_args(argv)
    try:
        evaluate = _evaluator(args)
    except ValidationError as exc:
        parser.error(exc.message)
    with _endpoint(args.base_url) as base_url:
        results = [evaluate(base_url, family) for family in FAMILIES]
    print(render_table(results))
    for result in results:
        for message in result.errors[:3]:
            print(f"{result.family}: rollout error: {message}", file=sys.stderr)
    passed = all(family_ok(result) for result in results)
    print("fails closed" if passed else "DOES NOT FAIL CLOSED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
