"""The calibration run: gold control trials first, then the fault trials round-robin (R-CAL-2/3).

Gold control trials (the correct effect, and the families' control when the caller passed some)
must all judge VERIFIED; one that does not makes calibration refuse (R-CAL-3): a checker that
cannot pay the right answer has a meaningless false-accept rate. The output is a
:class:`~rewardseal.v1.certificate_pb2.CalibrationSummary` (counts, never the corpus) and
epsilon, the exact one-sided Clopper-Pearson upper bound on the false-accept rate.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from rewardseal.core.calibration import METHOD, clopper_pearson_upper
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import Decision
from rewardseal.core.validation import validate_calibration_summary
from rewardseal.v1.certificate_pb2 import CalibrationSummary, FaultClassCount
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.calibration.checker import checker_configuration_digest
from rewardseal_worker.calibration.families import EXTRADUP_PREFIX, FaultFamilies
from rewardseal_worker.calibration.family_trials import build_family_trial
from rewardseal_worker.calibration.fault_classes import (
    CalibrationSetup,
    drawn_parameters,
    setup_for,
    with_drawn_parameters,
)
from rewardseal_worker.calibration.progress import ProgressCallback
from rewardseal_worker.calibration.task_rows import checked_rows
from rewardseal_worker.calibration.trials import GOLD, Trial, build_generic, judge_trial, trial_rng

__all__ = [
    "DEFAULT_TRIALS",
    "GOLD_REFUSED_MESSAGE",
    "CalibrationResult",
    "FalseAccept",
    "TrialJudge",
    "TrialNotWritable",
    "TrialRun",
    "calibrate",
    "default_gold_trials",
    "run_one",
    "run_trial",
]

DEFAULT_TRIALS: Final = 300
"""Fault trials of a default run: 0 false accepts in 300 gives epsilon 0.0099361 (R-CAL-1)."""
GOLD_REFUSED_MESSAGE: Final = "calibration refused: a gold control trial was not VERIFIED"
"""The message of the ValidationError raised when a gold control trial is refused (R-CAL-3)."""

MAX_REDRAWS: Final = 50
"""Draws of one trial that a sandbox may refuse before calibration gives up on it."""

PARAMETERS_STREAM: Final = "task_parameters"
"""Where a trial's task parameter values come from (R-CAL-6): the generator of the run's seed,
this name, the trial's kind and index."""

_MAX_SEED = 2**64 - 1  # generator_seed is a uint64
_MAX_TRIALS = 1_000_000

TrialJudge = Callable[[CalibrationSetup, random.Random, Trial], Decision]
"""Reads a trial's SoR before and after and judges it: in memory (:func:`judge_trial`), or
written into a sandbox and read back through the bundle's own reader."""


class TrialNotWritable(Exception):
    """The system of record cannot hold this trial (a column it lacks, a type it refuses): a
    fault no policy could commit there. The runner draws the trial again."""


_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED


@dataclass(frozen=True)
class FalseAccept:
    """One fault trial the judge VERIFIED: its class, how the fault was made, its index."""

    fault_class: str
    variant: str
    trial: int


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration run produced.

    ``summary`` is what leaves the worker (R-CAL-2); ``epsilon`` is recomputed from its counts.
    ``false_accept_trials`` and ``transcript_digest`` (a digest over every trial's class,
    variant, outcome and evidence digest, in order) stay local: they help a person find out why
    a checker leaks and show that a seed reproduces the same run.
    """

    summary: CalibrationSummary
    epsilon: float
    delta: float
    false_accept_trials: tuple[FalseAccept, ...]
    transcript_digest: str
    elapsed_seconds: float
    redrawn: int = 0
    """Draws a sandbox could not hold (:class:`TrialNotWritable`), drawn again."""


def default_gold_trials(trials: int) -> int:
    """Gold control trials run beside ``trials`` fault trials: a tenth, at least one."""
    return max(1, math.ceil(trials / 10))


@dataclass(frozen=True)
class TrialRun:
    """One trial as run: how its fault was made, its decision, and the task parameter values
    it was generated and judged with (None for a contract without parameters)."""

    variant: str
    decision: Decision
    parameters: Mapping[str, Any] | None


def run_trial(
    setup: CalibrationSetup, seed: int, kind: str, index: int, judge: TrialJudge = judge_trial
) -> TrialRun:
    """Draw, generate and judge trial ``index`` of ``kind`` (R-CAL-3, R-CAL-6)."""
    rng = trial_rng(seed, kind, index)
    # Its own generator, so a contract without parameters draws exactly what it drew before.
    bound = with_drawn_parameters(setup, trial_rng(seed, f"{PARAMETERS_STREAM}/{kind}", index))
    if kind.startswith(EXTRADUP_PREFIX):
        trial, variant = build_family_trial(bound, rng, kind.removeprefix(EXTRADUP_PREFIX))
    else:
        trial, variant = build_generic(bound, rng, kind)
    parameters = drawn_parameters(bound) if setup.parameters else None
    return TrialRun(variant, judge(bound, rng, trial), parameters)


def run_one(
    setup: CalibrationSetup, seed: int, kind: str, index: int, judge: TrialJudge = judge_trial
) -> tuple[str, Decision]:
    """:func:`run_trial`'s variant and decision."""
    run = run_trial(setup, seed, kind, index, judge)
    return run.variant, run.decision


def _check_int(value: int, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{name} must be an integer in {low}..{high}")
    return value


def calibrate(
    bundle: ContractBundle,
    *,
    seed: int,
    trials: int = DEFAULT_TRIALS,
    delta: float = 0.05,
    gold_trials: int | None = None,
    families: FaultFamilies | None = None,
    progress: ProgressCallback | None = None,
    judge: TrialJudge = judge_trial,
    held_out: bool = False,
    task_rows: Sequence[Mapping[str, Any]] | None = None,
) -> CalibrationResult:
    """Calibrate ``bundle``'s judge on ``trials`` synthetic fault trials (R-CAL-2/3).

    Args:
        bundle: the loaded contract bundle; its effect specs are judged exactly as the engine
            judges them. The SoR is never touched: every trial is synthetic.
        seed: the generator seed (a uint64); the same seed reproduces the same run.
        trials: fault trials, split round-robin over :func:`fault_classes_for`.
        delta: epsilon is the one-sided Clopper-Pearson bound at confidence ``1 - delta``.
        gold_trials: gold control trials besides the fault trials (default
            :func:`default_gold_trials`).
        families: add the ExtraDup families with this table (the bundle's contract must name
            its task); None (default) runs the contract's own fault classes only.
        progress: called as ``progress(done, total)`` after each trial.
        judge: how a trial is read and judged (default in memory); a sandbox judge writes it
            into a sandbox copy of the SoR and may refuse a draw (:class:`TrialNotWritable`),
            which is then drawn again, up to :data:`MAX_REDRAWS` times.
        held_out: mark the summary as made on a held-out corpus (R-MSG-5).
        task_rows: for a contract with task parameters, the rows each trial takes its values
            from (one per trial, drawn with the seed; checked against the declaration);
            None draws them from the declaration (R-CAL-6).

    Raises:
        ValidationError: bad arguments, ``families`` for another task, a gold control trial
            was not VERIFIED (R-CAL-3), or a sandbox refused every draw of one trial.
    """
    _check_int(seed, "seed", 0, _MAX_SEED)
    _check_int(trials, "trials", 1, _MAX_TRIALS)
    if isinstance(delta, bool) or not isinstance(delta, float | int) or not 0 < delta < 1:
        raise ValidationError(f"delta must be in (0, 1), got {delta!r}")
    golds = default_gold_trials(trials) if gold_trials is None else gold_trials
    _check_int(golds, "gold_trials", 1, _MAX_TRIALS)

    started = time.perf_counter()
    setup = setup_for(bundle, families)
    if task_rows is not None:
        setup = replace(setup, parameter_rows=checked_rows(bundle.contract, task_rows))
    classes = setup.fault_classes
    gold_kinds = [GOLD]
    if setup.replay is not None:
        gold_kinds.append(EXTRADUP_PREFIX + setup.replay.control)
    total = golds + trials
    done = 0
    redrawn = 0
    transcript: list[list[Any]] = []

    def draw(kind: str, index: int) -> TrialRun:
        nonlocal redrawn
        reason = ""
        for attempt in range(MAX_REDRAWS):
            try:
                # A redraw gets its own generator: index + attempt * _MAX_TRIALS is no other
                # trial's index, and the run stays reproducible per seed.
                return run_trial(setup, seed, kind, index + attempt * _MAX_TRIALS, judge)
            except TrialNotWritable as exc:
                redrawn += 1
                reason = str(exc)
        raise ValidationError(
            f"calibration refused: {MAX_REDRAWS} draws of a {kind!r} trial could not be written "
            f"into the sandbox (last: {reason})"
        )

    def note(kind: str, index: int, run: TrialRun) -> None:
        nonlocal done
        entry: list[Any] = [
            kind,
            index,
            run.variant,
            RewardOutcome.Name(run.decision.outcome),
            digest_json(run.decision.evidence()),
        ]
        if run.parameters is not None:  # R-CAL-6: the values drawn are part of the run
            entry.append(digest_json(dict(run.parameters)))
        transcript.append(entry)
        done += 1
        if progress is not None:
            progress(done, total)

    # Gold first: a checker that cannot pay the right answer is refused before anything else.
    for index in range(golds):
        kind = gold_kinds[index % len(gold_kinds)]
        run = draw(kind, index)
        note(kind, index, run)
        decision = run.decision
        if decision.outcome != _VERIFIED:
            raise ValidationError(
                GOLD_REFUSED_MESSAGE,
                metadata={
                    "gold_kind": kind,
                    "trial": str(index),
                    "outcome": RewardOutcome.Name(decision.outcome),
                    "reason": decision.reason,
                },
            )

    per_class = {name: [0, 0] for name in classes}
    leaks: list[FalseAccept] = []
    for index in range(trials):
        kind = classes[index % len(classes)]
        run = draw(kind, index)
        note(kind, index, run)
        per_class[kind][0] += 1
        if run.decision.outcome == _VERIFIED:
            per_class[kind][1] += 1
            leaks.append(FalseAccept(kind, run.variant, index))

    contract = bundle.contract
    summary = CalibrationSummary(
        reward_contract_digest=bundle.contract_digest,
        calibration_corpus_digest=contract.certificate_policy.calibration_corpus_digest,
        checker_configuration_digest=checker_configuration_digest(bundle),
        trials=trials,
        false_accepts=len(leaks),
        fault_classes=[
            FaultClassCount(name=name, trials=counts[0], false_accepts=counts[1])
            for name, counts in per_class.items()
        ],
        generator_seed=seed,
        method=METHOD,
        confidence=1.0 - float(delta),
        threshold=contract.certificate_policy.threshold,
        gold_trials=golds,
        gold_refused=0,
        held_out=held_out,
    )
    validate_calibration_summary(summary)
    return CalibrationResult(
        summary=summary,
        epsilon=clopper_pearson_upper(len(leaks), trials, float(delta)),
        delta=float(delta),
        false_accept_trials=tuple(leaks),
        transcript_digest=digest_json(transcript),
        elapsed_seconds=time.perf_counter() - started,
        redrawn=redrawn,
    )
