"""The three-valued verdict on one effect: CONFIRMED, REFUTED or INDETERMINATE (R-W-4).

:func:`judge_required` and :func:`judge_forbidden` look at the new records of one effect and say
whether the effect happened; the outcome rules that combine the verdicts live in
:mod:`rewardseal.core.judging.outcome`. :func:`required_findings` lists every fault of a required
effect's new records; a verdict rests on the first of them, and the ExtraDup kit reports all of
them (:mod:`rewardseal.core.judging.snapshots`).

A record is new for an episode when it is in the current read, absent from the baseline read, and
not already credited to another receipt (R-W-3: one written record never pays twice). An update
effect (:attr:`EffectSpec.updates`) is about records of the baseline read that changed: each such
change is known by a token (:func:`change_token`) that names the record and the version it
changed from, so one change never pays twice while a later change of the same record (or the
record created by an earlier episode) can still pay.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from rewardseal.core.digest import digest_json
from rewardseal.core.judging.effects import RECORD_ID_FIELD, EffectSpec, same_value
from rewardseal.core.judging.findings import Fault, Finding

__all__ = [
    "EffectVerdict",
    "Record",
    "Verdict",
    "change_findings",
    "change_token",
    "changed_fields",
    "changed_records",
    "judge_forbidden",
    "judge_required",
    "new_records",
    "record_id",
    "required_findings",
]

Record = Mapping[str, Any]
"""A read record: a ``"id"`` plus field name -> JSON scalar (None counts as absent)."""

# Verdict reasons that are no finding. Like Finding.reason they enter evidence digests, so their
# wording is frozen.
_REASON_CONFIRMED = "confirmed"
_REASON_NO_BASELINE = "no baseline for a count-new effect"
_REASON_NO_BASELINE_UPDATE = "no baseline for an update effect"
_CHANGE_TOKEN_HEX = 16
_REASON_ABSENT = "absent"
_NO_BASELINE = (Finding(Fault.NO_BASELINE),)


class Verdict(enum.Enum):
    """What the oracle's reads say about one effect."""

    CONFIRMED = "CONFIRMED"
    REFUTED = "REFUTED"
    INDETERMINATE = "INDETERMINATE"


@dataclass(frozen=True)
class EffectVerdict:
    """The verdict on one effect, why, and which new records it rests on.

    ``forbidden`` tells a forbidden effect's verdict (CONFIRMED = the effect is present) from a
    required one's in the evidence. ``findings`` are every fault behind a REFUTED required
    verdict (``reason`` names the first), the NO_BASELINE of an INDETERMINATE one, or the
    FORBIDDEN_PRESENT of a present forbidden effect; they are not part of the evidence
    document (its reasons are), but go on the receipt (R-MSG-12).
    """

    effect: str
    verdict: Verdict
    reason: str
    record_ids: tuple[str, ...]
    forbidden: bool = False
    # Not compared: two verdicts are equal by what the evidence holds of them.
    findings: tuple[Finding, ...] = dataclass_field(default=(), compare=False)

    @property
    def present(self) -> bool:
        """True when some new record belongs to the effect (even a wrong or duplicate one)."""
        return self.verdict is Verdict.CONFIRMED or bool(self.record_ids)


def record_id(record: Record) -> str:
    """The id a record is known by (its ``"id"`` as a string)."""
    return str(record[RECORD_ID_FIELD])


def new_records(
    effect: EffectSpec,
    identity: Mapping[str, str],
    baseline: Sequence[Record] | None,
    current: Sequence[Record],
    credited: Set[str],
) -> list[Record]:
    """Current records of the effect that are neither in the baseline nor credited, by id.

    Without a baseline every current record of the effect counts as new.
    """
    seen = {record_id(r) for r in baseline} if baseline is not None else set()
    fresh = [
        r
        for r in current
        if effect.matches(r, identity) and record_id(r) not in seen and record_id(r) not in credited
    ]
    # Sorted so the verdict and its evidence do not depend on the order the SoR returned rows.
    return sorted(fresh, key=record_id)


def change_token(before: Record) -> str:
    """The id a change is credited under: ``<record id>@<16 hex of the baseline version>``.

    The version's digest covers its non-None fields, so the same change seen by two episodes
    (whose baselines agree) has one token, and a later change from another version another.
    """
    version = {k: v for k, v in before.items() if v is not None}
    return f"{record_id(before)}@{digest_json(version)[7 : 7 + _CHANGE_TOKEN_HEX]}"


def changed_fields(before: Record, after: Record) -> frozenset[str]:
    """The fields whose value differs between two versions of one record (None = absent)."""
    names = (set(before) | set(after)) - {RECORD_ID_FIELD}
    return frozenset(
        name
        for name in names
        if not (
            (before.get(name) is None and after.get(name) is None)
            or same_value(before.get(name), after.get(name))
        )
    )


def changed_records(
    effect: EffectSpec,
    identity: Mapping[str, str],
    baseline: Sequence[Record],
    current: Sequence[Record],
    credited: Set[str],
) -> tuple[list[tuple[Record, Record]], list[Record]]:
    """An update effect's records that changed, and those that vanished, since the baseline.

    Both lists hold baseline records that match the effect's select and ``before`` values and
    whose change is not credited (:func:`change_token`); the first pairs each with its current
    version. Sorted by id, so the verdict does not depend on the order the SoR returned rows.
    """
    now = {record_id(r): r for r in current}
    changed: list[tuple[Record, Record]] = []
    vanished: list[Record] = []
    for before in sorted(baseline, key=record_id):
        if not effect.matches_before(before, identity) or change_token(before) in credited:
            continue
        after = now.get(record_id(before))
        if after is None:
            vanished.append(before)
        elif changed_fields(before, after):
            changed.append((before, after))
    return changed, vanished


def _field_findings(
    effect: EffectSpec, record: Record, changed: frozenset[str] | None = None
) -> list[Finding]:
    """Every way ``record`` falls short of the effect's expect, required and allowed fields.

    ``changed``: for an update, the fields that changed; only they must be allowed.
    """
    found: list[Finding] = []
    for field, wanted in sorted(effect.expect.items()):
        value = record.get(field)
        if value is None:  # None counts as absent
            found.append(Finding(Fault.MISSING_FIELD, (field,)))
        elif not same_value(value, wanted):
            found.append(Finding(Fault.WRONG_FIELD, (field,)))
    for field in sorted(effect.required_fields):
        if record.get(field) in (None, ""):  # written, but with nothing in it, is not written
            found.append(Finding(Fault.MISSING_FIELD, (field,)))
    if effect.allowed_fields is not None:
        written = (
            changed
            if changed is not None
            else {f for f, v in record.items() if f != RECORD_ID_FIELD and v is not None}
        )
        extra = sorted(field for field in written if field not in effect.allowed_fields)
        if extra:
            found.append(Finding(Fault.EXTRA_FIELD, tuple(extra)))
    return found


def required_findings(effect: EffectSpec, fresh: Sequence[Record]) -> tuple[Finding, ...]:
    """Every fault of a required effect's new records ``fresh``, the count fault first.

    The count fault (none, too few, too many) comes first, then each record's field faults in
    record order: expected fields (sorted), required fields (sorted), then its extra fields. An
    empty result means the effect is confirmed.
    """
    wanted = effect.new_records
    found: list[Finding] = []
    if not fresh or (wanted is not None and len(fresh) < wanted):
        found.append(Finding(Fault.MISSING_RECORD, count=len(fresh), expected=wanted))
    elif wanted is not None and len(fresh) > wanted:
        found.append(Finding(Fault.DUPLICATE_RECORD, count=len(fresh), expected=wanted))
    for record in fresh:
        found.extend(_field_findings(effect, record))
    return tuple(found)


def change_findings(
    effect: EffectSpec, changes: Sequence[tuple[Record, Record]]
) -> tuple[Finding, ...]:
    """Every fault of an update effect's changed records, the count fault first (as
    :func:`required_findings`): then each new version's expected and required fields, and the
    changed fields outside ``allowed_fields``."""
    wanted = effect.changed_records
    found: list[Finding] = []
    if not changes or (wanted is not None and len(changes) < wanted):
        found.append(Finding(Fault.MISSING_RECORD, count=len(changes), expected=wanted))
    elif wanted is not None and len(changes) > wanted:
        found.append(Finding(Fault.DUPLICATE_RECORD, count=len(changes), expected=wanted))
    for before, after in changes:
        found.extend(_field_findings(effect, after, changed_fields(before, after)))
    return tuple(found)


def _required_verdict(
    effect: EffectSpec, ids: tuple[str, ...], found: tuple[Finding, ...]
) -> EffectVerdict:
    """A required effect's verdict once its records are found: REFUTED by the first of
    ``found`` (all of them kept as the findings), CONFIRMED with ``ids`` when none."""
    if found:
        return EffectVerdict(effect.name, Verdict.REFUTED, found[0].reason(), ids, findings=found)
    return EffectVerdict(effect.name, Verdict.CONFIRMED, _REASON_CONFIRMED, ids)


def _judge_update(
    effect: EffectSpec,
    identity: Mapping[str, str],
    baseline: Sequence[Record] | None,
    current: Sequence[Record],
    credited: Set[str],
) -> EffectVerdict:
    if baseline is None:
        # Without a baseline no change can be seen, and no absence of one proven.
        return EffectVerdict(
            effect.name,
            Verdict.INDETERMINATE,
            _REASON_NO_BASELINE_UPDATE,
            (),
            findings=_NO_BASELINE,
        )
    changes, _ = changed_records(effect, identity, baseline, current, credited)
    ids = tuple(change_token(before) for before, _ in changes)
    return _required_verdict(effect, ids, change_findings(effect, changes))


def judge_required(
    effect: EffectSpec,
    identity: Mapping[str, str],
    baseline: Sequence[Record] | None,
    current: Sequence[Record],
    credited: Set[str],
) -> EffectVerdict:
    """Judge a required effect against the baseline and current reads of one identity.

    INDETERMINATE without a baseline when the effect counts new records; REFUTED when the number
    of new matching records is wrong (missing, partial, duplicate) or a new record omits an
    expected field, carries a different value, or carries a field outside allowed_fields, the
    reason naming the first finding of :func:`required_findings`; CONFIRMED otherwise, with the
    new record ids. An update effect is judged alike over its changed records
    (:func:`change_findings`; INDETERMINATE without a baseline), its ids being change tokens.
    """
    if effect.updates:
        return _judge_update(effect, identity, baseline, current, credited)
    if baseline is None and effect.new_records is not None:
        # Without a baseline a pre-existing row is indistinguishable from a new one.
        return EffectVerdict(
            effect.name, Verdict.INDETERMINATE, _REASON_NO_BASELINE, (), findings=_NO_BASELINE
        )
    fresh = new_records(effect, identity, baseline, current, credited)
    ids = tuple(record_id(r) for r in fresh)
    return _required_verdict(effect, ids, required_findings(effect, fresh))


def judge_forbidden(
    effect: EffectSpec,
    identity: Mapping[str, str],
    baseline: Sequence[Record] | None,
    current: Sequence[Record],
    credited: Set[str],
) -> EffectVerdict:
    """Judge a forbidden effect: CONFIRMED when a new record matches it, REFUTED otherwise.

    Without a baseline every current record not credited elsewhere counts as new; a forbidden
    create effect is then never INDETERMINATE (a count-new required effect already is, and rule 3
    fires before rule 4). A forbidden update effect is present when one of its baseline records
    changed (its new version carrying every ``expect`` value) or, with no ``expect``, vanished;
    without a baseline it is INDETERMINATE, since no change can be ruled out.
    """
    if effect.updates:
        if baseline is None:
            return EffectVerdict(
                effect.name,
                Verdict.INDETERMINATE,
                _REASON_NO_BASELINE_UPDATE,
                (),
                forbidden=True,
                findings=_NO_BASELINE,
            )
        changes, vanished = changed_records(effect, identity, baseline, current, credited)
        touched = [before for before, after in changes if _carries(after, effect.expect)]
        if not effect.expect:
            touched = sorted([*touched, *vanished], key=record_id)
        hits = tuple(change_token(before) for before in touched)
    else:
        fresh = new_records(effect, identity, baseline, current, credited)
        # A forbidden effect's ``expect`` narrows what counts as the forbidden state.
        hits = tuple(record_id(r) for r in fresh if _carries(r, effect.expect))
    if hits:
        present = Finding(Fault.FORBIDDEN_PRESENT, count=len(hits))
        return EffectVerdict(
            effect.name,
            Verdict.CONFIRMED,
            present.reason(),
            hits,
            forbidden=True,
            findings=(present,),
        )
    return EffectVerdict(effect.name, Verdict.REFUTED, _REASON_ABSENT, (), forbidden=True)


def _carries(record: Record, values: Mapping[str, Any]) -> bool:
    return all(same_value(record.get(field), value) for field, value in values.items())
