"""Between the integrity messages (``rewardseal.v1.integrity_pb2``) and plain JSON documents: the
one rule for spec documents on the wire, shared by the clients, the control plane and its CLI.

Spec documents travel as ``google.protobuf.Struct``, whose numbers are all doubles: a whole
number comes back as an ``int`` (within 2**53, where a double is exact) so that ``"seed": 42``
is an integer again and digests as the JSON the operator wrote; NaN and infinities are kept, for
core to refuse with a ``not_finite`` blocker (docs/spec.md §12, R-I-1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from google.protobuf import struct_pb2

from rewardseal.errors import ValidationError

__all__ = ["spec_struct", "struct_document"]

_EXACT_INTEGER: Final = 2**53


def spec_struct(spec: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON spec document (a reward system, protocol or profile) as the ``Struct`` the RPCs
    take. Numbers travel as doubles, as in any JSON reader; the control plane validates.

    Raises:
        ValidationError: ``spec`` holds something JSON cannot (a set, bytes, a non-string key).
    """
    struct = struct_pb2.Struct()
    try:
        struct.update(spec)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"the spec is not a JSON object: {exc}") from None
    return struct


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_document(value.struct_value)
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if math.isfinite(number) and number.is_integer() and abs(number) < _EXACT_INTEGER:
            return int(number)
        return number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_document(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``Struct`` (a spec on the wire, a revision's stored content) back as a plain JSON
    object: whole numbers as ints, NaN and infinities kept."""
    return {key: _value(item) for key, item in struct.fields.items()}
