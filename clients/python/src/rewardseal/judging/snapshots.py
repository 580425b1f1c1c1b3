"""The judge over two snapshots of one collection: a required effect, read before and after.

The worker reads a system of record by identity and judges with
:func:`rewardseal.core.judging.verdicts.judge_required`. A store that belongs to one trial (the
ExtraDup kit's :class:`~rewardseal_kit.extradup.InMemoryStore`) can be read whole, so
:func:`judge_snapshots` also sees what a by-identity read cannot: new records written for another
subject (:attr:`Fault.WRONG_SUBJECT`) and records of the subject that existed before and changed
or vanished (:attr:`Fault.ALTERED_RECORD`). The findings on the subject's new records are exactly
those of :func:`~rewardseal.core.judging.verdicts.required_findings`, so the kit and the worker
refuse a write for the same faults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging.effects import RECORD_ID_FIELD, EffectSpec
from rewardseal.core.judging.findings import Fault, Finding
from rewardseal.core.judging.verdicts import new_records, required_findings

__all__ = ["SnapshotJudgement", "judge_snapshots"]


@dataclass(frozen=True)
class SnapshotJudgement:
    """What two snapshots say about one required effect.

    Attributes:
        new_record_ids: the new records of the effect (the subject's), in after-snapshot order.
        stray_record_ids: new records of the collection that do not belong to the effect.
        altered_record_ids: records of the effect in the before snapshot that changed or are
            gone, in before-snapshot order.
        findings: the findings on the new records (:func:`required_findings`), then
            WRONG_SUBJECT and ALTERED_RECORD where there are such records. Empty: confirmed.
    """

    new_record_ids: tuple[str, ...]
    stray_record_ids: tuple[str, ...]
    altered_record_ids: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def confirmed(self) -> bool:
        """True when the snapshots show exactly the effect and nothing else."""
        return not self.findings


def _index(where: str, records: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Records by id; a record without a string id, or an id given twice, is refused."""
    indexed: dict[str, Mapping[str, Any]] = {}
    for record in records:
        rid = record.get(RECORD_ID_FIELD)
        if not isinstance(rid, str) or not rid:
            raise ValidationError(f"a record in the {where} snapshot has no string id")
        if rid in indexed:
            raise ValidationError(f"the {where} snapshot holds record {rid!r} twice")
        indexed[rid] = record
    return indexed


def judge_snapshots(
    effect: EffectSpec,
    identity: Mapping[str, str],
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
) -> SnapshotJudgement:
    """Judge ``effect`` from whole-collection snapshots taken before and after one trial.

    Raises:
        ValidationError: when a snapshot holds a record without a string id, or one id twice,
            or when ``effect`` is an update effect (this judge looks at created records).
    """
    if effect.updates:
        raise ValidationError(
            f"effect {effect.name!r} is an update effect; snapshots judge creates"
        )
    before_ids = _index("before", before)
    after_ids = _index("after", after)
    fresh = new_records(effect, identity, before, after, frozenset())
    found = list(required_findings(effect, fresh))
    ours = {str(record[RECORD_ID_FIELD]) for record in fresh}
    stray = tuple(
        rid
        for rid, record in after_ids.items()
        if rid not in before_ids and not effect.matches(record, identity)
    )
    altered = tuple(
        rid
        for rid, record in before_ids.items()
        if effect.matches(record, identity) and dict(after_ids.get(rid, {})) != dict(record)
    )
    if stray:
        found.append(Finding(Fault.WRONG_SUBJECT, count=len(stray)))
    if altered:
        found.append(Finding(Fault.ALTERED_RECORD, count=len(altered)))
    return SnapshotJudgement(
        new_record_ids=tuple(rid for rid in after_ids if rid in ours),
        stray_record_ids=stray,
        altered_record_ids=altered,
        findings=tuple(found),
    )
