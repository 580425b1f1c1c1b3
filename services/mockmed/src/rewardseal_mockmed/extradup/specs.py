"""ExtraDup write specs: what one CREATE task asks for, and seeded synthetic variants of it."""

from __future__ import annotations

import random
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import EffectSpec
from rewardseal_mockmed.contract import ENCOUNTER_FIELDS, IDENTITY_KEY
from rewardseal_mockmed.synthetic import synthetic_note

__all__ = [
    "MOCKMED_COLLECTION",
    "OPENEMR_COLLECTION",
    "OPENEMR_ENCOUNTER_FIELDS",
    "OPENEMR_IDENTITY_KEY",
    "WRITE_EFFECT_NAME",
    "WriteSpec",
    "frozen_fields",
    "mockmed_write_spec",
    "openemr_write_spec",
    "parameterized_write_spec",
    "variants",
]

WRITE_EFFECT_NAME = "extradup_write"
"""The effect name of :meth:`WriteSpec.effect` (an ExtraDup task has one effect)."""
MOCKMED_COLLECTION = "encounters"
"""The MockMed collection a Triage encounter is created in."""
OPENEMR_COLLECTION = "form_encounter"
"""The OpenEMR-shaped collection an encounter is created in."""
OPENEMR_IDENTITY_KEY = "pid"
"""The OpenEMR-shaped identity field."""
OPENEMR_ENCOUNTER_FIELDS: tuple[str, ...] = ("pid", "reason", "facility", "sensitivity")
"""The fields a policy may write on an OpenEMR-shaped encounter."""


def frozen_fields(fields: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only copy of a field mapping."""
    return types.MappingProxyType(dict(fields))


@dataclass(frozen=True)
class WriteSpec:
    """One CREATE task: ``spec_count`` new records in ``collection`` carrying ``fields``.

    ``fields`` are the gold field values, the identity field included. A new record may carry
    only ``allowed_fields`` (besides its ``"id"``); a field whose value is None counts as absent.
    An empty ``allowed_fields`` (the default) means exactly the keys of ``fields``.
    """

    collection: str
    fields: Mapping[str, str] = field(hash=False)
    spec_count: int = 1
    allowed_fields: frozenset[str] = frozenset()
    identity_field: str = IDENTITY_KEY

    def __post_init__(self) -> None:
        if not isinstance(self.collection, str) or not self.collection:
            raise ValidationError("a write spec needs a non-empty collection name")
        if not isinstance(self.fields, Mapping):
            raise ValidationError("write spec fields must be a mapping of field name to value")
        for name, value in self.fields.items():
            if not isinstance(name, str) or not name or name == "id":
                raise ValidationError(f"write spec field name {name!r} is not allowed")
            if not isinstance(value, str):
                raise ValidationError(f"write spec field {name!r} must have a string value")
        if isinstance(self.spec_count, bool) or not isinstance(self.spec_count, int):
            raise ValidationError("spec_count must be an integer")
        if self.spec_count < 1:
            raise ValidationError(f"spec_count must be at least 1, got {self.spec_count}")
        allowed = frozenset(self.allowed_fields) or frozenset(self.fields)
        if "id" in allowed:
            raise ValidationError("'id' is minted by the store and cannot be an allowed field")
        if self.identity_field not in self.fields or not self.fields[self.identity_field]:
            raise ValidationError(
                f"write spec fields must give the identity field {self.identity_field!r}"
            )
        outside = sorted(set(self.fields) - allowed)
        if outside:
            raise ValidationError(f"write spec fields {outside} are not in allowed_fields")
        object.__setattr__(self, "fields", frozen_fields(self.fields))
        object.__setattr__(self, "allowed_fields", allowed)

    @property
    def identity(self) -> str:
        """The value of the identity field this spec writes for."""
        return self.fields[self.identity_field]

    def effect(self) -> EffectSpec:
        """This task as the core judge's required effect (:mod:`rewardseal.core.judging`).

        It selects the spec identity as a literal, expects every spec field with its value,
        counts exactly ``spec_count`` new records and allows only ``allowed_fields``.
        """
        return EffectSpec(
            name=WRITE_EFFECT_NAME,
            collection=self.collection,
            select=types.MappingProxyType({self.identity_field: self.identity}),
            expect=self.fields,
            new_records=self.spec_count,
            allowed_fields=self.allowed_fields,
        )


def mockmed_write_spec(
    patient_id: str,
    note: str = "Synthetic triage: mild headache since morning; vitals stable.",
    *,
    status: str = "open",
    encounter_type: str = "Triage",
) -> WriteSpec:
    """The MockMed task: one new encounter (Triage unless ``encounter_type`` says another) for
    ``patient_id`` (allowed: ENCOUNTER_FIELDS)."""
    return WriteSpec(
        collection=MOCKMED_COLLECTION,
        fields={IDENTITY_KEY: patient_id, "type": encounter_type, "note": note, "status": status},
        spec_count=1,
        allowed_fields=frozenset(ENCOUNTER_FIELDS),
        identity_field=IDENTITY_KEY,
    )


def parameterized_write_spec(patient_id: str, task_parameters: Mapping[str, object]) -> WriteSpec:
    """The task of the parameterized MockMed contract (``mockmed_parameterized_contract``) for
    one episode: one new encounter of the row's ``encounter_type`` with its ``note``.

    Raises ValidationError when either parameter is missing or not a string (the worker would
    refuse the begin: ``invalid_task_parameters``).
    """
    values = {}
    for name in ("encounter_type", "note"):
        value = task_parameters.get(name)
        if not isinstance(value, str):
            raise ValidationError(f"the parameterized MockMed task needs a string {name!r}")
        values[name] = value
    return mockmed_write_spec(patient_id, values["note"], encounter_type=values["encounter_type"])


def openemr_write_spec(
    pid: str,
    reason: str = "Synthetic visit: follow-up for seasonal allergies.",
    *,
    facility: str = "Synthetic Community Clinic",
    sensitivity: str = "normal",
) -> WriteSpec:
    """An OpenEMR-shaped task: one new ``form_encounter`` row for ``pid``."""
    return WriteSpec(
        collection=OPENEMR_COLLECTION,
        fields={
            OPENEMR_IDENTITY_KEY: pid,
            "reason": reason,
            "facility": facility,
            "sensitivity": sensitivity,
        },
        spec_count=1,
        allowed_fields=frozenset(OPENEMR_ENCOUNTER_FIELDS),
        identity_field=OPENEMR_IDENTITY_KEY,
    )


_FACILITIES = (
    "Synthetic Community Clinic",
    "Synthetic Riverside Practice",
    "Synthetic Urgent Care",
)
_SENSITIVITIES = ("normal", "high")
_MAX_VARIANTS = 100_000


def variants(
    count: int, seed: int, *, kind: Literal["mockmed", "openemr"] = "mockmed"
) -> list[WriteSpec]:
    """``count`` synthetic write specs from ``random.Random(seed)``: same seed, same list.

    Identities (``patient-<8 hex>`` for MockMed, ``pid-<8 hex>`` for OpenEMR-shaped) are distinct
    within one list. Nothing here is real patient data.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= _MAX_VARIANTS:
        raise ValidationError(f"count must be an integer in 0..{_MAX_VARIANTS}")
    if kind not in ("mockmed", "openemr"):
        raise ValidationError(f"unknown variant kind {kind!r}")
    rng = random.Random(seed)
    specs: list[WriteSpec] = []
    seen: set[str] = set()
    while len(specs) < count:
        token = f"{rng.getrandbits(32):08x}"
        if token in seen:
            continue
        seen.add(token)
        text = synthetic_note(rng)
        if kind == "mockmed":
            specs.append(mockmed_write_spec(f"patient-{token}", text))
        else:
            specs.append(
                openemr_write_spec(
                    f"pid-{token}",
                    text,
                    facility=rng.choice(_FACILITIES),
                    sensitivity=rng.choice(_SENSITIVITIES),
                )
            )
    return specs
