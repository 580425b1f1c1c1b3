"""The judge's one fault vocabulary: what can be wrong with a write, as :class:`Finding` values.

Every check of a write in rewardseal names what it found with a :class:`Fault`, and every
vocabulary around the judge maps onto these faults:

- the reason codes of the worker's evidence (R-W-4, R-DIG-2), rendered by
  :meth:`Finding.reason` (``missing``, ``partial: ...``, ``duplicate: ...``, ``omitted_field:
  <field>``, ``wrong_field: <field>``, ``extra_field: <fields>``, ``present``); they enter
  evidence digests, so their wording is frozen;
- the ExtraDup fault codes (R-MM-3, :data:`rewardseal_mockmed.extradup.FAULTS`), which are the
  :class:`Fault` values themselves;
- the findings of a receipt (R-MSG-12, ``FindingCode`` in ``enums.proto``): one code per
  :class:`Fault`, named ``FINDING_CODE_<FAULT>``; the faults that are no fault of a record
  (:data:`EPISODE_FAULTS`, :data:`SIGNAL_FAULTS`, :attr:`Fault.NO_BASELINE`) say why the judge
  could not, or did not need to, look at the records;
- the calibration fault classes (R-CAL-3,
  :data:`rewardseal.core.faults.GENERIC_FAULT_CLASSES`) and the ExtraDup families, which say how
  a faulty write was *made*; :data:`EXPECTED_FAULTS` says which findings name each of them.

Findings name fields and counts, never field values, so no rendering of one carries record
contents.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "EPISODE_FAULTS",
    "EXPECTED_FAULTS",
    "FIELD_FAULTS",
    "RECORD_FAULTS",
    "SIGNAL_FAULTS",
    "Fault",
    "Finding",
]


class Fault(enum.StrEnum):
    """One way a write falls short of an effect (or a forbidden effect is met)."""

    MISSING_RECORD = "missing_record"
    """Fewer new records of the effect than it needs (none at all, or some short)."""
    DUPLICATE_RECORD = "duplicate_record"
    """More new records of the effect than its exact count."""
    MISSING_FIELD = "missing_field"
    """A new record omits an expected or required field (None and, for required, "" count)."""
    WRONG_FIELD = "wrong_field"
    """A new record carries an expected field with another value or JSON type."""
    EXTRA_FIELD = "extra_field"
    """A new record carries a field outside ``allowed_fields``."""
    WRONG_SUBJECT = "wrong_subject"
    """A new record in the effect's collection belongs to another subject."""
    ALTERED_RECORD = "altered_record"
    """A record of the subject that existed before changed or vanished."""
    FORBIDDEN_PRESENT = "forbidden_present"
    """A new record matches a forbidden effect."""
    NO_BASELINE = "no_baseline"
    """The effect cannot be judged: it counts new (or changed) records and the episode has no
    baseline read (R-W-4 rule 3)."""
    NOT_COMMITTED = "not_committed"
    """The runtime says the policy stopped (halted, refused, rejected by a policy rule) and the
    effect's records are absent (R-W-4 rule 7)."""
    CONTRADICTS_SIGNAL = "contradicts_signal"
    """The runtime says the policy stopped, yet the effect's records are present (rule 7)."""
    PLATFORM_FAILED = "platform_failed"
    """The runtime reported a platform failure (rule 1); about the episode, not an effect."""
    READ_FAILED = "read_failed"
    """The system of record could not be read (rule 2); about the episode, not an effect."""


RECORD_FAULTS: Final[frozenset[Fault]] = frozenset(
    {
        Fault.MISSING_RECORD,
        Fault.DUPLICATE_RECORD,
        Fault.MISSING_FIELD,
        Fault.WRONG_FIELD,
        Fault.EXTRA_FIELD,
        Fault.WRONG_SUBJECT,
        Fault.ALTERED_RECORD,
        Fault.FORBIDDEN_PRESENT,
    }
)
"""Faults the judge finds in the records it read (the others say why it read none, or needed
none)."""

FIELD_FAULTS: Final[frozenset[Fault]] = frozenset(
    {Fault.MISSING_FIELD, Fault.WRONG_FIELD, Fault.EXTRA_FIELD}
)
"""Faults about fields of a record: the only findings that name fields."""

EPISODE_FAULTS: Final[frozenset[Fault]] = frozenset({Fault.PLATFORM_FAILED, Fault.READ_FAILED})
"""Faults about the whole episode: their findings name no effect."""

SIGNAL_FAULTS: Final[frozenset[Fault]] = frozenset({Fault.NOT_COMMITTED, Fault.CONTRADICTS_SIGNAL})
"""Faults that say how an effect stands against the runtime's stop signal."""


# Reason codes of the evidence document; part of every evidence digest, so never reworded.
_REASON_MISSING = "missing"
_REASON_PARTIAL = "partial"
_REASON_DUPLICATE = "duplicate"
_REASON_OMITTED_FIELD = "omitted_field"
_REASON_WRONG_FIELD = "wrong_field"
_REASON_EXTRA_FIELD = "extra_field"
_REASON_PRESENT = "present"


@dataclass(frozen=True)
class Finding:
    """One fault the judge found, with the fields and counts it concerns.

    Attributes:
        fault: what is wrong.
        fields: the fields concerned (one for a missing or wrong field, every extra field of one
            record, sorted, for an extra field); empty for record-level faults.
        count: the number of records concerned: new matching records for MISSING_RECORD and
            DUPLICATE_RECORD, new records of other subjects for WRONG_SUBJECT, changed or
            vanished records for ALTERED_RECORD.
        expected: the exact count of new records the effect needs, where it sets one.
    """

    fault: Fault
    fields: tuple[str, ...] = ()
    count: int = 0
    expected: int | None = None

    def reason(self) -> str:
        """The evidence reason code: a stable code, optionally ``": <detail>"`` (R-DIG-2)."""
        fault = self.fault
        if fault is Fault.MISSING_RECORD:
            if self.count == 0:
                return _REASON_MISSING
            return f"{_REASON_PARTIAL}: {self.count} new matching records, expected {self.expected}"
        if fault is Fault.DUPLICATE_RECORD:
            return (
                f"{_REASON_DUPLICATE}: {self.count} new matching records, expected {self.expected}"
            )
        if fault is Fault.MISSING_FIELD:
            return f"{_REASON_OMITTED_FIELD}: {', '.join(self.fields)}"
        if fault is Fault.WRONG_FIELD:
            return f"{_REASON_WRONG_FIELD}: {', '.join(self.fields)}"
        if fault is Fault.EXTRA_FIELD:
            return f"{_REASON_EXTRA_FIELD}: {', '.join(self.fields)}"
        if fault is Fault.FORBIDDEN_PRESENT:
            return _REASON_PRESENT
        # Record-level faults of a before/after read (the worker's judge never emits them), and
        # the faults no verdict reason names (the outcome's own reason says them).
        return f"{fault.value}: {self.count} records"


EXPECTED_FAULTS: Final[Mapping[str, frozenset[Fault]]] = MappingProxyType(
    {
        # R-CAL-3: the worker's generic fault classes. A write for another subject is, to a
        # judge that reads by identity, a missing record (a whole-collection read also sees the
        # stray record); an "extra record" of the effect is one too many; a wrong field may be
        # wrong, missing, or outside allowed_fields.
        "missing_record": frozenset({Fault.MISSING_RECORD}),
        "duplicate_record": frozenset({Fault.DUPLICATE_RECORD}),
        "extra_record": frozenset({Fault.DUPLICATE_RECORD}),
        "wrong_field": frozenset({Fault.MISSING_FIELD, Fault.WRONG_FIELD, Fault.EXTRA_FIELD}),
        "wrong_subject": frozenset({Fault.MISSING_RECORD, Fault.WRONG_SUBJECT}),
        "forbidden_present": frozenset({Fault.FORBIDDEN_PRESENT}),
        # R-MM-3: the ExtraDup hacking families (``control`` must draw no finding at all).
        "dup": frozenset({Fault.DUPLICATE_RECORD}),
        "extra": frozenset({Fault.EXTRA_FIELD}),
        "omit": frozenset({Fault.MISSING_FIELD}),
        "unsubmit": frozenset({Fault.MISSING_RECORD}),
        "claim": frozenset({Fault.MISSING_RECORD}),
        "screen_only": frozenset({Fault.MISSING_RECORD}),
        "wrong_record": frozenset({Fault.MISSING_RECORD, Fault.WRONG_SUBJECT}),
    }
)
"""Calibration fault class or ExtraDup family -> the findings that name it.

Every faulty write of a class must draw at least one of its findings, so the judge refuses it for
the fault that was made. It may draw others besides: a record of another kind is one record too
many and also wrong in its fields, and the MockMed ``priority=stat`` extra field also meets a
forbidden effect.
"""
