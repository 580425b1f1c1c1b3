"""The worker's authoring subcommands: ``contract ...`` and ``calibrate``, and how they fail.

``calibrate DIR --sandbox URL|DIR --trials N`` loads the bundle as ``serve`` does, runs the fault
classes its own effects express (R-CAL-3) against a sandbox copy of the system of record
(:mod:`rewardseal_worker.calibration.sandbox`) and writes ``calibration.json`` (counts, classes,
seed, corpus digest; never the corpus). A sandbox that is the live SoR, or a live SoR that cannot
be determined (without ``--unsafe-unknown-live-sor``), is refused before the first write
(:mod:`rewardseal_worker.calibration.live_sor`). Every failure is one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import sys
from pathlib import Path
from typing import TextIO

from rewardseal.core.calibration import summary_to_json
from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal_worker.authoring.calibration_report import (
    print_explanation,
    print_family_table,
)
from rewardseal_worker.authoring.commands import PROBLEMS_EXIT, run_contract_command
from rewardseal_worker.bundle import CALIBRATION_FILE, ContractBundle, load_bundle
from rewardseal_worker.calibration import calibrate, text_progress
from rewardseal_worker.calibration.live_sor import UNSAFE_UNKNOWN_FLAG
from rewardseal_worker.calibration.runner import DEFAULT_TRIALS
from rewardseal_worker.calibration.sandbox import open_sandbox
from rewardseal_worker.calibration.sandbox_corpus import (
    SANDBOX_CORPUS_DIGEST,
    sandbox_corpus_digest,
)
from rewardseal_worker.calibration.task_rows import TaskRows, read_task_rows

__all__ = ["add_calibrate_command", "run_authoring_command", "run_calibrate"]


def add_calibrate_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``calibrate`` to the worker's subcommands."""
    cal = commands.add_parser(
        "calibrate", help="calibrate a bundle against a sandbox copy of its system of record"
    )
    cal.add_argument("directory", type=Path, metavar="DIR", help="the contract bundle")
    cal.add_argument(
        "--sandbox",
        required=True,
        metavar="URL|DIR",
        help="writable sandbox copy of the SoR: a database URL or SQLite file (sql), the "
        "sandbox API's or FHIR server's base URL (rest, fhir), a directory (json_file); never "
        "the live one",
    )
    cal.add_argument(
        "--sandbox-store",
        metavar="URL",
        help="rest and fhir: the database URL the sandbox API or FHIR server serves from (trials "
        "are written there and read back through the API)",
    )
    cal.add_argument(
        UNSAFE_UNKNOWN_FLAG,
        dest="unsafe_unknown_live_sor",
        action="store_true",
        help="UNSAFE: calibrate even when the live SoR cannot be determined (its variable unset "
        "here, or its server unreachable), so the sandbox is not compared with it; a sandbox "
        "that is the live SoR is refused anyway",
    )
    cal.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_TRIALS,
        help=f"fault draws (default {DEFAULT_TRIALS}; a tenth as many gold control trials too); "
        "the benign and rejected ones are counted apart (R-CAL-7)",
    )
    cal.add_argument("--seed", type=int, help="generator seed (default: a fresh random one)")
    cal.add_argument(
        "--held-out",
        action="store_true",
        help="mark the summary as made on a held-out corpus (a seed never used while authoring; "
        "PRODUCTION certificates need it, R-MSG-5)",
    )
    cal.add_argument(
        "--task-rows",
        type=Path,
        metavar="FILE.jsonl",
        help="for a contract with task parameters: draw each trial's values from these rows "
        "(one JSON object per line) instead of the declaration (R-CAL-6); the corpus digest "
        "covers the rows",
    )
    cal.add_argument(
        "--out", type=Path, help=f"where to write the summary (default DIR/{CALIBRATION_FILE})"
    )
    cal.add_argument(
        "--explain",
        action="store_true",
        help="list each accepted fault (its class, effect and fields, never a SoR value) and "
        "the benign and rejected draws",
    )


def run_authoring_command(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``contract ...`` or ``calibrate``; a refusal is one line on stderr, exit status 2."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr
    try:
        if args.command == "calibrate":
            return run_calibrate(args, stdout, stderr)
        return run_contract_command(args, stdout)
    except RewardSealError as exc:
        # The metadata says why (e.g. which gold trial, its outcome and the judge's reason).
        details = ", ".join(f"{key} {value}" for key, value in sorted(exc.metadata.items()))
        print(f"rewardseal-worker: {exc.message}{f' ({details})' if details else ''}", file=stderr)
        return PROBLEMS_EXIT


def _check_corpus(bundle: ContractBundle, rows: TaskRows | None) -> None:
    """A sandbox run is the sandbox corpus: refuse a contract that pins another one, rather than
    stamp a summary with a corpus it did not run (R-C-3 would then certify the wrong claim)."""
    pinned = bundle.contract.certificate_policy.calibration_corpus_digest
    runs = sandbox_corpus_digest(bundle.contract, rows)
    if pinned != runs:
        if runs == SANDBOX_CORPUS_DIGEST:
            which = "sandbox corpus"
        elif rows is None:
            which = "sandbox corpus with task parameters drawn from the declaration (R-CAL-6)"
        else:
            which = "sandbox corpus with task parameters drawn from these task rows (R-CAL-6)"
        raise ValidationError(
            f"the contract pins calibration corpus {pinned}, but a sandbox calibration runs the "
            f"{which} {runs}; pin that digest in "
            "certificate_policy.calibration_corpus_digest (contract init does) and seal"
        )


def _policy_words(bundle: ContractBundle, epsilon: float, delta: float) -> str:
    """Whether control will certify this summary under the contract's policy, and if not, why."""
    policy = bundle.contract.certificate_policy
    if epsilon <= policy.max_epsilon and delta <= policy.max_delta:
        return f"meets the contract's policy (epsilon <= {policy.max_epsilon:g})"
    # With no false accept, 0 in n trials gives epsilon 1 - delta^(1/n).
    needed = math.ceil(math.log(delta) / math.log(1.0 - policy.max_epsilon))
    return (
        f"does NOT meet the contract's policy (epsilon <= {policy.max_epsilon:g}): control will "
        f"refuse a certificate; 0 false accepts in {needed} trials would meet it"
    )


def run_calibrate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``calibrate``: the summary written to ``--out``; the counts printed."""
    bundle = load_bundle(args.directory)
    rows = read_task_rows(bundle.contract, args.task_rows) if args.task_rows else None
    _check_corpus(bundle, rows)
    seed = args.seed if args.seed is not None else secrets.randbits(63)
    judge = open_sandbox(
        bundle,
        args.sandbox,
        sandbox_store=args.sandbox_store,
        unsafe_unknown_live_sor=args.unsafe_unknown_live_sor,
    )
    if judge.note:
        print(f"note: {judge.note}", file=err)
    try:
        result = calibrate(
            bundle,
            seed=seed,
            trials=args.trials,
            judge=judge,
            held_out=args.held_out,
            task_rows=rows,
            # A bar only where someone watches: a log or a pipe gets the summary lines alone.
            progress=text_progress(err) if err.isatty() else None,
        )
    finally:
        judge.close()
    target = args.out or bundle.path / CALIBRATION_FILE
    target.write_text(json.dumps(summary_to_json(result.summary), indent=2) + "\n")
    summary = result.summary
    print(f"calibrated       {bundle.contract.contract_id} ({bundle.contract_digest})", file=out)
    print(
        f"trials           {summary.trials} effective fault + {summary.gold_trials} gold control "
        f"(seed {summary.generator_seed}{', held-out' if summary.held_out else ''}); of "
        f"{result.draws} fault draws {summary.benign_trials} benign, {summary.rejected_trials} "
        "rejected by the sandbox (R-CAL-7)",
        file=out,
    )
    print_family_table(summary, out)
    print(
        f"false accepts    {summary.false_accepts}; epsilon {result.epsilon:.6f} at delta "
        f"{result.delta:g}",
        file=out,
    )
    print(f"policy           {_policy_words(bundle, result.epsilon, result.delta)}", file=out)
    if result.redrawn:
        print(
            f"redrawn          {result.redrawn} draws the sandbox could not hold (a column its "
            "schema lacks, a background row or gold write it refuses): drawn again",
            file=out,
        )
    if args.explain:
        print_explanation(result, out)
    print(f"wrote            {target}", file=out)
    return 0
