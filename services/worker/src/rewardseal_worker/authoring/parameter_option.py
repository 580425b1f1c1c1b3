"""``contract init --parameter``: a task parameter declaration (R-MSG-11) written on the
command line, so a parameterized bundle starts from ``init`` like a fixed one.

The forms, one per type of the closed set::

    NAME:string:MAX_LENGTH[:VALUE|VALUE...]   e.g. sku:string:32, size:string:8:S|M|L
    NAME:integer:MINIMUM:MAXIMUM              e.g. qty:integer:1:99
    NAME:number:MINIMUM:MAXIMUM               e.g. dose:number:0.5:10
    NAME:boolean                              e.g. urgent:boolean

The declaration is then checked by the same rules ``contract check`` and ``serve`` apply
(:func:`rewardseal.core.task_parameters.check_declarations`); this module only parses.
"""

from __future__ import annotations

from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.v1.contract_pb2 import TaskParameter
from rewardseal.v1.enums_pb2 import TaskParameterType

__all__ = ["PARAMETER_FORMS", "parse_parameter"]

PARAMETER_FORMS: Final = (
    "NAME:string:MAX_LENGTH[:V1|V2...], NAME:integer:MIN:MAX, NAME:number:MIN:MAX, NAME:boolean"
)
_TYPES: Final = {
    "string": TaskParameterType.TASK_PARAMETER_TYPE_STRING,
    "integer": TaskParameterType.TASK_PARAMETER_TYPE_INTEGER,
    "number": TaskParameterType.TASK_PARAMETER_TYPE_NUMBER,
    "boolean": TaskParameterType.TASK_PARAMETER_TYPE_BOOLEAN,
}


def parse_parameter(text: str) -> TaskParameter:
    """The declaration ``text`` writes (one of :data:`PARAMETER_FORMS`).

    Raises:
        ValidationError: ``text`` is not one of the forms (the message names the form expected).
    """
    name, _, rest = text.partition(":")
    kind, _, rest = rest.partition(":")
    arguments = rest.split(":") if rest else []
    if not name or kind not in _TYPES:
        raise ValidationError(f"--parameter {text[:40]!r}: expected one of {PARAMETER_FORMS}")
    parameter = TaskParameter(name=name, type=_TYPES[kind])
    try:
        if kind == "string" and len(arguments) in (1, 2):
            parameter.max_length = int(arguments[0])
            if len(arguments) == 2:
                parameter.allowed_values.extend(arguments[1].split("|"))
            return parameter
        if kind in ("integer", "number") and len(arguments) == 2:
            parameter.minimum, parameter.maximum = (float(a) for a in arguments)
            return parameter
    except ValueError:
        pass
    if kind == "boolean" and not arguments:
        return parameter
    forms = {f.split(":")[1]: f for f in PARAMETER_FORMS.split(", ")}
    raise ValidationError(
        f"--parameter {text[:40]!r}: expected {forms[kind].replace('NAME', name)}"
    )
