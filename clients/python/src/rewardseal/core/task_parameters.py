"""Task parameters: what a task takes per episode, declared by the contract (R-MSG-11, R-W-18).

A contract declares 0-32 named, typed parameters (``TaskParameter``; a closed set of types:
string, integer, number, boolean). Its effects refer to them in ``select``
and ``expect`` as ``{"param": "<name>"}``. The values are bound once, when an episode begins,
checked here against the declaration (:func:`bound_values`), and judged with; the receipt carries
their digest (:func:`parameters_digest`), which a client checks like the episode id.

Three forms of a set of values meet here:

* the wire form, ``map<string, TaskParameterValue>`` (BeginEpisode, a descriptor);
* plain Python values, ``{"qty": 3}`` (what a caller passes; :func:`to_wire` converts them by the
  declaration-free rule bool -> bool_value, int -> integer_value, float -> number_value,
  str -> string_value);
* the bound values, a plain JSON object ``{name: value}`` checked against the declaration: what
  the worker stores, judges with and digests.

Every refusal of a value is :class:`~rewardseal.core.errors.InvalidTaskParameters` naming the
parameter in ``metadata["parameter"]`` and quoting at most a short prefix of what was sent.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from rewardseal.core.digest import MAX_SAFE_INTEGER, digest_json
from rewardseal.core.errors import InvalidTaskParameters, ValidationError, preview
from rewardseal.v1.contract_pb2 import RewardContract, TaskParameter
from rewardseal.v1.enums_pb2 import TaskParameterType
from rewardseal.v1.episode_pb2 import TaskParameterValue

__all__ = [
    "DECLARATION_DRAWING",
    "MAX_ALLOWED_VALUES",
    "ROWS_DRAWING",
    "MAX_PARAMETERS",
    "MAX_STRING_LENGTH",
    "ParameterValue",
    "bound_values",
    "check_declarations",
    "declarations",
    "draw_values",
    "from_wire",
    "normalized_declarations",
    "parameters_digest",
    "to_wire",
]

ParameterValue = str | int | float | bool
"""A bound parameter value (a JSON scalar; never None)."""

MAX_PARAMETERS = 32
MAX_STRING_LENGTH = 4096
"""The largest ``max_length`` a string parameter may declare."""
MAX_ALLOWED_VALUES = 64
_PREVIEW = 32
"""How much of a refused value an error quotes."""

STRING = TaskParameterType.TASK_PARAMETER_TYPE_STRING
INTEGER = TaskParameterType.TASK_PARAMETER_TYPE_INTEGER
NUMBER = TaskParameterType.TASK_PARAMETER_TYPE_NUMBER
BOOLEAN = TaskParameterType.TASK_PARAMETER_TYPE_BOOLEAN

_KIND_OF_TYPE: Mapping[int, str] = MappingProxyType(
    {
        STRING: "string_value",
        INTEGER: "integer_value",
        NUMBER: "number_value",
        BOOLEAN: "bool_value",
    }
)
"""The TaskParameterValue field each declared type is sent in (NUMBER also takes an integer)."""

_TYPE_WORD: Mapping[int, str] = MappingProxyType(
    {STRING: "a string", INTEGER: "an integer", NUMBER: "a number", BOOLEAN: "a boolean"}
)


def declarations(contract: RewardContract) -> Mapping[str, TaskParameter]:
    """The contract's parameter declarations by name (empty when it declares none)."""
    return MappingProxyType({p.name: p for p in contract.task_parameters})


def normalized_declarations(parameters: Iterable[TaskParameter]) -> list[TaskParameter]:
    """Copies sorted by name, each ``allowed_values`` sorted: the form the digest covers, so
    the order an author wrote them in does not change the contract digest."""
    copies: list[TaskParameter] = []
    for parameter in sorted(parameters, key=lambda p: p.name):
        copy = TaskParameter()
        copy.CopyFrom(parameter)
        values = sorted(copy.allowed_values)
        del copy.allowed_values[:]
        copy.allowed_values.extend(values)
        copies.append(copy)
    return copies


def check_declarations(parameters: Iterable[TaskParameter], name_ok: Any) -> None:
    """Refuse a declaration list that breaks R-MSG-11 (``ValidationError`` naming the
    parameter and the rule). ``name_ok(name) -> bool`` is the contract's name rule."""
    parameters = list(parameters)
    if len(parameters) > MAX_PARAMETERS:
        raise ValidationError(f"task_parameters has {len(parameters)} entries; at most 32")
    names = [p.name for p in parameters]
    if len(set(names)) != len(names):
        raise ValidationError("task_parameters names must be unique")
    for parameter in parameters:
        if not name_ok(parameter.name):
            raise ValidationError(
                f"task parameter name {preview(parameter.name)} is not a valid name"
            )
        _check_declaration(parameter)


def _check_declaration(parameter: TaskParameter) -> None:
    where = f"task parameter {parameter.name}"
    kind = parameter.type
    if kind not in _KIND_OF_TYPE:
        raise ValidationError(f"{where}: type must be STRING, INTEGER, NUMBER or BOOLEAN")
    bounded = parameter.HasField("minimum") or parameter.HasField("maximum")
    if kind == STRING:
        if not parameter.HasField("max_length") or not 1 <= parameter.max_length <= (
            MAX_STRING_LENGTH
        ):
            raise ValidationError(f"{where}: a string needs max_length in 1..{MAX_STRING_LENGTH}")
        if bounded:
            raise ValidationError(f"{where}: minimum and maximum apply to numbers only")
        allowed = list(parameter.allowed_values)
        if len(allowed) > MAX_ALLOWED_VALUES:
            raise ValidationError(f"{where}: at most {MAX_ALLOWED_VALUES} allowed_values")
        if len(set(allowed)) != len(allowed):
            raise ValidationError(f"{where}: allowed_values must be unique")
        for value in allowed:
            if len(value) > parameter.max_length:
                raise ValidationError(f"{where}: an allowed value is longer than max_length")
        return
    if parameter.HasField("max_length") or parameter.allowed_values:
        raise ValidationError(f"{where}: max_length and allowed_values apply to strings only")
    if kind == BOOLEAN:
        if bounded:
            raise ValidationError(f"{where}: minimum and maximum apply to numbers only")
        return
    for bound in ("minimum", "maximum"):
        if not parameter.HasField(bound):
            continue
        value = getattr(parameter, bound)
        if not math.isfinite(value) or abs(value) > MAX_SAFE_INTEGER:
            raise ValidationError(f"{where}: {bound} must be finite with |x| <= 2^53 - 1")
        if kind == INTEGER and value != int(value):
            raise ValidationError(f"{where}: an integer's {bound} must be a whole number")
    if (
        parameter.HasField("minimum")
        and parameter.HasField("maximum")
        and parameter.minimum > parameter.maximum
    ):
        raise ValidationError(f"{where}: minimum is above maximum")


def to_wire(values: Mapping[str, ParameterValue]) -> dict[str, TaskParameterValue]:
    """Plain Python values as wire values, by the declaration-free rule: bool -> bool_value,
    int -> integer_value, float -> number_value, str -> string_value.

    Raises:
        InvalidTaskParameters: a value of another Python type (naming the parameter).
    """
    wire: dict[str, TaskParameterValue] = {}
    for name, value in values.items():
        # bool first: it is an int to isinstance.
        if isinstance(value, bool):
            wire[name] = TaskParameterValue(bool_value=value)
        elif isinstance(value, int):
            if abs(value) > MAX_SAFE_INTEGER:  # int64 could hold more; JSON safely cannot
                raise _refused(name, "must be within -(2^53 - 1) .. 2^53 - 1")
            wire[name] = TaskParameterValue(integer_value=value)
        elif isinstance(value, float):
            wire[name] = TaskParameterValue(number_value=value)
        elif isinstance(value, str):
            wire[name] = TaskParameterValue(string_value=value)
        else:
            raise _refused(name, f"must be a str, int, float or bool, not {type(value).__name__}")
    return wire


def from_wire(values: Mapping[str, TaskParameterValue]) -> dict[str, Any]:
    """Wire values as plain values; a value with no kind set is None (refused by
    :func:`bound_values`)."""
    plain: dict[str, Any] = {}
    for name, value in values.items():
        kind = value.WhichOneof("value")
        plain[name] = None if kind is None else getattr(value, kind)
    return plain


def bound_values(
    contract: RewardContract, values: Mapping[str, TaskParameterValue]
) -> dict[str, ParameterValue]:
    """The values checked against the contract's declaration (R-W-18): exactly the declared
    names, each of its type (a NUMBER also takes an integer value, bound as its float), within
    its length, allowed values or range. A contract declaring none takes none.

    Raises:
        InvalidTaskParameters: the first parameter missing, extra, ill-typed or out of range
            (sorted by name), ``metadata["parameter"]`` naming it.
    """
    declared = declarations(contract)
    extra = sorted(set(values) - set(declared))
    if extra:
        raise _refused(extra[0], "is not a parameter the contract declares")
    bound: dict[str, ParameterValue] = {}
    for name in sorted(declared):
        if name not in values:
            raise _refused(name, "is missing (the contract declares it)")
        bound[name] = _checked(declared[name], values[name])
    return bound


def _checked(parameter: TaskParameter, value: TaskParameterValue) -> ParameterValue:
    name, kind = parameter.name, parameter.type
    sent = value.WhichOneof("value")
    wanted = _KIND_OF_TYPE[kind]
    if sent is None or (sent != wanted and not (kind == NUMBER and sent == "integer_value")):
        got = "no value" if sent is None else sent.removesuffix("_value").replace("bool", "boolean")
        raise _refused(name, f"must be {_TYPE_WORD[kind]}, got {got}")
    if kind == STRING:
        text = value.string_value
        if len(text) > parameter.max_length:
            raise _refused(name, f"is longer than {parameter.max_length} characters ({len(text)})")
        if parameter.allowed_values and text not in parameter.allowed_values:
            raise _refused(name, f"{preview(text, _PREVIEW)} is not one of its allowed values")
        return text
    if kind == BOOLEAN:
        return value.bool_value
    number: int | float
    if kind == INTEGER:
        number = value.integer_value
        if abs(number) > MAX_SAFE_INTEGER:
            raise _refused(name, "must be within -(2^53 - 1) .. 2^53 - 1")
    else:
        number = float(getattr(value, sent))
        if not math.isfinite(number):
            raise _refused(name, "must be finite")
    if parameter.HasField("minimum") and number < parameter.minimum:
        raise _refused(name, f"{preview(number, _PREVIEW)} is below its minimum")
    if parameter.HasField("maximum") and number > parameter.maximum:
        raise _refused(name, f"{preview(number, _PREVIEW)} is above its maximum")
    return number


def parameters_digest(contract: RewardContract, bound: Mapping[str, ParameterValue]) -> str:
    """The receipt's ``task_parameters_digest`` (R-W-18): "" for a contract that declares no
    parameters, else the digest of the JSON object of the bound values."""
    if not contract.task_parameters:
        return ""
    return digest_json(dict(bound))


DECLARATION_DRAWING = "rewardseal.task-parameters.declaration/1"
"""Names how :func:`draw_values` draws (R-CAL-6): it enters the checker configuration of a
calibration of a contract with parameters, and a corpus document that says how its parameter
values were drawn, so a change of the rule is a change of what a certificate names."""

ROWS_DRAWING = "rewardseal.task-parameters.rows/1"
"""Names the other way (R-CAL-6): each trial takes one of a file's task rows, chosen by a
generator of the run's seed; a corpus document names it beside the rows' digest."""

_DRAWN_CHARACTERS = string.ascii_letters + string.digits + " .,-"
_MAX_DRAWN_LENGTH = 48
_DEFAULT_SPAN = 1000
"""An unbounded number is drawn within this distance of its one bound, or of 0."""


def draw_values(
    parameters: Iterable[TaskParameter], rng: random.Random
) -> dict[str, ParameterValue]:
    """One set of values for ``parameters``, drawn from ``rng`` by the declaration alone
    (R-CAL-6, :data:`DECLARATION_DRAWING`): a string one of its ``allowed_values``, else 1 to
    min(``max_length``, 48) characters of letters, digits, space and ``.,-``; an integer or
    number uniformly within its bounds (an open side :data:`_DEFAULT_SPAN` from the other
    bound, or from 0); a boolean by a fair coin. Drawn in name order, so the same generator
    state gives the same values whatever order the contract lists them in."""
    values: dict[str, ParameterValue] = {}
    for parameter in sorted(parameters, key=lambda p: p.name):
        kind = parameter.type
        if kind == STRING:
            if parameter.allowed_values:
                values[parameter.name] = rng.choice(sorted(parameter.allowed_values))
            else:
                length = rng.randint(1, min(parameter.max_length, _MAX_DRAWN_LENGTH))
                values[parameter.name] = "".join(rng.choices(_DRAWN_CHARACTERS, k=length))
        elif kind == BOOLEAN:
            values[parameter.name] = rng.random() < 0.5
        else:
            low, high = _span(parameter)
            if kind == INTEGER:
                values[parameter.name] = rng.randint(math.ceil(low), math.floor(high))
            else:
                values[parameter.name] = min(high, max(low, round(rng.uniform(low, high), 6)))
    return values


def _span(parameter: TaskParameter) -> tuple[float, float]:
    has_low, has_high = parameter.HasField("minimum"), parameter.HasField("maximum")
    low = parameter.minimum if has_low else None
    high = parameter.maximum if has_high else None
    if low is None and high is None:
        return -_DEFAULT_SPAN, _DEFAULT_SPAN
    if low is None:
        assert high is not None
        return high - _DEFAULT_SPAN, high
    if high is None:
        return low, low + _DEFAULT_SPAN
    return low, high


def _refused(name: str, why: str) -> InvalidTaskParameters:
    shown = preview(name, _PREVIEW, quoted=False)
    return InvalidTaskParameters(
        f"task parameter {shown} {why}", metadata={"parameter": name[: _PREVIEW * 2]}
    )
