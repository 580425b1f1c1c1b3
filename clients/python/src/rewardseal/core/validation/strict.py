"""Strict parsing (R-MSG-7): a signed payload with fields this schema does not know is refused."""

from __future__ import annotations

import functools
from typing import TypeVar

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from rewardseal.core.errors import ValidationError

_Msg = TypeVar("_Msg", bound=Message)


def parse_strict(message_type: type[_Msg], data: bytes) -> _Msg:
    """Parse ``data`` as ``message_type``, refusing unknown fields at any depth.

    A signed payload with fields this schema does not know could carry claims (an execution id,
    say) that a reader would silently drop; refusing them keeps a receipt from being mistaken
    for anything else (R-MSG-7).
    """
    message = message_type()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise ValidationError(f"payload is not a valid {message_type.__name__}: {exc}") from exc
    _refuse_unknown_fields(message, message_type.__name__)
    return message


_SINGLE, _REPEATED, _MAP = 0, 1, 2
"""How a field holds messages (see :func:`_message_fields`)."""


@functools.cache
def _message_fields(descriptor: Descriptor) -> tuple[tuple[str, int], ...]:
    """The fields of a message type that can hold messages with fields of their own: each
    one's name and whether it holds one, a list or a map of them (a map of scalars holds
    none). Known per type once, so a parse reads only those fields, not every set one."""
    fields: list[tuple[str, int]] = []
    for field in descriptor.fields:
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                fields.append((field.name, _MAP))
        elif field.is_repeated:
            fields.append((field.name, _REPEATED))
        else:
            fields.append((field.name, _SINGLE))
    return tuple(fields)


def _refuse_unknown_fields(message: Message, path: str) -> None:
    if len(UnknownFieldSet(message)):
        raise ValidationError(f"{path} carries fields this schema does not know")
    for name, kind in _message_fields(message.DESCRIPTOR):
        if kind == _SINGLE:
            if message.HasField(name):
                _refuse_unknown_fields(getattr(message, name), f"{path}.{name}")
        elif kind == _REPEATED:
            for index, inner in enumerate(getattr(message, name)):
                _refuse_unknown_fields(inner, f"{path}.{name}[{index}]")
        else:
            for key, inner in getattr(message, name).items():
                _refuse_unknown_fields(inner, f"{path}.{name}[{key}]")
