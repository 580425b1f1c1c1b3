"""The outcome rules: verdicts, runtime signal and oracle health -> one outcome (R-W-4, R-W-5).

:func:`decide` maps the per-effect verdicts of :mod:`rewardseal.judging.verdicts`, the runtime
signal and the oracle's health to one outcome by the seven rules of R-W-4, first rule that fires
wins. :func:`judge_episode` judges every effect of one episode and decides. Everything here is
pure: the reads happen elsewhere, so the worker's engine and its calibration judge the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from rewardseal.errors import ValidationError
from rewardseal.judging.effects import EffectSpec
from rewardseal.judging.verdicts import (
    EffectVerdict,
    Record,
    Verdict,
    judge_forbidden,
    judge_required,
)
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal, Uncertainty

__all__ = ["EVIDENCE_SCHEMA", "Decision", "decide", "judge_episode"]

EVIDENCE_SCHEMA = "rewardseal.evidence.v1"
"""Names the layout of :meth:`Decision.evidence`."""


@dataclass(frozen=True)
class Decision:
    """The outcome of one episode and the verdicts it rests on.

    ``rule`` is the R-W-4 rule (1-7) that fired; ``credited_record_ids`` are the records this
    receipt pays for (only a VERIFIED outcome credits records).
    """

    outcome: RewardOutcome.ValueType
    uncertainty: Uncertainty.ValueType
    reason: str
    verdicts: tuple[EffectVerdict, ...]
    credited_record_ids: tuple[str, ...]
    rule: int = 0
    runtime_signal: RuntimeSignal.ValueType = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
    oracle_error: str | None = None

    def evidence(self) -> dict[str, Any]:
        """The evidence document the worker keeps; only its digest leaves (R-DIG-2, R-MSG-7).

        It holds verdicts, reasons, record ids, counts and the outcome, never record contents.
        """
        counts = {verdict.value.lower(): 0 for verdict in Verdict}
        for item in self.verdicts:
            counts[item.verdict.value.lower()] += 1
        record_ids = {rid for item in self.verdicts for rid in item.record_ids}
        return {
            "schema": EVIDENCE_SCHEMA,
            "outcome": RewardOutcome.Name(self.outcome),
            "uncertainty": Uncertainty.Name(self.uncertainty),
            "rule": self.rule,
            "reason": self.reason,
            "runtime_signal": RuntimeSignal.Name(self.runtime_signal),
            "oracle_error": self.oracle_error,
            "verdicts": [
                {
                    "effect": item.effect,
                    "kind": "forbidden" if item.forbidden else "required",
                    "verdict": item.verdict.value,
                    "reason": item.reason,
                    "record_ids": list(item.record_ids),
                }
                for item in self.verdicts
            ],
            "credited_record_ids": list(self.credited_record_ids),
            "counts": {
                "required": sum(1 for item in self.verdicts if not item.forbidden),
                "forbidden": sum(1 for item in self.verdicts if item.forbidden),
                **counts,
                "new_records": len(record_ids),
                "credited_records": len(self.credited_record_ids),
            },
        }


_KNOWN_SIGNALS = frozenset(RuntimeSignal.values()) - {0}
"""Every runtime signal but UNSPECIFIED (the enum wrapper rebuilds its value list per call)."""

_STOPPING_SIGNALS: Mapping[int, RewardOutcome.ValueType] = {
    RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT: (
        RewardOutcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT
    ),
    RuntimeSignal.RUNTIME_SIGNAL_REFUSED: RewardOutcome.REWARD_OUTCOME_REFUSED,
    RuntimeSignal.RUNTIME_SIGNAL_REJECTED_POLICY: RewardOutcome.REWARD_OUTCOME_REJECTED_POLICY,
}


def decide(
    runtime_signal: RuntimeSignal.ValueType,
    *,
    oracle_error: str | None,
    required: Sequence[EffectVerdict],
    forbidden: Sequence[EffectVerdict],
) -> Decision:
    """Map a runtime signal, the oracle's health and the verdicts to an outcome (R-W-4).

    The rules are tried in order 1..7 and the first that fires wins.

    Raises:
        ValidationError: for an UNSPECIFIED or unknown runtime signal, or when rule 5/6 would
            have to judge a COMPLETED episode with no required effect (a vacuous VERIFIED).
    """
    if runtime_signal not in _KNOWN_SIGNALS:
        raise ValidationError(f"runtime signal {runtime_signal} is not a known signal")
    verdicts = (*required, *forbidden)
    name = RuntimeSignal.Name(runtime_signal)

    def outcome(
        rule: int,
        result: RewardOutcome.ValueType,
        uncertainty: Uncertainty.ValueType,
        reason: str,
        credited: tuple[str, ...] = (),
    ) -> Decision:
        return Decision(
            outcome=result,
            uncertainty=uncertainty,
            reason=f"R-W-4 rule {rule}: {reason}",
            verdicts=verdicts,
            credited_record_ids=credited,
            rule=rule,
            runtime_signal=runtime_signal,
            oracle_error=oracle_error,
        )

    # Rule 1: the runtime says the platform failed. Whether the policy's actions reached the
    # SoR is unknown, hence DELIVERY_UNCERTAIN (R-VAL-4 allows it on FAILED_PLATFORM).
    if runtime_signal == RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM:
        return outcome(
            1,
            RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM,
            Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN,
            "the runtime reported a platform failure",
        )
    # Rule 2: the SoR could not be read; no verdict means anything.
    if oracle_error is not None:
        return outcome(
            2,
            RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM,
            Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE,
            f"the system of record could not be read ({oracle_error})",
        )
    # Rule 3: any INDETERMINATE verdict, required or forbidden.
    unsure = [v for v in verdicts if v.verdict is Verdict.INDETERMINATE]
    if unsure:
        return outcome(
            3,
            RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
            Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN,
            f"effect {unsure[0].effect!r} is indeterminate: {unsure[0].reason}",
        )
    # Rule 4: a forbidden effect is present, whatever the runtime said.
    present = [v for v in forbidden if v.verdict is Verdict.CONFIRMED]
    if present:
        return outcome(
            4,
            RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT,
            Uncertainty.UNCERTAINTY_NONE,
            f"forbidden effect {present[0].effect!r} is present",
        )
    if runtime_signal == RuntimeSignal.RUNTIME_SIGNAL_COMPLETED:
        if not required:
            raise ValidationError("a completed episode needs at least one required effect")
        refuted = [v for v in required if v.verdict is not Verdict.CONFIRMED]
        # Rule 5: every required effect CONFIRMED; only this outcome credits records.
        if not refuted:
            credited = tuple(sorted({rid for v in required for rid in v.record_ids}))
            return outcome(
                5,
                RewardOutcome.REWARD_OUTCOME_VERIFIED,
                Uncertainty.UNCERTAINTY_NONE,
                "every required effect is confirmed",
                credited,
            )
        # Rule 6: a required effect REFUTED (missing, duplicate, extra/wrong/omitted field).
        return outcome(
            6,
            RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT,
            Uncertainty.UNCERTAINTY_NONE,
            f"required effect {refuted[0].effect!r} is refuted: {refuted[0].reason}",
        )
    # Rule 7: the policy stopped. Nothing written -> the stop is the outcome; something written
    # anyway contradicts the stop, so a person must reconcile it.
    stopped = _STOPPING_SIGNALS[runtime_signal]
    written = [v for v in required if v.present]
    if written:
        return outcome(
            7,
            RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
            Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN,
            f"runtime signal {name} but required effect {written[0].effect!r} is present",
        )
    return outcome(
        7,
        stopped,
        Uncertainty.UNCERTAINTY_NONE,
        f"runtime signal {name} and no required effect is present",
    )


def judge_episode(
    required_specs: Sequence[EffectSpec],
    forbidden_specs: Sequence[EffectSpec],
    identity: Mapping[str, str],
    baseline: Sequence[Record] | None,
    current: Sequence[Record] | None,
    runtime_signal: RuntimeSignal.ValueType,
    credited: Set[str] = frozenset(),
    oracle_error: str | None = None,
) -> Decision:
    """Judge every effect and decide the outcome of one episode.

    ``current`` is None when the SoR could not be read; ``oracle_error`` then says why (a missing
    reason is filled in, so a None read can never be judged as "nothing was written").
    ``credited`` holds the record ids already credited to other receipts for this identity.
    """
    if current is None:
        if oracle_error is None:
            oracle_error = "the system of record was not read"
        return decide(runtime_signal, oracle_error=oracle_error, required=(), forbidden=())
    required = [judge_required(s, identity, baseline, current, credited) for s in required_specs]
    forbidden = [judge_forbidden(s, identity, baseline, current, credited) for s in forbidden_specs]
    return decide(runtime_signal, oracle_error=oracle_error, required=required, forbidden=forbidden)
