"""The calibration run: gold control trials first, then the fault trials round-robin (R-CAL-2/3).

Gold control trials (the correct effect, and the families' control when the caller passed some)
must all judge VERIFIED; one that does not makes calibration refuse (R-CAL-3): a checker that
cannot pay the right answer has a meaningless false-accept rate. The output is a
:class:`~rewardseal.v1.certificate_pb2.CalibrationSummary` (counts, never the corpus) and
epsilon, the exact one-sided Clopper-Pearson upper bound on the false-accept rate.

Only effective faults count (R-CAL-7). A sandbox judge reads back what the sandbox stored: a
draw it stored as the correct record (a type coercion, a column default, a trigger) is *benign*,
one it refused to store (:class:`TrialRejected`) is *rejected by the SoR*; both are counted
apart, per class, and enter neither ``trials`` nor ``false_accepts``, so epsilon is the same
Clopper-Pearson bound (R-CAL-1) over the faults a policy could actually leave in the SoR.
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
    "NO_EFFECTIVE_FAULT_MESSAGE",
    "CalibrationResult",
    "Draw",
    "DrawSite",
    "FalseAccept",
    "JudgedTrial",
    "TrialJudge",
    "TrialNotWritable",
    "TrialRejected",
    "calibrate",
    "default_gold_trials",
    "judge_in_memory",
    "run_one",
]

DEFAULT_TRIALS: Final = 300
"""Fault trials of a default run: 0 false accepts in 300 gives epsilon 0.0099361 (R-CAL-1)."""
GOLD_REFUSED_MESSAGE: Final = "calibration refused: a gold control trial was not VERIFIED"
"""The message of the ValidationError raised when a gold control trial is refused (R-CAL-3)."""
NO_EFFECTIVE_FAULT_MESSAGE: Final = "calibration refused: no draw was an effective fault"
"""Every fault draw was benign or rejected by the SoR: there is nothing to bound (R-CAL-7)."""

MAX_REDRAWS: Final = 50
"""Draws of one trial that a sandbox may refuse before calibration gives up on it."""

PARAMETERS_STREAM: Final = "task_parameters"
"""Where a trial's task parameter values come from (R-CAL-6): the generator of the run's seed,
this name, the trial's kind and index."""

_MAX_SEED = 2**64 - 1  # generator_seed is a uint64
_MAX_TRIALS = 1_000_000


@dataclass(frozen=True)
class JudgedTrial:
    """A trial's verdict, and whether the SoR stored its fault at all (R-CAL-7).

    ``benign`` is True when the sandbox read back the correct record where the trial wrote a
    faulty one (it coerced the type, filled the column default, a trigger fixed it): the
    checker is right to accept that, so it is no fault and no false accept.
    """

    decision: Decision
    benign: bool = False


TrialJudge = Callable[[CalibrationSetup, random.Random, Trial], JudgedTrial]
"""Reads a trial's SoR before and after and judges it: in memory (:func:`judge_in_memory`), or
written into a sandbox and read back through the bundle's own reader."""


def judge_in_memory(setup: CalibrationSetup, rng: random.Random, trial: Trial) -> JudgedTrial:
    """:func:`~.trials.judge_trial`: no SoR stores anything, so every fault is effective."""
    return JudgedTrial(judge_trial(setup, rng, trial))


class TrialNotWritable(Exception):
    """The system of record cannot hold this trial (a column it lacks, a background row it
    refuses): a draw the generator made for another schema. The runner draws it again."""


class TrialRejected(TrialNotWritable):
    """The system of record refused to store the trial's own writes (a constraint, a type):
    the fault cannot happen there. A fault draw is counted *rejected by the SoR* (R-CAL-7); a
    gold control draw is drawn again, as a :class:`TrialNotWritable`."""


_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED


@dataclass(frozen=True)
class DrawSite:
    """One fault draw: its class, how the fault was made, its index, and where the fault is in
    the contract's own names (the effect and the fields it involves; never a value read from
    the SoR)."""

    fault_class: str
    variant: str
    trial: int
    effect: str = ""
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class FalseAccept(DrawSite):
    """One effective fault trial the judge VERIFIED."""


@dataclass(frozen=True)
class Draw:
    """One drawn trial: how its fault was made, the trial, its verdict (None: the SoR refused
    to store it, :class:`TrialRejected`), and the task parameter values it was generated and
    judged with (None for a contract without parameters, R-CAL-6)."""

    variant: str
    trial: Trial
    judged: JudgedTrial | None
    parameters: Mapping[str, Any] | None = None


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
    benign_draws: tuple[DrawSite, ...] = ()
    """Fault draws the sandbox stored as the correct record (R-CAL-7), local like the leaks."""
    rejected_draws: tuple[DrawSite, ...] = ()
    """Fault draws the sandbox refused to store (R-CAL-7)."""

    @property
    def draws(self) -> int:
        """Fault draws made: effective faults, benign and rejected together."""
        return self.summary.trials + self.summary.benign_trials + self.summary.rejected_trials


def default_gold_trials(trials: int) -> int:
    """Gold control trials run beside ``trials`` fault trials: a tenth, at least one."""
    return max(1, math.ceil(trials / 10))


def run_one(
    setup: CalibrationSetup, seed: int, kind: str, index: int, judge: TrialJudge = judge_in_memory
) -> Draw:
    """Draw trial ``index`` of ``kind`` and judge it; a :class:`TrialNotWritable` that is not
    a :class:`TrialRejected` propagates (the caller draws again)."""
    rng = trial_rng(seed, kind, index)
    # Its own generator, so a contract without parameters draws exactly what it drew before.
    bound = with_drawn_parameters(setup, trial_rng(seed, f"{PARAMETERS_STREAM}/{kind}", index))
    if kind.startswith(EXTRADUP_PREFIX):
        trial, variant = build_family_trial(bound, rng, kind.removeprefix(EXTRADUP_PREFIX))
    else:
        trial, variant = build_generic(bound, rng, kind)
    parameters = drawn_parameters(bound) if setup.parameters else None
    try:
        return Draw(variant, trial, judge(bound, rng, trial), parameters)
    except TrialRejected:
        return Draw(variant, trial, None, parameters)


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
    judge: TrialJudge = judge_in_memory,
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
            which is then drawn again, up to :data:`MAX_REDRAWS` times; a fault draw whose
            own writes the SoR refuses (:class:`TrialRejected`) or stores as the correct
            record (``benign``) is counted apart (R-CAL-7).
        held_out: mark the summary as made on a held-out corpus (R-MSG-5).
        task_rows: for a contract with task parameters, the rows each trial takes its values
            from (one per trial, drawn with the seed; checked against the declaration);
            None draws them from the declaration (R-CAL-6).

    Raises:
        ValidationError: bad arguments, ``families`` for another task, a gold control trial
            was not VERIFIED (R-CAL-3), a sandbox refused every draw of one trial, or no fault
            draw was an effective fault (R-CAL-7).
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

    def draw(kind: str, index: int, *, gold: bool) -> Draw:
        nonlocal redrawn
        reason = ""
        for attempt in range(MAX_REDRAWS):
            try:
                # A redraw gets its own generator: index + attempt * _MAX_TRIALS is no other
                # trial's index, and the run stays reproducible per seed.
                drawn = run_one(setup, seed, kind, index + attempt * _MAX_TRIALS, judge)
            except TrialNotWritable as exc:
                redrawn += 1
                reason = str(exc)
                continue
            if drawn.judged is None and gold:
                # The correct effect must be writable: a gold draw the SoR refused is drawn
                # again, and a schema that refuses every one stops calibration below.
                redrawn += 1
                reason = "a constraint of the sandbox's schema refused the gold write"
                continue
            return drawn
        raise ValidationError(
            f"calibration refused: {MAX_REDRAWS} draws of a {kind!r} trial could not be written "
            f"into the sandbox (last: {reason})"
        )

    def note(kind: str, index: int, drawn: Draw) -> None:
        nonlocal done
        judged = drawn.judged
        if judged is None:
            row: list[Any] = [kind, index, drawn.variant, "rejected"]
        else:
            decision = judged.decision
            row = [
                kind,
                index,
                drawn.variant,
                "benign" if judged.benign else "stored",
                RewardOutcome.Name(decision.outcome),
                digest_json(decision.evidence()),
            ]
        if drawn.parameters is not None:  # R-CAL-6: the values drawn are part of the run
            row.append(digest_json(dict(drawn.parameters)))
        transcript.append(row)
        done += 1
        if progress is not None:
            progress(done, total)

    # Gold first: a checker that cannot pay the right answer is refused before anything else.
    for index in range(golds):
        kind = gold_kinds[index % len(gold_kinds)]
        drawn = draw(kind, index, gold=True)
        note(kind, index, drawn)
        assert drawn.judged is not None  # draw() redraws a rejected gold trial
        decision = drawn.judged.decision
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

    per_class = {name: FaultClassCount(name=name) for name in classes}
    leaks: list[FalseAccept] = []
    benign_draws: list[DrawSite] = []
    rejected_draws: list[DrawSite] = []
    for index in range(trials):
        kind = classes[index % len(classes)]
        drawn = draw(kind, index, gold=False)
        note(kind, index, drawn)
        count = per_class[kind]
        site = (kind, drawn.variant, index, drawn.trial.effect, drawn.trial.fields)
        if drawn.judged is None:
            count.rejected += 1
            rejected_draws.append(DrawSite(*site))
        elif drawn.judged.benign:
            count.benign += 1
            benign_draws.append(DrawSite(*site))
        else:
            count.trials += 1
            if drawn.judged.decision.outcome == _VERIFIED:
                count.false_accepts += 1
                leaks.append(FalseAccept(*site))
    faults = sum(c.trials for c in per_class.values())
    benign = sum(c.benign for c in per_class.values())
    rejected = sum(c.rejected for c in per_class.values())
    if faults == 0:
        raise ValidationError(
            NO_EFFECTIVE_FAULT_MESSAGE,
            metadata={"benign": str(benign), "rejected": str(rejected)},
        )

    contract = bundle.contract
    summary = CalibrationSummary(
        reward_contract_digest=bundle.contract_digest,
        calibration_corpus_digest=contract.certificate_policy.calibration_corpus_digest,
        checker_configuration_digest=checker_configuration_digest(bundle),
        trials=faults,
        false_accepts=len(leaks),
        fault_classes=list(per_class.values()),
        generator_seed=seed,
        method=METHOD,
        confidence=1.0 - float(delta),
        threshold=contract.certificate_policy.threshold,
        gold_trials=golds,
        gold_refused=0,
        held_out=held_out,
        benign_trials=benign,
        rejected_trials=rejected,
    )
    validate_calibration_summary(summary)
    return CalibrationResult(
        summary=summary,
        epsilon=clopper_pearson_upper(len(leaks), faults, float(delta)),
        delta=float(delta),
        false_accept_trials=tuple(leaks),
        transcript_digest=digest_json(transcript),
        elapsed_seconds=time.perf_counter() - started,
        redrawn=redrawn,
        benign_draws=tuple(benign_draws),
        rejected_draws=tuple(rejected_draws),
    )
