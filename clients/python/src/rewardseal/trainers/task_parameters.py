"""Task parameters from a dataset row: one reading shared by every trainer adapter (R-W-18).

A parameterized contract (R-MSG-11) takes its values per episode, at begin. A trainer's data
carries them per row under one documented name, :data:`PARAMETERS_KEY` (``task_parameters``):
TRL's dataset column of that name (:mod:`rewardseal.trainers.trl`), ``extra_info
["task_parameters"]`` in verl (:mod:`rewardseal.trainers.verl`), and the task row's ``info
["task_parameters"]`` in the verifiers environment. The value is a mapping of parameter name to
a JSON scalar (``{"encounter_type": "Consult", "note": "..."}``) or the same as JSON text.

This module only reads the row: whether the values fit the contract's declaration is the
worker's to say (``invalid_task_parameters``, naming the parameter), so a row without
parameters for a contract that declares them is refused by the worker for that sample, never
scored here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.task_parameters import ParameterValue

__all__ = ["PARAMETERS_KEY", "row_parameters"]

PARAMETERS_KEY: Final = "task_parameters"
"""The name the parameters of a row go under in every trainer's data."""


def row_parameters(value: Any, sample: int) -> dict[str, ParameterValue]:
    """The task parameters of one row: ``{}`` for None (the row carries none), else a mapping
    of names to str/int/float/bool, given as a mapping or its JSON text.

    ``datasets`` unifies struct columns across rows and fills a key a row lacks with None, so a
    None value means "absent" here, as for the oracle identity.

    Raises:
        ValidationError: the value is not a mapping (or JSON of one), or maps a name to
            something other than a JSON scalar; the message names the sample, never the value.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"{PARAMETERS_KEY} of sample {sample} is not JSON: {exc.msg}"
            ) from None
    if not isinstance(value, Mapping):
        raise ValidationError(f"{PARAMETERS_KEY} of sample {sample} is not a mapping")
    values: dict[str, ParameterValue] = {}
    for name, item in value.items():
        if item is None:
            continue
        if not isinstance(item, str | int | float | bool):
            raise ValidationError(
                f"{PARAMETERS_KEY} of sample {sample}: parameter {str(name)[:32]!r} must be a "
                "string, number or boolean"
            )
        values[str(name)] = item
    return values
