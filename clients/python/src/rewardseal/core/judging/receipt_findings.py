"""A receipt's findings: why its outcome is what it is, per effect, in the contract's names
(R-MSG-12).

One vocabulary: a finding's code is a :class:`~rewardseal.core.judging.findings.Fault`, carried
on the receipt as the ``FindingCode`` of the same name (``FINDING_CODE_<FAULT>``). This module
turns a judged :class:`~rewardseal.core.judging.outcome.Decision` into findings
(:func:`decision_findings`), checks the findings of a receipt (:func:`validate_findings`, part of
every receipt's validation) and reads them back as plain values (:func:`read_findings`).

The privacy rule: a finding says what the contract checked and how it failed, nothing about
record contents the trainer did not write. It carries an effect name of the contract, a code,
and field names the contract's effects use; never a value, a record id, a count of another
subject's records or an oracle's error text. An extra field the contract does not name (a column
of the system of record outside every effect) is therefore not named: the finding says only that
the record carries a field outside ``allowed_fields``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from rewardseal.core.errors import ValidationError, preview
from rewardseal.core.judging.effects import EFFECT_NAME_PATTERN, IDENTIFIER_PATTERN, EffectSpec
from rewardseal.core.judging.findings import EPISODE_FAULTS, FIELD_FAULTS, Fault
from rewardseal.core.judging.outcome import Decision
from rewardseal.v1.enums_pb2 import FindingCode, RewardOutcome
from rewardseal.v1.receipt_pb2 import Finding as FindingMessage
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt

__all__ = [
    "CODE_OF_FAULT",
    "FAULT_OF_CODE",
    "MAX_FINDINGS",
    "MAX_FINDING_FIELDS",
    "ReceiptFinding",
    "contract_names",
    "decision_findings",
    "finding_messages",
    "findings_text",
    "read_findings",
    "validate_findings",
]

MAX_FINDINGS: Final = 64
"""Most findings one receipt carries; :func:`decision_findings` keeps the first ones."""
MAX_FINDING_FIELDS: Final = 32
"""Most field names one finding carries."""

_CODE_PREFIX = "FINDING_CODE_"

CODE_OF_FAULT: Final[Mapping[Fault, FindingCode.ValueType]] = MappingProxyType(
    {fault: FindingCode.Value(_CODE_PREFIX + fault.name) for fault in Fault}
)
"""Each fault's code on the wire (the module fails to import if the two vocabularies drift)."""

FAULT_OF_CODE: Final[Mapping[int, Fault]] = MappingProxyType(
    {code: fault for fault, code in CODE_OF_FAULT.items()}
)
"""A wire code's fault; every code but UNSPECIFIED has one."""

if set(FAULT_OF_CODE) != set(FindingCode.values()) - {0}:  # pragma: no cover - import guard
    raise ImportError("FindingCode and Fault are not one vocabulary")

_EPISODE_CODES = frozenset(CODE_OF_FAULT[fault] for fault in EPISODE_FAULTS)
_FIELD_CODES = frozenset(CODE_OF_FAULT[fault] for fault in FIELD_FAULTS)
_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED


@dataclass(frozen=True)
class ReceiptFinding:
    """One finding of a receipt, as plain values.

    Attributes:
        effect: the contract's effect name; "" for a finding about the episode
            (``platform_failed``, ``read_failed``).
        code: the fault's code, e.g. ``"duplicate_record"`` (a :class:`Fault` value).
        fields: the contract's field names involved, sorted; empty but for field faults.
    """

    effect: str
    code: str
    fields: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The JSON form every face shows: ``{"effect", "code", "fields"}``."""
        return {"effect": self.effect, "code": self.code, "fields": list(self.fields)}

    def text(self) -> str:
        """One word: ``effect:code`` or ``effect:code(field,field)`` (``-`` for no effect)."""
        named = f"({','.join(self.fields)})" if self.fields else ""
        return f"{self.effect or '-'}:{self.code}{named}"


def findings_text(findings: Iterable[ReceiptFinding]) -> str:
    """The findings as space-separated :meth:`ReceiptFinding.text` words ("" for none): the
    trainers' ``reward_findings`` column and the worker's debug log."""
    return " ".join(finding.text() for finding in findings)


def contract_names(effects: Iterable[EffectSpec]) -> frozenset[str]:
    """Every field name the effects use (select, expect, before, required and allowed fields):
    the names a finding may carry."""
    names: set[str] = set()
    for effect in effects:
        names.update(effect.select, effect.expect, effect.before, effect.required_fields)
        names.update(effect.allowed_fields or ())
    return frozenset(names)


def decision_findings(decision: Decision, names: frozenset[str]) -> tuple[ReceiptFinding, ...]:
    """The findings of one judged episode, in the contract's names only (R-MSG-12).

    By the R-W-4 rule that fired: a platform failure (1) or an unreadable system of record (2)
    is one finding about the episode; a stop signal (7) gives each required effect
    ``not_committed`` or, when its records are there anyway, ``contradicts_signal``; otherwise
    every verdict's findings in verdict order (required effects, then forbidden ones), so a
    VERIFIED decision has none. Field names outside ``names`` are dropped, repeats of one finding
    are given once, and at most :data:`MAX_FINDINGS` are kept.
    """
    if decision.rule == 1:
        return (ReceiptFinding("", Fault.PLATFORM_FAILED.value),)
    if decision.rule == 2:
        return (ReceiptFinding("", Fault.READ_FAILED.value),)
    found: dict[ReceiptFinding, None] = {}  # insertion-ordered set
    for verdict in decision.verdicts:
        if decision.rule == 7:
            if not verdict.forbidden:
                fault = Fault.CONTRADICTS_SIGNAL if verdict.present else Fault.NOT_COMMITTED
                found[ReceiptFinding(verdict.effect, fault.value)] = None
            continue
        for finding in verdict.findings:
            fields = tuple(sorted({f for f in finding.fields if f in names}))[:MAX_FINDING_FIELDS]
            found[ReceiptFinding(verdict.effect, finding.fault.value, fields)] = None
    return tuple(found)[:MAX_FINDINGS]


def finding_messages(findings: Sequence[ReceiptFinding]) -> list[FindingMessage]:
    """The wire form of ``findings`` (each code a known :class:`Fault` value)."""
    return [
        FindingMessage(effect=f.effect, code=CODE_OF_FAULT[Fault(f.code)], fields=f.fields)
        for f in findings
    ]


def validate_findings(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-12: the receipt's findings are few, in the vocabulary, and name only names.

    A VERIFIED receipt has none; each finding has a known code, an effect name (none for an
    episode finding), and field names only on a field fault: at most
    :data:`MAX_FINDING_FIELDS`, each an identifier, sorted and unique. No finding is given twice.

    Raises:
        ValidationError: the first rule broken.
    """
    findings = receipt.findings
    if not findings:
        return
    if receipt.reward_outcome == _VERIFIED:
        raise ValidationError("a VERIFIED receipt carries no findings")
    if len(findings) > MAX_FINDINGS:
        raise ValidationError(f"at most {MAX_FINDINGS} findings, got {len(findings)}")
    seen: set[tuple[str, int, tuple[str, ...]]] = set()
    for finding in findings:
        code, effect, fields = finding.code, finding.effect, tuple(finding.fields)
        if code not in FAULT_OF_CODE:
            raise ValidationError(f"finding code {code} is not a known code")
        if code in _EPISODE_CODES:
            if effect:
                raise ValidationError(f"a {FindingCode.Name(code)} finding names no effect")
        elif not EFFECT_NAME_PATTERN.match(effect):
            raise ValidationError(f"finding effect {preview(effect)} is not an effect name")
        if fields:
            if code not in _FIELD_CODES:
                raise ValidationError(f"a {FindingCode.Name(code)} finding names no fields")
            if len(fields) > MAX_FINDING_FIELDS:
                raise ValidationError(f"a finding names at most {MAX_FINDING_FIELDS} fields")
            for name in fields:
                if not IDENTIFIER_PATTERN.match(name):
                    raise ValidationError(f"finding field {preview(name)} is not a field name")
            if list(fields) != sorted(set(fields)):
                raise ValidationError("a finding's fields must be sorted and unique")
        key = (effect, code, fields)
        if key in seen:
            raise ValidationError("a receipt gives each finding once")
        seen.add(key)


def read_findings(receipt: RewardEvidenceReceipt) -> tuple[ReceiptFinding, ...]:
    """The findings of a validated receipt as plain values."""
    return tuple(
        ReceiptFinding(f.effect, FAULT_OF_CODE[f.code].value, tuple(f.fields))
        for f in receipt.findings
    )
