"""Effect specifications: what a record in the system of record must (or must not) look like.

The required and forbidden effect documents of a contract are plain JSON, bound to the contract by
digest (R-MSG-1) and kept with the worker. This module turns such a document into frozen
:class:`EffectSpec` values and answers "does this record belong to that effect?". The verdicts
themselves live in :mod:`rewardseal.core.judging.verdicts`.

Document shape::

    {"effects": [{"name": "triage_encounter_created",
                  "collection": "encounters",
                  "select": {"patient_id": {"identity": "patient_id"}},
                  "expect": {"type": "Triage"},
                  "required_fields": ["patient_id", "type", "note", "status"],
                  "new_records": 1,
                  "allowed_fields": ["patient_id", "type", "note", "status", "created_at"]}]}

An effect is about records the episode creates (``"change": "create"``, the default) or about
records that existed before it and that it changes (``"change": "update"``): a status change on
another record, for instance::

    {"name": "previous_ticket_closed", "collection": "tickets", "change": "update",
     "select": {"customer_id": {"identity": "customer_id"}},
     "before": {"status": "open"},
     "expect": {"status": "closed"},
     "changed_records": 1,
     "allowed_fields": ["status", "resolution", "updated_at"]}

An update effect's records are those of the baseline read that match ``select`` and ``before`` and
differ in the current read; ``expect`` and ``required_fields`` hold for their new version, and
``allowed_fields`` names the fields that may change. A forbidden update effect is present when
such a record changed at all (``expect`` narrowing what counts) or vanished.

A ``select`` or ``expect`` value may also be ``{"param": "qty"}``: the episode's value of the
contract's task parameter ``qty`` (R-MSG-11), bound at begin. :func:`bind_parameters` replaces
every such reference by the episode's value before judging; an unbound reference matches and
satisfies nothing, so a forgotten binding can only refuse, never pay.

A record is ``dict[str, Any]`` with a string ``"id"`` plus field name -> JSON scalar. A field whose
value is None counts as absent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from types import MappingProxyType
from typing import Any

from rewardseal.core.errors import ValidationError

IDENTIFIER_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
"""Collection, table, column and field names (they may end up in SQL, so no quoting games)."""

EFFECT_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
"""Effect names and identity keys (the contract's NAME pattern)."""

RECORD_ID_FIELD = "id"
"""The key every record carries its string id under."""

CHANGE_CREATE = "create"
"""The effect is about new records (the default)."""
CHANGE_UPDATE = "update"
"""The effect is about records that existed at the baseline and changed."""
CHANGES = frozenset({CHANGE_CREATE, CHANGE_UPDATE})

_EFFECT_KEYS = frozenset(
    {
        "name",
        "collection",
        "select",
        "expect",
        "required_fields",
        "new_records",
        "allowed_fields",
        "change",
        "before",
        "changed_records",
    }
)
_MAX_NEW_RECORDS = 1000


@dataclass(frozen=True)
class ParamRef:
    """A select or expect value that stands for the episode's task parameter ``name``
    (R-MSG-11), bound by :func:`bind_parameters` before judging.

    JSON form: ``{"param": "qty"}``.
    """

    name: str


@dataclass(frozen=True)
class IdentityRef:
    """A select value that stands for the episode's oracle identity value under ``key``.

    JSON form: ``{"identity": "patient_id"}``.
    """

    key: str


SelectValue = str | int | float | bool | IdentityRef | ParamRef
"""A select value: a literal (a string as written; any scalar once a parameter is bound), the
episode's identity value, or a task parameter."""


def identity_equals(value: Any, wanted: str) -> bool:
    """True when a record value names the identity value ``wanted``.

    Identity values travel as strings (a proto ``map<string, string>``), while a system of record
    may store the same id as an integer column; an integer therefore matches its decimal form.
    Booleans and floats never match: ``True`` is not patient ``"1"``.
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return value == wanted
    if isinstance(value, int):
        return str(value) == wanted
    return False


def same_value(actual: Any, expected: Any) -> bool:
    """JSON-scalar equality that does not let Python's ``True == 1`` through."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(actual, str) or isinstance(expected, str):
        return isinstance(actual, str) and isinstance(expected, str) and actual == expected
    return bool(actual == expected)


@dataclass(frozen=True)
class EffectSpec:
    """One required or forbidden effect on one collection of the system of record.

    Attributes:
        name: unique within its document.
        collection: the table or collection the effect lives in.
        select: field -> literal string or :class:`IdentityRef`; a record belongs to the effect
            when every selected field carries that value.
        expect: fields every matching new record must carry with exactly these values.
        new_records: for required effects, the exact number of NEW matching records (needs a
            baseline read); None means "at least one".
        allowed_fields: the fields (besides ``"id"``) a new record may carry with a non-None
            value; None allows any field.
        required_fields: fields every matching new record must carry with some non-empty value
            (a note must be written, whatever it says); an omitted one refutes the effect.
        change: :data:`CHANGE_CREATE` (new records) or :data:`CHANGE_UPDATE` (records of the
            baseline that changed; ``allowed_fields`` then names the fields that may change).
        before: for update effects, the values a record must carry in the baseline read to be
            one of the effect's records (a ticket that was ``open``).
        changed_records: for required update effects, the exact number of changed records;
            None means "at least one".
    """

    name: str
    collection: str
    select: Mapping[str, SelectValue]
    expect: Mapping[str, Any]
    new_records: int | None
    allowed_fields: frozenset[str] | None
    required_fields: frozenset[str] = frozenset()
    change: str = CHANGE_CREATE
    before: Mapping[str, Any] = dataclass_field(default_factory=lambda: MappingProxyType({}))
    changed_records: int | None = None

    @property
    def updates(self) -> bool:
        """True for an effect about existing records that changed."""
        return self.change == CHANGE_UPDATE

    def matches_before(self, record: Mapping[str, Any], identity: Mapping[str, str]) -> bool:
        """True when a baseline record is one of this update effect's: selected, and carrying
        every ``before`` value."""
        return self.matches(record, identity) and all(
            same_value(record.get(field), value) for field, value in self.before.items()
        )

    def matches(self, record: Mapping[str, Any], identity: Mapping[str, str]) -> bool:
        """True when ``record`` carries every selected value (identity refs resolved).

        An identity reference to a key missing from ``identity`` never matches: an effect must
        not widen to every subject because the caller forgot a key.
        """
        for field, wanted in self.select.items():
            value = record.get(field)
            if value is None:
                return False
            if isinstance(wanted, IdentityRef):
                subject = identity.get(wanted.key)
                if subject is None or not identity_equals(value, subject):
                    return False
            elif isinstance(wanted, ParamRef) or not same_value(value, wanted):
                return False
        return True

    def identity_keys(self) -> frozenset[str]:
        """The identity keys this effect selects on."""
        return frozenset(v.key for v in self.select.values() if isinstance(v, IdentityRef))

    def parameter_names(self) -> frozenset[str]:
        """The task parameters this effect refers to (in ``select`` and ``expect``)."""
        values = (*self.select.values(), *self.expect.values())
        return frozenset(v.name for v in values if isinstance(v, ParamRef))


def bind_parameters(
    specs: tuple[EffectSpec, ...], values: Mapping[str, str | int | float | bool]
) -> tuple[EffectSpec, ...]:
    """``specs`` with every :class:`ParamRef` replaced by its value in ``values`` (the
    episode's bound task parameters, R-W-18). An effect without references is returned as it
    is; a reference ``values`` lacks stays unbound (it matches and satisfies nothing).
    """
    if not values:
        return specs
    return tuple(_bound(spec, values) for spec in specs)


def _bound(spec: EffectSpec, values: Mapping[str, str | int | float | bool]) -> EffectSpec:
    if not spec.parameter_names():
        return spec

    def value(raw: Any) -> Any:
        return values.get(raw.name, raw) if isinstance(raw, ParamRef) else raw

    return replace(
        spec,
        select=MappingProxyType({f: value(v) for f, v in spec.select.items()}),
        expect=MappingProxyType({f: value(v) for f, v in spec.expect.items()}),
    )


def parse_effects(doc: Mapping[str, Any]) -> tuple[EffectSpec, ...]:
    """Parse an effects document ``{"effects": [...]}``.

    Unknown keys are refused rather than ignored: a misspelt ``"expects"`` would otherwise
    silently weaken the check that decides rewards.

    Raises:
        ValidationError: on any shape error, naming the effect and the field.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError("an effects document must be a JSON object")
    extra = set(doc) - {"effects"}
    if extra:
        raise ValidationError(f"effects document has unknown keys: {sorted(extra)}")
    entries = doc.get("effects")
    if not isinstance(entries, list):
        raise ValidationError("effects document must have an 'effects' list")
    specs = tuple(_parse_effect(entry, index) for index, entry in enumerate(entries))
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValidationError(f"effect names must be unique; repeated: {duplicates}")
    return specs


def _parse_effect(entry: Any, index: int) -> EffectSpec:
    if not isinstance(entry, Mapping):
        raise ValidationError(f"effects[{index}] must be a JSON object")
    name = entry.get("name")
    if not isinstance(name, str) or not EFFECT_NAME_PATTERN.match(name):
        raise ValidationError(f"effects[{index}].name must be a valid name")
    where = f"effect {name!r}"
    unknown = set(entry) - _EFFECT_KEYS
    if unknown:
        raise ValidationError(f"{where} has unknown keys: {sorted(unknown)}")
    collection = entry.get("collection")
    if not isinstance(collection, str) or not IDENTIFIER_PATTERN.match(collection):
        raise ValidationError(f"{where}: collection must match {IDENTIFIER_PATTERN.pattern}")

    change = entry.get("change", CHANGE_CREATE)
    if not isinstance(change, str) or change not in CHANGES:
        raise ValidationError(f"{where}: change must be one of {sorted(CHANGES)}")
    select = _parse_select(entry.get("select"), where)
    expect = _parse_expect(entry.get("expect", {}), where)
    new_records = _parse_new_records(entry.get("new_records"), where, "new_records")
    changed_records = _parse_new_records(entry.get("changed_records"), where, "changed_records")
    before = _parse_expect(entry.get("before", {}), where, "before")
    allowed = _parse_allowed(entry.get("allowed_fields"), where)
    required = _parse_required(entry.get("required_fields", []), where)
    # Each count and the baseline filter belong to one kind of change: a misplaced one would
    # silently not count.
    misplaced = ["changed_records", "before"] if change == CHANGE_CREATE else ["new_records"]
    present = [key for key in misplaced if key in entry]
    if present:
        raise ValidationError(f"{where}: {present} do not apply to change {change!r}")
    if change == CHANGE_UPDATE:
        # allowed_fields names the fields that may change; only an expected value outside them
        # is unsatisfiable (selected and required fields may stay as they were).
        outside = sorted(set(expect) - allowed) if allowed is not None else []
        if outside:
            raise ValidationError(
                f"{where}: expected fields {outside} are not in allowed_fields (the fields "
                "an update may change)"
            )
    elif allowed is not None:
        # A selected, expected or required field outside allowed_fields could never be
        # satisfied without also being an extra field: the effect would be unsatisfiable.
        outside = sorted((set(select) | set(expect) | required) - allowed - {RECORD_ID_FIELD})
        if outside:
            raise ValidationError(
                f"{where}: selected, expected or required fields {outside} are not in "
                "allowed_fields"
            )
    return EffectSpec(
        name=name,
        collection=collection,
        select=MappingProxyType(select),
        expect=MappingProxyType(expect),
        new_records=new_records,
        allowed_fields=allowed,
        required_fields=required,
        change=change,
        before=MappingProxyType(before),
        changed_records=changed_records,
    )


def _parse_required(raw: Any, where: str) -> frozenset[str]:
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: required_fields must be a list of field names")
    fields = [_check_field(field, where, "required_fields") for field in raw]
    if len(set(fields)) != len(fields):
        raise ValidationError(f"{where}: required_fields must be unique")
    return frozenset(fields)


def _check_field(field: Any, where: str, what: str) -> str:
    if not isinstance(field, str) or not IDENTIFIER_PATTERN.match(field):
        raise ValidationError(f"{where}: {what} field {field!r} is not a valid field name")
    return field


_SELECT_SHAPE = 'a string or a reference ({"identity": <key>} or {"param": <name>})'


def _parse_select(raw: Any, where: str) -> dict[str, SelectValue]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValidationError(f"{where}: select must be a non-empty JSON object")
    select: dict[str, SelectValue] = {}
    for field, value in raw.items():
        _check_field(field, where, "select")
        if isinstance(value, str):
            select[field] = value
        elif isinstance(value, Mapping) and set(value) == {"param"}:
            select[field] = _param_ref(value, where, f"select.{field}")
        elif isinstance(value, Mapping):
            key = value.get("identity")
            if set(value) != {"identity"} or not isinstance(key, str):
                raise ValidationError(f"{where}: select.{field} must be {_SELECT_SHAPE}")
            if not EFFECT_NAME_PATTERN.match(key):
                raise ValidationError(f"{where}: select.{field} names an invalid identity key")
            select[field] = IdentityRef(key)
        else:
            raise ValidationError(f"{where}: select.{field} must be {_SELECT_SHAPE}")
    return select


def _param_ref(value: Mapping[str, Any], where: str, what: str) -> ParamRef:
    name = value["param"]
    if not isinstance(name, str) or not EFFECT_NAME_PATTERN.match(name):
        raise ValidationError(f"{where}: {what} names an invalid task parameter")
    return ParamRef(name)


def _parse_expect(raw: Any, where: str, what: str = "expect") -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where}: {what} must be a JSON object")
    expect: dict[str, Any] = {}
    for field, value in raw.items():
        _check_field(field, where, what)
        if what == "expect" and isinstance(value, Mapping) and set(value) == {"param"}:
            expect[field] = _param_ref(value, where, f"{what}.{field}")
            continue
        # None would mean "absent", which no record can be required to carry.
        if value is None or not isinstance(value, str | int | float | bool):
            raise ValidationError(f"{where}: {what}.{field} must be a string, number or boolean")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"{where}: {what}.{field} must be finite")
        expect[field] = value
    return expect


def _parse_new_records(raw: Any, where: str, what: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= _MAX_NEW_RECORDS:
        raise ValidationError(f"{where}: {what} must be an integer in 1..{_MAX_NEW_RECORDS}")
    return raw


def _parse_allowed(raw: Any, where: str) -> frozenset[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: allowed_fields must be a list of field names")
    fields = [_check_field(field, where, "allowed_fields") for field in raw]
    if len(set(fields)) != len(fields):
        raise ValidationError(f"{where}: allowed_fields must be unique")
    return frozenset(fields)
