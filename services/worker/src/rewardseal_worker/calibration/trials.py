"""Synthetic calibration trials: the SoR before and after one faulty (or gold) episode.

Every trial carries noise the judge must see through: background records of other subjects and
older records of the same subject (some already credited), concurrent writes for other subjects,
reads that are either filtered by identity (as the oracle reader returns them) or the whole
collection, NULL columns (a SQL read returns every column) and shuffled row order. A trial is
judged with :func:`~rewardseal.core.judging.judge_episode` exactly as the scoring engine calls it.

Each trial draws from its own generator (:func:`trial_rng`), seeded from the run's seed, its kind
and its index, so a run is reproducible per seed; the order of the draws is part of that. The
values a trial is made of come from :mod:`.synthetic_values`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import (
    RECORD_ID_FIELD,
    Decision,
    EffectSpec,
    IdentityRef,
    change_token,
    changed_fields,
    identity_equals,
    judge_episode,
)
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_worker.calibration.fault_classes import CalibrationSetup
from rewardseal_worker.calibration.synthetic_values import (
    World,
    filler,
    fresh_identity,
    near_miss,
    other_value,
    type_confused,
)

__all__ = [
    "GOLD",
    "FieldTouch",
    "Record",
    "Trial",
    "build_generic",
    "judge_trial",
    "trial_rng",
]

Record = dict[str, Any]
GOLD: Final = "gold"
"""The generic gold control kind: the correct effect, no fault applied."""

_COMPLETED = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
_EXTRA_FIELD_CANDIDATES = ("priority", "urgency", "flag", "escalation", "comment")


def _resolved_select(effect: EffectSpec, identity: Mapping[str, str]) -> Record:
    return {
        field: identity[wanted.key] if isinstance(wanted, IdentityRef) else wanted
        for field, wanted in effect.select.items()
    }


def _gold_record(
    rng: random.Random, effect: EffectSpec, identity: Mapping[str, str], world: World
) -> Record:
    """A record that satisfies ``effect`` for ``identity``, with synthetic filler fields."""
    record: Record = {RECORD_ID_FIELD: world.mint()}
    record.update(_resolved_select(effect, identity))
    record.update(effect.expect)
    for field in sorted(effect.required_fields - set(record)):
        record[field] = filler(rng, field)
    if effect.allowed_fields is not None:
        for field in sorted(effect.allowed_fields - set(record)):
            if rng.random() < 0.8:
                record[field] = filler(rng, field)
    elif rng.random() < 0.5:
        record["comment"] = filler(rng, "comment")
    return record


def _forbidden_fields(effect: EffectSpec, identity: Mapping[str, str]) -> Record:
    return {**_resolved_select(effect, identity), **effect.expect}


def _subject_columns(setup: CalibrationSetup, identity: Mapping[str, str]) -> Record:
    return {column: identity[key] for key, column in setup.identity_fields.items()}


@dataclass(frozen=True)
class FieldTouch:
    """One field a fault trial wrote otherwise than the gold effect would have (R-CAL-7).

    ``gold`` is what the gold record holds there: the expected value, or None for a field the
    gold record leaves unset (an extra field). A sandbox that stores ``gold`` there anyway (a
    type coercion, a column default, a trigger) has normalized the fault away.
    """

    record_id: str
    field: str
    gold: Any


@dataclass
class Trial:
    """One synthetic episode before it is read: the SoR before and after, and credited ids.

    ``effect`` and ``fields`` name where the fault is, in the contract's own names (what
    ``calibrate --explain`` shows); ``touched`` lists the fields a field fault wrote, which a
    sandbox reads back to tell an effective fault from a benign one.
    """

    identity: dict[str, str]
    baseline: list[Record]
    after: list[Record]
    credited: set[str]
    effect: str = ""
    fields: tuple[str, ...] = ()
    touched: list[FieldTouch] = dataclasses.field(default_factory=list)


@dataclass
class _Site:
    """Where a trial's fault is, gathered while it is built (see :class:`Trial`)."""

    effect: str = ""
    fields: tuple[str, ...] = ()
    touched: list[FieldTouch] = dataclasses.field(default_factory=list)


def _background(
    setup: CalibrationSetup, rng: random.Random, identity: Mapping[str, str], world: World
) -> tuple[list[Record], set[str], list[dict[str, str]]]:
    """Records already in the SoR (other subjects, older records of the same subject), the
    ids already credited to earlier receipts, and the other subjects."""
    records: list[Record] = []
    others: list[dict[str, str]] = []
    for _ in range(rng.randint(2, 6)):
        other = fresh_identity(rng, setup.identity_keys, identity)
        others.append(other)
        records.append(_gold_record(rng, rng.choice(setup.required), other, world))
    own: list[Record] = []
    for _ in range(rng.randint(0, 3)):
        own.append(_gold_record(rng, rng.choice(setup.required), identity, world))
    if setup.forbidden and rng.random() < 0.3:
        # A forbidden state that predates the episode is not the episode's doing.
        record = _gold_record(rng, rng.choice(setup.required), identity, world)
        record.update(_forbidden_fields(rng.choice(setup.forbidden), identity))
        own.append(record)
    credited = {r[RECORD_ID_FIELD] for r in own if rng.random() < 0.5}
    return records + own, credited, others


def _concurrent_writes(
    setup: CalibrationSetup, rng: random.Random, identity: Mapping[str, str], world: World
) -> list[Record]:
    """New records of other subjects written while the episode ran (other episodes' work)."""
    writes: list[Record] = []
    for _ in range(rng.randint(0, 2)):
        other = fresh_identity(rng, setup.identity_keys, identity)
        writes.append(_gold_record(rng, rng.choice(setup.required), other, world))
    return writes


def _gold_writes(
    setup: CalibrationSetup, rng: random.Random, identity: Mapping[str, str], world: World
) -> dict[str, list[Record]]:
    """The correct effect: for each required create effect, exactly the records it asks for."""
    writes: dict[str, list[Record]] = {}
    for effect in setup.required:
        if effect.updates:
            continue
        count = effect.new_records if effect.new_records is not None else rng.randint(1, 2)
        writes[effect.name] = [_gold_record(rng, effect, identity, world) for _ in range(count)]
    return writes


Change = tuple[Record, Record]
"""One record of an update effect: its baseline version and its version after the episode."""


def _changed(
    setup: CalibrationSetup,
    rng: random.Random,
    effect: EffectSpec,
    before: Record,
    values: Mapping[str, Any],
) -> Record:
    """``before`` with ``values`` written, and some change whatever they are (an update that
    changes nothing is no update): a field the effect allows to change, else one the contract
    names (a real column, which a sandbox copy of the SoR holds)."""
    after = {**before, **values}
    if not changed_fields(before, after):
        pool = effect.allowed_fields if effect.allowed_fields is not None else setup.columns
        names = sorted(set(pool) - set(effect.select) - set(effect.before))
        name = names[0] if names else "comment"
        after[name] = filler(rng, name)
    return after


def _gold_change(
    setup: CalibrationSetup,
    rng: random.Random,
    effect: EffectSpec,
    identity: Mapping[str, str],
    world: World,
) -> Change:
    """A baseline record an update effect selects, and the change it asks for."""
    before: Record = {RECORD_ID_FIELD: world.mint(), **_resolved_select(effect, identity)}
    before.update(effect.before)
    for name in sorted(effect.required_fields - set(before)):
        before[name] = filler(rng, name)
    return before, _changed(setup, rng, effect, before, effect.expect)


def _gold_changes(
    setup: CalibrationSetup, rng: random.Random, identity: Mapping[str, str], world: World
) -> dict[str, list[Change]]:
    """The correct effect: for each required update effect, exactly the changes it asks for."""
    changes: dict[str, list[Change]] = {}
    for effect in setup.required:
        if effect.updates:
            count = effect.changed_records or rng.randint(1, 2)
            changes[effect.name] = [
                _gold_change(setup, rng, effect, identity, world) for _ in range(count)
            ]
    return changes


def _count(effect: EffectSpec) -> int | None:
    return effect.changed_records if effect.updates else effect.new_records


def _extra_field(setup: CalibrationSetup, rng: random.Random, effect: EffectSpec) -> str:
    """A field outside ``effect``'s allowed fields: first one the contract names elsewhere (a
    real column, which a sandbox copy of the SoR holds), else an invented one."""
    allowed = effect.allowed_fields or frozenset()
    named = [c for c in setup.columns if c not in allowed and c not in effect.select]
    names = named + [n for n in _EXTRA_FIELD_CANDIDATES if n not in allowed]
    return names[0] if names else f"extra_{rng.getrandbits(16):04x}"


def _fault_applies(effect: EffectSpec, fault: str) -> bool:
    if fault in ("duplicate_record", "extra_record"):
        return _count(effect) is not None
    if fault == "wrong_field":
        return bool(effect.expect) or effect.allowed_fields is not None
    return fault in ("missing_record", "forbidden_present")


def _update_target(setup: CalibrationSetup, rng: random.Random, fault: str) -> EffectSpec | None:
    """The update effect this trial's ``fault`` hits, or None for a create effect's turn.

    A bundle without an update effect the fault applies to draws nothing here, so the trials of
    create-only bundles stay what they were for a seed.
    """
    pool = setup.forbidden if fault == "forbidden_present" else setup.required
    eligible = [e for e in pool if _fault_applies(e, fault)]
    if not any(e.updates for e in eligible):
        return None
    chosen = rng.choice(eligible)
    return chosen if chosen.updates else None


def _change_fault(
    setup: CalibrationSetup,
    rng: random.Random,
    fault: str,
    effect: EffectSpec,
    identity: Mapping[str, str],
    world: World,
    changes: dict[str, list[Change]],
    credited: set[str],
    site: _Site,
) -> str:
    """Apply ``fault`` to the update effect ``effect``; return the variant played. ``site``
    (the trial being built) gets the fields the fault involves."""
    site.effect = effect.name
    if fault == "forbidden_present":
        site.fields = _literal_fields(effect)
        before: Record = {RECORD_ID_FIELD: world.mint(), **_subject_columns(setup, identity)}
        before.update(_resolved_select(effect, identity))
        before.update(effect.before)
        options = ["touched_record"] if effect.expect else ["touched_record", "deleted_record"]
        variant = rng.choice(options)
        after = (
            {}
            if variant == "deleted_record"
            else _changed(setup, rng, effect, before, effect.expect)
        )
        changes.setdefault(f"forbidden:{effect.name}", []).append((before, after))
        return variant
    own = changes[effect.name]
    if fault == "missing_record":
        options = ["nothing_changed", "change_credited_elsewhere"]
        if len(own) > 1 and effect.changed_records is not None:
            options.append("one_short")
        variant = rng.choice(options)
        if variant == "change_credited_elsewhere":
            # Another receipt already paid for these very changes (R-W-3).
            credited |= {change_token(before) for before, _ in own}
        else:
            undone = own if variant == "nothing_changed" else [rng.choice(own)]
            for before, changed in undone:
                changed.clear()
                changed.update(before)
        return variant
    if fault in ("duplicate_record", "extra_record"):
        variant = "changed_one_more" if fault == "duplicate_record" else "changed_another"
        own.append(_gold_change(setup, rng, effect, identity, world))
        return variant
    # wrong_field
    options = []
    if effect.expect:
        options += ["changed_value", "omitted_field", "null_field", "type_confused"]
    if effect.allowed_fields is not None:
        options.append("extra_field")
    variant = rng.choice(options)
    _, target = rng.choice(own)
    if variant == "extra_field":
        name = _extra_field(setup, rng, effect)
        target[name] = filler(rng, name)
        _touch(site, target, name, None)
        return variant
    name = rng.choice(sorted(effect.expect))
    _touch(site, target, name, effect.expect[name])
    if variant == "changed_value":
        target[name] = other_value(rng, effect.expect[name])
    elif variant in ("omitted_field", "null_field"):
        target[name] = None
    else:
        confused = type_confused(effect.expect[name])
        if confused is None:
            variant = "changed_value"
            confused = other_value(rng, effect.expect[name])
        target[name] = confused
    return variant


def _touch(site: _Site, record: Record, name: str, gold: Any) -> None:
    site.fields = (*site.fields, name)
    site.touched.append(FieldTouch(str(record[RECORD_ID_FIELD]), name, gold))


def _identity_fields(effect: EffectSpec) -> tuple[str, ...]:
    return tuple(sorted(f for f, v in effect.select.items() if isinstance(v, IdentityRef)))


def _literal_fields(effect: EffectSpec) -> tuple[str, ...]:
    literal = {f for f, v in effect.select.items() if not isinstance(v, IdentityRef)}
    return tuple(sorted(literal | set(effect.expect)))


def build_generic(setup: CalibrationSetup, rng: random.Random, fault: str) -> tuple[Trial, str]:
    """A generic trial: the gold effect, then ``fault`` applied (``gold`` applies none)."""
    identity = fresh_identity(rng, setup.identity_keys, {})
    world = World(rng)
    baseline, credited, others = _background(setup, rng, identity, world)
    after = [dict(r) for r in baseline]
    writes = _gold_writes(setup, rng, identity, world)
    changes = _gold_changes(setup, rng, identity, world)
    extra: list[Record] = []
    variant = "correct_effect"
    site = _Site()

    updated = _update_target(setup, rng, fault)
    if updated is not None:
        variant = _change_fault(
            setup, rng, fault, updated, identity, world, changes, credited, site
        )
    elif fault == "missing_record":
        effect = rng.choice([e for e in setup.required if not e.updates])
        site.effect = effect.name
        own = writes[effect.name]
        options = ["nothing_written", "credited_elsewhere", "updated_existing"]
        if len(own) > 1 and effect.new_records is not None:
            options.append("one_short")
        variant = rng.choice(options)
        if variant == "nothing_written":
            own.clear()
        elif variant == "one_short":
            own.pop(rng.randrange(len(own)))
        elif variant == "credited_elsewhere":
            # Another receipt already paid for these records (R-W-3).
            credited |= {r[RECORD_ID_FIELD] for r in own}
        else:
            # The policy edited an existing record of the subject instead of creating one.
            old = _gold_record(rng, effect, identity, world)
            baseline.append(old)
            edited = _gold_record(rng, effect, identity, world)
            edited[RECORD_ID_FIELD] = old[RECORD_ID_FIELD]
            after.append(edited)
            credited.discard(old[RECORD_ID_FIELD])
            own.clear()
    elif fault in ("duplicate_record", "extra_record"):
        effect = rng.choice([e for e in setup.required if e.new_records is not None])
        site.effect = effect.name
        own = writes[effect.name]
        if fault == "duplicate_record":
            variant = rng.choice(["posted_twice", "posted_three_times"])
            copies = 1 if variant == "posted_twice" else 2
            source = rng.choice(own)
            for _ in range(copies):
                own.append({**source, RECORD_ID_FIELD: world.mint()})
        else:
            options = ["second_record"]
            if effect.expect:
                options.append("record_of_another_kind")
            variant = rng.choice(options)
            record = _gold_record(rng, effect, identity, world)
            if variant == "record_of_another_kind":
                name = rng.choice(sorted(effect.expect))
                record[name] = other_value(rng, effect.expect[name])
                site.fields = (name,)
            own.append(record)
    elif fault == "wrong_field":
        effect = rng.choice(
            [
                e
                for e in setup.required
                if not e.updates and (e.expect or e.allowed_fields is not None)
            ]
        )
        options = []
        if effect.expect:
            options += ["changed_value", "omitted_field", "null_field", "type_confused"]
        if effect.allowed_fields is not None:
            options.append("extra_field")
        variant = rng.choice(options)
        target = rng.choice(writes[effect.name])
        site.effect = effect.name
        if variant == "extra_field":
            name = _extra_field(setup, rng, effect)
            target[name] = filler(rng, name) if rng.random() < 0.5 else "stat"
            _touch(site, target, name, None)
        else:
            name = rng.choice(sorted(effect.expect))
            _touch(site, target, name, effect.expect[name])
            if variant == "changed_value":
                target[name] = other_value(rng, effect.expect[name])
            elif variant == "omitted_field":
                del target[name]
            elif variant == "null_field":
                target[name] = None
            else:
                confused = type_confused(effect.expect[name])
                if confused is None:
                    variant = "changed_value"
                    confused = other_value(rng, effect.expect[name])
                target[name] = confused
    elif fault == "wrong_subject":
        variant = rng.choice(["fresh_subject", "near_miss_subject", "known_subject"])
        decoy = dict(identity)
        for key in setup.identity_keys:
            if variant == "near_miss_subject":
                decoy[key] = near_miss(rng, identity[key])
            elif variant == "fresh_subject":
                decoy[key] = fresh_identity(rng, [key], identity)[key]
        if variant == "known_subject":
            decoy = dict(rng.choice(others))
        for effect in setup.required:
            if effect.identity_keys():
                site.effect = site.effect or effect.name
                site.fields = tuple(sorted({*site.fields, *_identity_fields(effect)}))
                for record in writes.get(effect.name, ()):
                    record.update(_resolved_select(effect, decoy))
                for before, changed in changes.get(effect.name, ()):
                    # The decoy's record, changed: nothing of the subject's changed.
                    before.update(_resolved_select(effect, decoy))
                    changed.update(_resolved_select(effect, decoy))
    elif fault == "forbidden_present":
        effect = rng.choice([e for e in setup.forbidden if not e.updates])
        site.effect, site.fields = effect.name, _literal_fields(effect)
        variant = rng.choice(["merged_into_record", "separate_record"] if writes else ["separate"])
        variant = "separate_record" if variant == "separate" else variant
        if variant == "merged_into_record":
            name = rng.choice(sorted(writes))
            rng.choice(writes[name]).update(_forbidden_fields(effect, identity))
        else:
            record = {RECORD_ID_FIELD: world.mint(), **_subject_columns(setup, identity)}
            record.update(_forbidden_fields(effect, identity))
            extra.append(record)
    elif fault != GOLD:
        raise ValidationError(f"unknown fault class {fault!r}")

    for own in writes.values():
        after.extend(own)
    for pairs in changes.values():
        for before, changed in pairs:
            baseline.append(before)
            if changed:  # an empty version: the record vanished
                after.append(changed)
    after.extend(extra)
    after.extend(_concurrent_writes(setup, rng, identity, world))
    trial = Trial(identity, baseline, after, credited, site.effect, site.fields, site.touched)
    return trial, variant


def _read(
    setup: CalibrationSetup,
    rng: random.Random,
    records: Sequence[Record],
    identity: Mapping[str, str],
    *,
    filtered: bool,
    padded: bool,
) -> list[Record]:
    """What an oracle read would return: by identity or the whole collection, maybe padded with
    NULL columns, in arbitrary order."""
    rows = [
        dict(r)
        for r in records
        if not filtered
        or all(identity_equals(r.get(c), identity[k]) for k, c in setup.identity_fields.items())
    ]
    if padded:
        for row in rows:
            for column in setup.columns:
                row.setdefault(column, None)
    rng.shuffle(rows)
    return rows


def judge_trial(setup: CalibrationSetup, rng: random.Random, trial: Trial) -> Decision:
    filtered = rng.random() < 0.5
    padded = rng.random() < 0.5
    baseline = _read(setup, rng, trial.baseline, trial.identity, filtered=filtered, padded=padded)
    current = _read(setup, rng, trial.after, trial.identity, filtered=filtered, padded=padded)
    # Exactly the engine's call: the bundle's specs, COMPLETED (the only signal that can pay).
    return judge_episode(
        setup.required,
        setup.forbidden,
        identity=dict(trial.identity),
        baseline=baseline,
        current=current,
        runtime_signal=_COMPLETED,
        credited=frozenset(trial.credited),
        oracle_error=None,
    )


def trial_rng(seed: int, kind: str, index: int) -> random.Random:
    # A string seed is hashed with SHA-512 by random.seed: stable across runs and platforms.
    return random.Random(f"rewardseal.core.calibration/{seed}/{kind}/{index}")
