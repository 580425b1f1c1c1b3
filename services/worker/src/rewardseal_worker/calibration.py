"""Calibration: measure how often a contract's judge accepts a faulty effect (R-CAL-1..3).

Calibration runs where the corpus lives, inside the worker (R-CAL-2). It generates synthetic
episodes from a seeded generator, judges each one with :func:`~rewardseal.judging.judge_episode`
exactly as the scoring engine does (same effect specs, same identity, a baseline
read and a current read, runtime signal COMPLETED), and counts a *false accept* whenever a faulty
episode comes out VERIFIED. The output is a :class:`CalibrationSummary` (counts, never the
corpus) and epsilon, the exact one-sided Clopper-Pearson upper bound on the false-accept rate.

Fault classes (R-CAL-3) are derived from the contract's own effect documents:

``missing_record``
    a required effect has fewer new records than it needs: nothing written, one short, an
    existing record updated instead of a new one created, or the only new record already
    credited to another receipt (R-W-3);
``duplicate_record``
    an exact copy of the correct record posted again (effects with an exact count);
``extra_record``
    one more matching record with other content, or of another kind (effects with an exact
    count);
``wrong_field``
    an expected field with another value, another JSON type, or missing; or a field outside
    ``allowed_fields``;
``wrong_subject``
    the correct record written for another subject: a fresh one, a near miss of the identity
    value, or a subject that already has records;
``forbidden_present``
    a forbidden effect present, merged into the correct record or as a record of its own.

A class that a contract cannot express (no exact count, no expected field, no forbidden effect)
is left out. A caller that passes :class:`FaultFamilies` for the bundle's task (the seeded
MockMed bundles do, R-MM-3) adds the seven ExtraDup hacking families (``extradup.dup`` ...
``extradup.wrong_record``): each family's scripted action report is replayed on an
:class:`~rewardseal.extradup.InMemoryStore` that already holds background records, and the
store's before/after snapshots become the baseline and current reads. Their write spec comes from
the task's published effect document that the table carries, not from the bundle, so a bundle
that weakens the task's effects shows up as false accepts. Calibration knows no task by name:
which task gets the families, and from which document, is the caller's data.

Every trial also carries noise the judge must see through: background records of other subjects
and older records of the same subject (some already credited), concurrent writes for other
subjects, reads that are either filtered by identity (as the oracle reader returns them) or the
whole collection, NULL columns (a SQL read returns every column) and shuffled row order.

Gold control trials (the correct effect, the ExtraDup ``control`` family) must all judge
VERIFIED; one that does not makes calibration refuse (R-CAL-3): a checker that cannot pay the
right answer has a meaningless false-accept rate.

Trials are split round-robin over the fault classes. Each trial draws from its own generator,
seeded from the run's seed, its kind and its index, so a run is reproducible per seed.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TextIO

from rewardseal import extradup
from rewardseal.calibration import (
    EPSILON_KEY,
    METHOD,
    clopper_pearson_upper,
    summary_from_json,
    summary_to_json,
)
from rewardseal.clock import utc_now
from rewardseal.digest import digest_json
from rewardseal.errors import ValidationError
from rewardseal.faults import GENERIC_FAULT_CLASSES
from rewardseal.issuing import check_summary_for, issue_certificate
from rewardseal.judging import (
    RECORD_ID_FIELD,
    Decision,
    EffectSpec,
    IdentityRef,
    identity_equals,
    judge_episode,
    parse_effects,
)
from rewardseal.signing import SigningKey
from rewardseal.v1.certificate_pb2 import CalibrationSummary, FaultClassCount, RewardCertificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    RewardOutcome,
    RuntimeSignal,
)
from rewardseal.validation import validate_calibration_summary
from rewardseal_worker import __version__
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.oracles.base import recipe_identity_fields

__all__ = [
    "DEFAULT_TRIALS",
    "EPSILON_KEY",
    "EXTRADUP_PREFIX",
    "GENERIC_FAULT_CLASSES",
    "GOLD_REFUSED_MESSAGE",
    "JUDGE_VERSION",
    "CalibrationResult",
    "FalseAccept",
    "FaultFamilies",
    "ProgressCallback",
    "calibrate",
    "checker_configuration",
    "checker_configuration_digest",
    "default_gold_trials",
    "fault_classes_for",
    "self_signed_certificate",
    "summary_from_json",
    "summary_to_json",
    "text_progress",
]

Record = dict[str, Any]
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after every trial (gold and fault trials together)."""

DEFAULT_TRIALS: Final = 300
"""Fault trials of a default run: 0 false accepts in 300 gives epsilon 0.0099361 (R-CAL-1)."""
# The judge now lives in rewardseal.judging; the name keeps its old module path because it enters
# the checker configuration digest, which certificates carry.
JUDGE_VERSION: Final = f"rewardseal_worker.judge/{__version__}"
"""Names the judge implementation in the checker configuration digest."""
EXTRADUP_PREFIX: Final = "extradup."
"""Prefix of the ExtraDup family fault classes (``extradup.dup``, ...)."""
GOLD_REFUSED_MESSAGE: Final = "calibration refused: a gold control trial was not VERIFIED"
"""The message of the ValidationError raised when a gold control trial is refused (R-CAL-3)."""

_MAX_SEED = 2**64 - 1  # generator_seed is a uint64
_MAX_TRIALS = 1_000_000
_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
_COMPLETED = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
_GOLD = "gold"
_EXTRADUP_CONTROL = EXTRADUP_PREFIX + extradup.CONTROL
_EXTRA_FIELD_CANDIDATES = ("priority", "urgency", "flag", "escalation", "comment")
_WORDS = (
    "headache",
    "sore throat",
    "ankle sprain",
    "allergy flare",
    "low fever",
    "minor cut",
    "dry cough",
    "back stiffness",
    "vitals stable",
    "follow up",
)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# The setup derived from a bundle
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultFamilies:
    """The ExtraDup families a task adds to its calibration, and where their write spec comes from.

    ``required_effects`` is the task's published required-effects document (its first effect
    gives the write spec); the families apply only to bundles whose contract names ``task_id``
    with exactly ``identity_keys``.
    """

    task_id: str
    identity_keys: tuple[str, ...]
    required_effects: Mapping[str, Any]


@dataclass(frozen=True)
class _WriteSpecTemplate:
    """How to build the ExtraDup write spec of one trial (everything but the identity value)."""

    collection: str
    identity_field: str
    fields: Mapping[str, str]
    spec_count: int
    allowed_fields: frozenset[str]


@dataclass(frozen=True)
class _Setup:
    """Everything about a bundle the trial generator needs, computed once per run."""

    required: tuple[EffectSpec, ...]
    forbidden: tuple[EffectSpec, ...]
    identity_keys: tuple[str, ...]
    identity_fields: Mapping[str, str]
    collection: str
    columns: tuple[str, ...]
    generic_classes: tuple[str, ...]
    extradup_template: _WriteSpecTemplate | None
    extradup_families: tuple[str, ...]

    @property
    def fault_classes(self) -> tuple[str, ...]:
        return self.generic_classes + tuple(EXTRADUP_PREFIX + f for f in self.extradup_families)


def _select_fields(effect: EffectSpec) -> set[str]:
    return set(effect.select)


def _generic_classes(required: Sequence[EffectSpec], forbidden: Sequence[EffectSpec]) -> list[str]:
    counted = any(e.new_records is not None for e in required)
    fielded = any(e.expect or e.allowed_fields is not None for e in required)
    subject = any(e.identity_keys() for e in required)
    applicable = {
        "extra_record": counted,
        "duplicate_record": counted,
        "missing_record": True,
        "wrong_field": fielded,
        "wrong_subject": subject,
        "forbidden_present": bool(forbidden),
    }
    return [name for name in GENERIC_FAULT_CLASSES if applicable[name]]


def _families_apply(bundle: ContractBundle, families: FaultFamilies) -> bool:
    contract = bundle.contract
    keys = tuple(contract.oracle.identity_keys)
    return contract.task_id == families.task_id and keys == tuple(families.identity_keys)


def _template_from_effect(effect: EffectSpec) -> _WriteSpecTemplate | None:
    """The write spec an effect describes: its identity field, literal selects and expects.

    The spec's fields are only those the effect checks, so the ``omit`` family drops a field
    the contract actually demands. None when the effect cannot be written as an ExtraDup spec.
    """
    identity_fields = [f for f, v in effect.select.items() if isinstance(v, IdentityRef)]
    if len(identity_fields) != 1:
        return None
    fields: dict[str, str] = {f: v for f, v in effect.select.items() if isinstance(v, str)}
    for name, value in effect.expect.items():
        if not isinstance(value, str) or not value:
            return None
        fields[name] = value
    for name in sorted(effect.required_fields - set(fields) - {identity_fields[0]}):
        fields[name] = f"synthetic {name}"
    allowed = effect.allowed_fields if effect.allowed_fields is not None else frozenset()
    return _WriteSpecTemplate(
        collection=effect.collection,
        identity_field=identity_fields[0],
        fields=fields,
        spec_count=effect.new_records if effect.new_records is not None else 1,
        allowed_fields=allowed,
    )


def _setup(bundle: ContractBundle, families: FaultFamilies | None) -> _Setup:
    required, forbidden = tuple(bundle.required), tuple(bundle.forbidden)
    if not required:
        raise ValidationError("calibration needs a contract with at least one required effect")
    identity_fields = recipe_identity_fields(bundle.recipe)
    columns: set[str] = set(identity_fields.values())
    for effect in (*required, *forbidden):
        columns |= _select_fields(effect) | set(effect.expect)
        if effect.allowed_fields is not None:
            columns |= effect.allowed_fields
    columns.discard(RECORD_ID_FIELD)

    template: _WriteSpecTemplate | None = None
    names: tuple[str, ...] = ()
    if families is not None:
        if not _families_apply(bundle, families):
            raise ValidationError(
                f"these ExtraDup families are defined for the task {families.task_id!r} only"
            )
        # The task's published effect, not the bundle's: a weakened bundle must leak here.
        template = _template_from_effect(parse_effects(families.required_effects)[0])
        if template is not None:
            names = tuple(
                family
                for family in extradup.HACKING_FAMILIES
                if family != "omit" or any(f != template.identity_field for f in template.fields)
            )
    return _Setup(
        required=required,
        forbidden=forbidden,
        identity_keys=tuple(sorted(bundle.contract.oracle.identity_keys)),
        identity_fields=identity_fields,
        collection=required[0].collection,
        columns=tuple(sorted(columns)),
        generic_classes=tuple(_generic_classes(required, forbidden)),
        extradup_template=template,
        extradup_families=names,
    )


def fault_classes_for(
    bundle: ContractBundle, *, families: FaultFamilies | None = None
) -> tuple[str, ...]:
    """The fault classes :func:`calibrate` would run for ``bundle``, in round-robin order."""
    return _setup(bundle, families).fault_classes


def checker_configuration(bundle: ContractBundle) -> dict[str, Any]:
    """The document the checker configuration digest covers: what decides a verdict."""
    contract = bundle.contract
    return {
        "judge_version": JUDGE_VERSION,
        "recipe_kind": str(bundle.recipe.get("kind")),
        "required_effects_digest": contract.required_effects_digest,
        "forbidden_effects_digest": contract.forbidden_effects_digest,
        "threshold": contract.certificate_policy.threshold,
    }


def checker_configuration_digest(bundle: ContractBundle) -> str:
    """``digest_json`` of :func:`checker_configuration`."""
    return digest_json(checker_configuration(bundle))


def default_gold_trials(trials: int) -> int:
    """Gold control trials run beside ``trials`` fault trials: a tenth, at least one."""
    return max(1, math.ceil(trials / 10))


# --------------------------------------------------------------------------------------------
# Trial generation
# --------------------------------------------------------------------------------------------


class _World:
    """Mints record ids for one trial; ids are unique within the trial and carry no meaning."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._next = rng.randrange(1, 1_000_000)

    def mint(self) -> str:
        self._next += self._rng.randint(1, 7)
        return f"rec-{self._next:07d}"


def _slug(key: str) -> str:
    stem = key.removesuffix("_id").replace("_", "-").strip("-")
    return stem or "subject"


def _fresh_identity(
    rng: random.Random, keys: Sequence[str], avoid: Mapping[str, str]
) -> dict[str, str]:
    while True:
        identity = {k: f"{_slug(k)}-{rng.getrandbits(32):08x}" for k in keys}
        if all(identity[k] != avoid.get(k) for k in keys):
            return identity


def _near_miss(rng: random.Random, value: str) -> str:
    """A value that a careless comparison could take for ``value``."""
    candidates = [
        value.upper(),
        value + "0",
        value[:-1],
        value + " ",
        " " + value,
        value.replace("-", "_"),
    ]
    choices = [c for c in candidates if c and c != value]
    return rng.choice(choices)


def _filler(rng: random.Random, field: str) -> str:
    return f"Synthetic {field.replace('_', ' ')}: {rng.choice(_WORDS)} {rng.getrandbits(16):04x}"


def _other_value(rng: random.Random, value: Any) -> Any:
    """Another value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.randint(1, 9)
    if isinstance(value, float):
        return value + 0.5 + rng.random()
    text = str(value)
    return rng.choice(
        [t for t in (text.lower(), text.upper(), text + " ", f"Not {text}", "Consult") if t != text]
    )


def _type_confused(value: Any) -> Any:
    """The same text in another JSON type, which a sound judge must not take as equal.

    None when no other scalar type spells the value (a word has no number form).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if text.lstrip("-").isdigit():
        return int(text)
    return None


def _resolved_select(effect: EffectSpec, identity: Mapping[str, str]) -> Record:
    return {
        field: identity[wanted.key] if isinstance(wanted, IdentityRef) else wanted
        for field, wanted in effect.select.items()
    }


def _gold_record(
    rng: random.Random, effect: EffectSpec, identity: Mapping[str, str], world: _World
) -> Record:
    """A record that satisfies ``effect`` for ``identity``, with synthetic filler fields."""
    record: Record = {RECORD_ID_FIELD: world.mint()}
    record.update(_resolved_select(effect, identity))
    record.update(effect.expect)
    for field in sorted(effect.required_fields - set(record)):
        record[field] = _filler(rng, field)
    if effect.allowed_fields is not None:
        for field in sorted(effect.allowed_fields - set(record)):
            if rng.random() < 0.8:
                record[field] = _filler(rng, field)
    elif rng.random() < 0.5:
        record["comment"] = _filler(rng, "comment")
    return record


def _forbidden_fields(effect: EffectSpec, identity: Mapping[str, str]) -> Record:
    return {**_resolved_select(effect, identity), **effect.expect}


def _subject_columns(setup: _Setup, identity: Mapping[str, str]) -> Record:
    return {column: identity[key] for key, column in setup.identity_fields.items()}


@dataclass
class _Trial:
    """One synthetic episode before it is read: the SoR before and after, and credited ids."""

    identity: dict[str, str]
    baseline: list[Record]
    after: list[Record]
    credited: set[str]


def _background(
    setup: _Setup, rng: random.Random, identity: Mapping[str, str], world: _World
) -> tuple[list[Record], set[str], list[dict[str, str]]]:
    """Records already in the SoR (other subjects, older records of the same subject), the
    ids already credited to earlier receipts, and the other subjects."""
    records: list[Record] = []
    others: list[dict[str, str]] = []
    for _ in range(rng.randint(2, 6)):
        other = _fresh_identity(rng, setup.identity_keys, identity)
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
    setup: _Setup, rng: random.Random, identity: Mapping[str, str], world: _World
) -> list[Record]:
    """New records of other subjects written while the episode ran (other episodes' work)."""
    writes: list[Record] = []
    for _ in range(rng.randint(0, 2)):
        other = _fresh_identity(rng, setup.identity_keys, identity)
        writes.append(_gold_record(rng, rng.choice(setup.required), other, world))
    return writes


def _gold_writes(
    setup: _Setup, rng: random.Random, identity: Mapping[str, str], world: _World
) -> dict[str, list[Record]]:
    """The correct effect: for each required effect, exactly the records it asks for."""
    writes: dict[str, list[Record]] = {}
    for effect in setup.required:
        count = effect.new_records if effect.new_records is not None else rng.randint(1, 2)
        writes[effect.name] = [_gold_record(rng, effect, identity, world) for _ in range(count)]
    return writes


def _build_generic(setup: _Setup, rng: random.Random, fault: str) -> tuple[_Trial, str]:
    """A generic trial: the gold effect, then ``fault`` applied (``gold`` applies none)."""
    identity = _fresh_identity(rng, setup.identity_keys, {})
    world = _World(rng)
    baseline, credited, others = _background(setup, rng, identity, world)
    after = [dict(r) for r in baseline]
    writes = _gold_writes(setup, rng, identity, world)
    extra: list[Record] = []
    variant = "correct_effect"

    if fault == "missing_record":
        effect = rng.choice(setup.required)
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
                field = rng.choice(sorted(effect.expect))
                record[field] = _other_value(rng, effect.expect[field])
            own.append(record)
    elif fault == "wrong_field":
        effect = rng.choice([e for e in setup.required if e.expect or e.allowed_fields is not None])
        options = []
        if effect.expect:
            options += ["changed_value", "omitted_field", "null_field", "type_confused"]
        if effect.allowed_fields is not None:
            options.append("extra_field")
        variant = rng.choice(options)
        target = rng.choice(writes[effect.name])
        if variant == "extra_field":
            assert effect.allowed_fields is not None
            names = [n for n in _EXTRA_FIELD_CANDIDATES if n not in effect.allowed_fields]
            name = names[0] if names else f"extra_{rng.getrandbits(16):04x}"
            target[name] = _filler(rng, name) if rng.random() < 0.5 else "stat"
        else:
            field = rng.choice(sorted(effect.expect))
            if variant == "changed_value":
                target[field] = _other_value(rng, effect.expect[field])
            elif variant == "omitted_field":
                del target[field]
            elif variant == "null_field":
                target[field] = None
            else:
                confused = _type_confused(effect.expect[field])
                if confused is None:
                    variant = "changed_value"
                    confused = _other_value(rng, effect.expect[field])
                target[field] = confused
    elif fault == "wrong_subject":
        variant = rng.choice(["fresh_subject", "near_miss_subject", "known_subject"])
        decoy = dict(identity)
        for key in setup.identity_keys:
            if variant == "near_miss_subject":
                decoy[key] = _near_miss(rng, identity[key])
            elif variant == "fresh_subject":
                decoy[key] = _fresh_identity(rng, [key], identity)[key]
        if variant == "known_subject":
            decoy = dict(rng.choice(others))
        for effect in setup.required:
            if effect.identity_keys():
                for record in writes[effect.name]:
                    record.update(_resolved_select(effect, decoy))
    elif fault == "forbidden_present":
        effect = rng.choice(setup.forbidden)
        variant = rng.choice(["merged_into_record", "separate_record"])
        if variant == "merged_into_record":
            name = rng.choice(sorted(writes))
            rng.choice(writes[name]).update(_forbidden_fields(effect, identity))
        else:
            record = {RECORD_ID_FIELD: world.mint(), **_subject_columns(setup, identity)}
            record.update(_forbidden_fields(effect, identity))
            extra.append(record)
    elif fault != _GOLD:
        raise ValidationError(f"unknown fault class {fault!r}")

    for own in writes.values():
        after.extend(own)
    after.extend(extra)
    after.extend(_concurrent_writes(setup, rng, identity, world))
    return _Trial(identity, baseline, after, credited), variant


def _build_extradup(setup: _Setup, rng: random.Random, family: str) -> tuple[_Trial, str]:
    """An ExtraDup trial: the family's scripted report replayed on a store with background."""
    template = setup.extradup_template
    assert template is not None
    key = setup.identity_keys[0]
    identity = _fresh_identity(rng, [key], {})
    spec = extradup.WriteSpec(
        collection=template.collection,
        fields={template.identity_field: identity[key], **template.fields},
        spec_count=template.spec_count,
        allowed_fields=template.allowed_fields,
        identity_field=template.identity_field,
    )
    store = extradup.InMemoryStore()
    known: list[str] = []

    def background_row(subject: str) -> dict[str, str | None]:
        row: dict[str, str | None] = {**spec.fields, template.identity_field: subject}
        for field in sorted(template.allowed_fields - set(row)):
            row[field] = _filler(rng, field) if rng.random() < 0.8 else None
        return row

    for _ in range(rng.randint(2, 6)):
        subject = _fresh_identity(rng, [key], identity)[key]
        known.append(subject)
        store.insert(template.collection, background_row(subject))
    own_ids = [
        store.insert(template.collection, background_row(identity[key]))
        for _ in range(rng.randint(0, 2))
    ]
    credited = {rid for rid in own_ids if rng.random() < 0.5}
    decoy_kind = rng.choice(["fresh", "near_miss", "known"])
    if decoy_kind == "near_miss":
        decoy = _near_miss(rng, identity[key])
    elif decoy_kind == "known":
        decoy = rng.choice(known)
    else:
        decoy = _fresh_identity(rng, [key], identity)[key]
    before = store.records(template.collection)
    extradup.run_family(family, spec, store=store, decoy_identity=decoy)
    for _ in range(rng.randint(0, 1)):  # another episode's write, for another subject
        store.insert(template.collection, background_row(rng.choice(known)))
    after = store.records(template.collection)
    variant = f"decoy_{decoy_kind}" if family == "wrong_record" else "scripted"
    return _Trial(identity, before, after, credited), variant


def _read(
    setup: _Setup,
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


def _judge(setup: _Setup, rng: random.Random, trial: _Trial) -> Decision:
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


def _trial_rng(seed: int, kind: str, index: int) -> random.Random:
    # A string seed is hashed with SHA-512 by random.seed: stable across runs and platforms.
    return random.Random(f"rewardseal.calibration/{seed}/{kind}/{index}")


def _run_one(setup: _Setup, seed: int, kind: str, index: int) -> tuple[str, Decision]:
    rng = _trial_rng(seed, kind, index)
    if kind.startswith(EXTRADUP_PREFIX):
        trial, variant = _build_extradup(setup, rng, kind.removeprefix(EXTRADUP_PREFIX))
    else:
        trial, variant = _build_generic(setup, rng, kind)
    return variant, _judge(setup, rng, trial)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


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

    Raises:
        ValidationError: bad arguments, ``families`` for another task, or a gold control trial
            was not VERIFIED (R-CAL-3).
    """
    _check_int(seed, "seed", 0, _MAX_SEED)
    _check_int(trials, "trials", 1, _MAX_TRIALS)
    if isinstance(delta, bool) or not isinstance(delta, float | int) or not 0 < delta < 1:
        raise ValidationError(f"delta must be in (0, 1), got {delta!r}")
    golds = default_gold_trials(trials) if gold_trials is None else gold_trials
    _check_int(golds, "gold_trials", 1, _MAX_TRIALS)

    started = time.perf_counter()
    setup = _setup(bundle, families)
    classes = setup.fault_classes
    gold_kinds = [_GOLD] + ([_EXTRADUP_CONTROL] if setup.extradup_template is not None else [])
    total = golds + trials
    done = 0
    transcript: list[list[Any]] = []

    def note(kind: str, index: int, variant: str, decision: Decision) -> None:
        nonlocal done
        transcript.append(
            [
                kind,
                index,
                variant,
                RewardOutcome.Name(decision.outcome),
                digest_json(decision.evidence()),
            ]
        )
        done += 1
        if progress is not None:
            progress(done, total)

    # Gold first: a checker that cannot pay the right answer is refused before anything else.
    for index in range(golds):
        kind = gold_kinds[index % len(gold_kinds)]
        variant, decision = _run_one(setup, seed, kind, index)
        note(kind, index, variant, decision)
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
        variant, decision = _run_one(setup, seed, kind, index)
        note(kind, index, variant, decision)
        per_class[kind][0] += 1
        if decision.outcome == _VERIFIED:
            per_class[kind][1] += 1
            leaks.append(FalseAccept(kind, variant, index))

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
        held_out=False,
    )
    validate_calibration_summary(summary)
    return CalibrationResult(
        summary=summary,
        epsilon=clopper_pearson_upper(len(leaks), trials, float(delta)),
        delta=float(delta),
        false_accept_trials=tuple(leaks),
        transcript_digest=digest_json(transcript),
        elapsed_seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------------------------
# The self-signed synthetic certificate
# --------------------------------------------------------------------------------------------


def self_signed_certificate(
    bundle: ContractBundle,
    summary: CalibrationSummary,
    key: SigningKey,
    *,
    issued_at: datetime | None = None,
    issued_at_policy_update: int = 0,
    certificate_id: str | None = None,
) -> RewardCertificate:
    """A SELF_SIGNED, SYNTHETIC certificate for ``bundle`` from a calibration summary.

    Issued by :func:`rewardseal.issuing.issue_certificate`, as the control plane issues:
    epsilon recomputed from the summary's counts (R-CAL-4), delta ``1 - confidence`` (rounded to
    12 decimals, so 0.95 gives exactly 0.05), the expiry the contract's longest allowed. The
    summary must also come from this bundle's checker. The id defaults to ``cert.<contract id
    stem>.<first 12 hex of the contract digest>``.

    Raises:
        ValidationError: the summary is for another contract (ContractMismatch), corpus
            (CertificationRefused) or checker, or the certificate would not satisfy the
            contract's certificate policy (CertificationRefused).
    """
    contract = bundle.contract
    scope = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    issuer = CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
    check_summary_for(
        summary,
        contract.certificate_policy,
        contract_digest=bundle.contract_digest,
        scope=scope,
        issuer=issuer,
    )
    if summary.checker_configuration_digest != checker_configuration_digest(bundle):
        raise ValidationError("the calibration summary was made with another checker")
    stem = contract.contract_id.split(".", 1)[0] or "contract"
    return issue_certificate(
        summary,
        contract,
        key,
        contract_digest=bundle.contract_digest,
        certificate_id=certificate_id
        or f"cert.{stem}.{bundle.contract_digest.removeprefix('sha256:')[:12]}",
        # Whole seconds, as the worker has always stamped them (same inputs, same bytes).
        issued_at=(issued_at or utc_now()).replace(microsecond=0),
        scope=scope,
        issuer=issuer,
        issued_at_policy_update=issued_at_policy_update,
    )


# --------------------------------------------------------------------------------------------
# Progress bar
# --------------------------------------------------------------------------------------------


def text_progress(
    stream: TextIO,
    *,
    label: str = "calibrating",
    width: int = 30,
    min_interval: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressCallback:
    """A progress callback that redraws ``calibrating [#####.....] 150/300`` on ``stream``.

    The line is redrawn in place with ``\\r`` at most every ``min_interval`` seconds (the first
    and the last call always draw) and ends with a newline when ``done == total``.
    """
    last: list[float | None] = [None]

    def draw(done: int, total: int) -> None:
        now = clock()
        finished = total > 0 and done >= total
        previous = last[0]
        if not finished and previous is not None and now - previous < min_interval:
            return
        last[0] = now
        filled = width if total <= 0 else min(width, width * max(done, 0) // total)
        bar = "#" * filled + "." * (width - filled)
        stream.write(f"\r{label} [{bar}] {done}/{total}")
        if finished:
            stream.write("\n")
        stream.flush()

    return draw
