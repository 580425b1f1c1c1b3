"""The outcome rules: verdicts, runtime signal and oracle health -> one outcome (R-W-4, R-W-5).

:func:`decide` maps the per-effect verdicts of :mod:`rewardseal.core.judging.verdicts`, the runtime
signal and the oracle's health to one outcome by the seven rules of R-W-4, first rule that fires
wins. :func:`judge_episode` judges every effect of one episode and decides. Everything here is
pure: the reads happen elsewhere, so the worker's engine and its calibration judge the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from rewardseal.core.digest import canonical_bytes, canonical_string
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging.effects import EffectSpec
from rewardseal.core.judging.verdicts import (
    EffectVerdict,
    Record,
    Verdict,
    judge_forbidden,
    judge_required,
)
from rewardseal.v1 import enums_pb2 as enums
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
    runtime_signal: RuntimeSignal.ValueType = enums.RUNTIME_SIGNAL_COMPLETED
    oracle_error: str | None = None

    def evidence(self) -> dict[str, Any]:
        """The evidence document the worker keeps; only its digest leaves (R-DIG-2, R-MSG-7).

        It holds verdicts, reasons, record ids, counts and the outcome, never record contents.
        The document :meth:`evidence_json` writes (without a salt).
        """
        document: dict[str, Any] = json.loads(self.evidence_json())
        return document

    def evidence_json(self, salt: str | None = None) -> bytes:
        """The canonical JSON (RFC 8785) of the evidence document, with ``salt`` as its
        ``"salt"`` member when given: the bytes the worker stores and digests (R-DIG-2).

        Written as text in canonical order (members sorted by name, strings by
        :data:`~rewardseal.core.digest.canonical_string`), not through canonical_json's walk of a
        built dict: the worker writes one per receipt. A property test holds it to rfc8785.

        Raises:
            ValidationError: a string holds a lone surrogate (no canonical form).
        """
        quote = canonical_string
        required = forbidden = confirmed = refuted = indeterminate = 0
        record_ids: set[str] = set()
        verdicts: list[str] = []
        for item in self.verdicts:
            if item.forbidden:
                forbidden += 1
            else:
                required += 1
            if item.verdict is Verdict.CONFIRMED:
                confirmed += 1
            elif item.verdict is Verdict.REFUTED:
                refuted += 1
            else:
                indeterminate += 1
            record_ids.update(item.record_ids)
            verdicts.append(
                f'{{"effect":{quote(item.effect)},'
                f'"kind":"{"forbidden" if item.forbidden else "required"}",'
                f'"reason":{quote(item.reason)},'
                f'"record_ids":[{",".join(map(quote, item.record_ids))}],'
                f'"verdict":"{item.verdict.value}"}}'
            )
        error = self.oracle_error
        return canonical_bytes(
            f'{{"counts":{{"confirmed":{confirmed},'
            f'"credited_records":{len(self.credited_record_ids)},'
            f'"forbidden":{forbidden},"indeterminate":{indeterminate},'
            f'"new_records":{len(record_ids)},"refuted":{refuted},"required":{required}}},'
            f'"credited_record_ids":[{",".join(map(quote, self.credited_record_ids))}],'
            f'"oracle_error":{"null" if error is None else quote(error)},'
            f'"outcome":{_name_json(_OUTCOME_JSON, RewardOutcome, self.outcome)},'
            f'"reason":{quote(self.reason)},"rule":{int(self.rule)},'
            f'"runtime_signal":{_name_json(_SIGNAL_JSON, RuntimeSignal, self.runtime_signal)},'
            + ("" if salt is None else f'"salt":{quote(salt)},')
            + f'"schema":{_SCHEMA_JSON},'
            f'"uncertainty":{_name_json(_UNCERTAINTY_JSON, Uncertainty, self.uncertainty)},'
            f'"verdicts":[{",".join(verdicts)}]}}'
        )


_SCHEMA_JSON = canonical_string(EVIDENCE_SCHEMA)


def _names_json(enum: Any) -> dict[int, str]:
    # Enum wrappers' Name() is a Python call per lookup; the worker writes three per receipt.
    return {value.number: canonical_string(value.name) for value in enum.DESCRIPTOR.values}


_OUTCOME_JSON = _names_json(RewardOutcome)
_UNCERTAINTY_JSON = _names_json(Uncertainty)
_SIGNAL_JSON = _names_json(RuntimeSignal)


def _name_json(names: Mapping[int, str], enum: Any, value: int) -> str:
    """The canonical text of an enum value's name (``enum.Name``'s error for an unknown one)."""
    text = names.get(value)
    return text if text is not None else canonical_string(enum.Name(value))


_KNOWN_SIGNALS = frozenset(RuntimeSignal.values()) - {0}
"""Every runtime signal but UNSPECIFIED (the enum wrapper rebuilds its value list per call)."""

_STOPPING_SIGNALS: Mapping[int, RewardOutcome.ValueType] = {
    enums.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT: (enums.REWARD_OUTCOME_HALTED_BEFORE_EFFECT),
    enums.RUNTIME_SIGNAL_REFUSED: enums.REWARD_OUTCOME_REFUSED,
    enums.RUNTIME_SIGNAL_REJECTED_POLICY: enums.REWARD_OUTCOME_REJECTED_POLICY,
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
    if runtime_signal == enums.RUNTIME_SIGNAL_FAILED_PLATFORM:
        return outcome(
            1,
            enums.REWARD_OUTCOME_FAILED_PLATFORM,
            enums.UNCERTAINTY_DELIVERY_UNCERTAIN,
            "the runtime reported a platform failure",
        )
    # Rule 2: the SoR could not be read; no verdict means anything.
    if oracle_error is not None:
        return outcome(
            2,
            enums.REWARD_OUTCOME_FAILED_PLATFORM,
            enums.UNCERTAINTY_ORACLE_UNAVAILABLE,
            f"the system of record could not be read ({oracle_error})",
        )
    # Rule 3: any INDETERMINATE verdict, required or forbidden.
    unsure = [v for v in verdicts if v.verdict is Verdict.INDETERMINATE]
    if unsure:
        return outcome(
            3,
            enums.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
            enums.UNCERTAINTY_EFFECT_UNCERTAIN,
            f"effect {unsure[0].effect!r} is indeterminate: {unsure[0].reason}",
        )
    # Rule 4: a forbidden effect is present, whatever the runtime said.
    present = [v for v in forbidden if v.verdict is Verdict.CONFIRMED]
    if present:
        return outcome(
            4,
            enums.REWARD_OUTCOME_WRONG_EFFECT,
            enums.UNCERTAINTY_NONE,
            f"forbidden effect {present[0].effect!r} is present",
        )
    if runtime_signal == enums.RUNTIME_SIGNAL_COMPLETED:
        if not required:
            raise ValidationError("a completed episode needs at least one required effect")
        refuted = [v for v in required if v.verdict is not Verdict.CONFIRMED]
        # Rule 5: every required effect CONFIRMED; only this outcome credits records.
        if not refuted:
            credited = tuple(sorted({rid for v in required for rid in v.record_ids}))
            return outcome(
                5,
                enums.REWARD_OUTCOME_VERIFIED,
                enums.UNCERTAINTY_NONE,
                "every required effect is confirmed",
                credited,
            )
        # Rule 6: a required effect REFUTED (missing, duplicate, extra/wrong/omitted field).
        return outcome(
            6,
            enums.REWARD_OUTCOME_WRONG_EFFECT,
            enums.UNCERTAINTY_NONE,
            f"required effect {refuted[0].effect!r} is refuted: {refuted[0].reason}",
        )
    # Rule 7: the policy stopped. Nothing written -> the stop is the outcome; something written
    # anyway contradicts the stop, so a person must reconcile it.
    stopped = _STOPPING_SIGNALS[runtime_signal]
    name = RuntimeSignal.Name(runtime_signal)
    written = [v for v in required if v.present]
    if written:
        return outcome(
            7,
            enums.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
            enums.UNCERTAINTY_EFFECT_UNCERTAIN,
            f"runtime signal {name} but required effect {written[0].effect!r} is present",
        )
    return outcome(
        7,
        stopped,
        enums.UNCERTAINTY_NONE,
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
