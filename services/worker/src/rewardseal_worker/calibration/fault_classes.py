"""The fault classes of a calibration run, derived from a bundle's own effect documents (R-CAL-3).

The generic classes (:data:`rewardseal.core.faults.GENERIC_FAULT_CLASSES`) a contract can express:
``extra_record`` and ``duplicate_record`` need an exact count, ``wrong_field`` an expected or an
allowed field, ``wrong_subject`` an identity, ``forbidden_present`` a forbidden effect;
``missing_record`` always applies. Then, when the caller passes :class:`FaultFamilies` for the
bundle's task, the families its replay can play on the task's published write, each named
``extradup.<family>``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from rewardseal.core.errors import ValidationError
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal.core.judging import (
    RECORD_ID_FIELD,
    EffectSpec,
    IdentityRef,
    bind_parameters,
    parse_effects,
)
from rewardseal.core.task_parameters import ParameterValue, draw_values
from rewardseal.v1.contract_pb2 import TaskParameter
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.calibration.families import (
    EXTRADUP_PREFIX,
    FamilyReplay,
    FamilyWrite,
    FaultFamilies,
)
from rewardseal_worker.oracles.base import recipe_identity_fields

__all__ = [
    "CalibrationSetup",
    "drawn_parameters",
    "fault_classes_for",
    "setup_for",
    "with_drawn_parameters",
]


@dataclass(frozen=True)
class CalibrationSetup:
    """Everything about a bundle the trial generator needs, computed once per run."""

    required: tuple[EffectSpec, ...]
    forbidden: tuple[EffectSpec, ...]
    identity_keys: tuple[str, ...]
    identity_fields: Mapping[str, str]
    collection: str
    columns: tuple[str, ...]
    generic_classes: tuple[str, ...]
    family_write: FamilyWrite | None
    family_names: tuple[str, ...]
    replay: FamilyReplay | None
    parameters: tuple[TaskParameter, ...] = ()
    """The contract's task parameter declarations (R-MSG-11): each trial draws its own values
    (R-CAL-6, :func:`with_drawn_parameters`)."""
    parameter_rows: tuple[Mapping[str, ParameterValue], ...] = ()
    """Task rows to draw the values from instead of the declaration (``--task-rows``)."""
    bound: Mapping[str, ParameterValue] = field(default_factory=lambda: MappingProxyType({}))
    """The values this setup's effects are bound to (one trial's; empty for the run's)."""

    @property
    def fault_classes(self) -> tuple[str, ...]:
        """Every fault class of the run, in round-robin order: generic, then the families."""
        return self.generic_classes + tuple(EXTRADUP_PREFIX + f for f in self.family_names)


def _select_fields(effect: EffectSpec) -> set[str]:
    return set(effect.select)


def _generic_classes(required: Sequence[EffectSpec], forbidden: Sequence[EffectSpec]) -> list[str]:
    counted = any(e.new_records is not None or e.changed_records is not None for e in required)
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


def _write_from_effect(effect: EffectSpec) -> FamilyWrite | None:
    """The write an effect describes: its identity field, literal selects and expects.

    The write's fields are only those the effect checks, so a family that drops a field drops
    one the contract actually demands. None when the effect cannot be written as a family write.
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
    return FamilyWrite(
        collection=effect.collection,
        identity_field=identity_fields[0],
        fields=fields,
        spec_count=effect.new_records if effect.new_records is not None else 1,
        allowed_fields=allowed,
    )


def setup_for(bundle: ContractBundle, families: FaultFamilies | None) -> CalibrationSetup:
    """What a run of ``bundle`` (with ``families``, if any) needs, derived once."""
    required, forbidden = tuple(bundle.required), tuple(bundle.forbidden)
    if not required:
        raise ValidationError("calibration needs a contract with at least one required effect")
    identity_fields = recipe_identity_fields(bundle.recipe)
    columns: set[str] = set(identity_fields.values())
    for effect in (*required, *forbidden):
        columns |= _select_fields(effect) | set(effect.expect) | set(effect.before)
        if effect.allowed_fields is not None:
            columns |= effect.allowed_fields
    columns.discard(RECORD_ID_FIELD)

    write: FamilyWrite | None = None
    names: tuple[str, ...] = ()
    if families is not None:
        if not _families_apply(bundle, families):
            raise ValidationError(
                f"these ExtraDup families are defined for the task {families.task_id!r} only"
            )
        # The task's published effect, not the bundle's: a weakened bundle must leak here.
        write = _write_from_effect(parse_effects(families.required_effects)[0])
        if write is not None:
            names = families.replay.families_for(write)
    return CalibrationSetup(
        required=required,
        forbidden=forbidden,
        identity_keys=tuple(sorted(bundle.contract.oracle.identity_keys)),
        identity_fields=identity_fields,
        collection=required[0].collection,
        columns=tuple(sorted(columns)),
        generic_classes=tuple(_generic_classes(required, forbidden)),
        family_write=write,
        family_names=names,
        replay=families.replay if write is not None and families is not None else None,
        parameters=tuple(bundle.contract.task_parameters),
    )


def with_drawn_parameters(setup: CalibrationSetup, rng: random.Random) -> CalibrationSetup:
    """``setup`` with its effects bound to task parameter values drawn from ``rng`` (R-CAL-6):
    one of its task rows, else by the declaration. The trial is then generated and judged as
    an episode begun with them. A contract without parameters gets ``setup`` itself (and
    ``rng`` is not used)."""
    if not setup.parameters:
        return setup
    rows = setup.parameter_rows
    values = rows[rng.randrange(len(rows))] if rows else draw_values(setup.parameters, rng)
    return replace(
        setup,
        required=bind_parameters(setup.required, values),
        forbidden=bind_parameters(setup.forbidden, values),
        bound=MappingProxyType(dict(values)),
    )


def drawn_parameters(setup: CalibrationSetup) -> Mapping[str, ParameterValue]:
    """The values :func:`with_drawn_parameters` bound ``setup`` to (empty when unbound)."""
    return setup.bound


def fault_classes_for(
    bundle: ContractBundle, *, families: FaultFamilies | None = None
) -> tuple[str, ...]:
    """The fault classes :func:`calibrate` would run for ``bundle``, in round-robin order."""
    return setup_for(bundle, families).fault_classes
