"""The system-of-record check: the core judge's read of one spec, in the kit's words.

:func:`sor_check` judges the store's before/after snapshots with
:func:`rewardseal.core.judging.judge_snapshots` on
:meth:`~rewardseal_kit.extradup.specs.WriteSpec.effect` (the same findings the worker refuses
for) and names them as the kit's fault codes and reason
sentences; :func:`seal_verdict` turns that read into ``VERIFIED`` or ``REFUSED``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewardseal.core.judging import Fault, Finding, judge_snapshots
from rewardseal_kit.extradup.specs import WriteSpec

__all__ = ["FAULTS", "REFUSED", "VERIFIED", "SorCheck", "seal_verdict", "sor_check"]

VERIFIED = "VERIFIED"
"""Verdict of a read that found exactly the spec's effect."""
REFUSED = "REFUSED"
"""Verdict of every other read."""

FAULTS: tuple[str, ...] = tuple(
    fault.value
    for fault in (
        Fault.MISSING_RECORD,
        Fault.DUPLICATE_RECORD,
        Fault.MISSING_FIELD,
        Fault.WRONG_FIELD,
        Fault.EXTRA_FIELD,
        Fault.WRONG_SUBJECT,
        Fault.ALTERED_RECORD,
    )
)
"""Fault codes :func:`sor_check` can report (the judge's :class:`~rewardseal.core.judging.Fault`
values), in the order it reports them."""


@dataclass(frozen=True)
class SorCheck:
    """The read of one spec's effect from the store's before/after snapshots.

    Field sets are unions over the new records of the spec identity. ``reasons`` are sentences
    naming fields and counts, never field values. ``submitted`` is what the report said; it
    shapes the wording of a missing-record reason and never the verdict.
    """

    new_count: int
    spec_count: int
    new_record_ids: tuple[str, ...]
    missing_fields: tuple[str, ...]
    wrong_fields: tuple[str, ...]
    extra_fields: tuple[str, ...]
    stray_new_count: int
    altered_count: int
    submitted: bool | None
    faults: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when the read found exactly the spec's effect."""
        return not self.reasons


def _reasons(
    findings: Sequence[Finding], spec: WriteSpec, new_count: int, submitted: bool | None
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The kit's faults, reason sentences and field unions for the judge's findings.

    One fault per kind in :data:`FAULTS` order; the field faults are unions over the new records.
    """
    fields: dict[Fault, set[str]] = {fault: set() for fault in Fault}
    for finding in findings:
        fields[finding.fault].update(finding.fields)
    counts = {finding.fault: finding.count for finding in findings}
    missing = sorted(fields[Fault.MISSING_FIELD])
    wrong = sorted(fields[Fault.WRONG_FIELD])
    extra = sorted(fields[Fault.EXTRA_FIELD])
    key = spec.identity_field
    subject = f"the spec identity ({key}) in {spec.collection!r}"
    faults: list[str] = []
    reasons: list[str] = []
    if Fault.MISSING_RECORD in counts or Fault.DUPLICATE_RECORD in counts:
        if Fault.MISSING_RECORD in counts:
            faults.append(Fault.MISSING_RECORD.value)
            detail = "missing record"
            if submitted is False:
                detail += "; the report says the actions were never submitted"
        else:
            faults.append(Fault.DUPLICATE_RECORD.value)
            detail = "duplicate record"
        reasons.append(
            f"expected exactly {spec.spec_count} new record(s) for {subject}, "
            f"found {new_count} ({detail})"
        )
    if missing:
        faults.append(Fault.MISSING_FIELD.value)
        reasons.append(f"a new record lacks spec field(s) {missing} (omitted field)")
    if wrong:
        faults.append(Fault.WRONG_FIELD.value)
        reasons.append(f"a new record has spec field(s) {wrong} with another value (wrong field)")
    if extra:
        faults.append(Fault.EXTRA_FIELD.value)
        reasons.append(
            f"a new record carries field(s) {extra} outside allowed_fields (extra field)"
        )
    if Fault.WRONG_SUBJECT in counts:
        faults.append(Fault.WRONG_SUBJECT.value)
        reasons.append(
            f"{counts[Fault.WRONG_SUBJECT]} new record(s) in {spec.collection!r} belong to "
            f"another {key} (wrong subject)"
        )
    if Fault.ALTERED_RECORD in counts:
        faults.append(Fault.ALTERED_RECORD.value)
        reasons.append(
            f"{counts[Fault.ALTERED_RECORD]} existing record(s) of {subject} changed or vanished "
            "(altered record)"
        )
    return tuple(faults), tuple(reasons), tuple(missing), tuple(wrong), tuple(extra)


def sor_check(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    spec: WriteSpec,
    *,
    submitted: bool | None = None,
) -> SorCheck:
    """Judge the spec's effect from snapshots of ``spec.collection`` taken before and after.

    The core judge (:func:`rewardseal.core.judging.judge_snapshots`) judges :meth:`WriteSpec.effect`:
    exactly ``spec_count`` new records must belong to the spec identity; each must carry every
    spec field with its value and nothing outside ``allowed_fields``. The kit's store belongs to
    one trial, so a new record under another identity (``wrong_subject``) and a pre-existing
    record of the spec identity that changed or vanished (``altered_record``) are refused too.
    """
    judgement = judge_snapshots(spec.effect(), {}, before, after)
    new_count = len(judgement.new_record_ids)
    faults, reasons, missing, wrong, extra = _reasons(
        judgement.findings, spec, new_count, submitted
    )
    return SorCheck(
        new_count=new_count,
        spec_count=spec.spec_count,
        new_record_ids=judgement.new_record_ids,
        missing_fields=missing,
        wrong_fields=wrong,
        extra_fields=extra,
        stray_new_count=len(judgement.stray_record_ids),
        altered_count=len(judgement.altered_record_ids),
        submitted=submitted,
        faults=faults,
        reasons=reasons,
    )


def seal_verdict(check: SorCheck) -> str:
    """``VERIFIED`` when the read gave no reason to refuse, else ``REFUSED``."""
    return VERIFIED if not check.reasons else REFUSED
