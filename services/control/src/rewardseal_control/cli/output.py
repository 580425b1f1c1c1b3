"""How admin commands print: aligned tables for people, one JSON document for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

_Message = TypeVar("_Message", bound=Message)


def message_json(message: Message, *, defaults: bool = False) -> dict[str, Any]:
    """A message as JSON with its proto field names; ``defaults`` keeps fields that hold their
    default (``false``, ``0``, ``""``), so a script can read every key without guessing."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=defaults
    )


def print_json(document: Any, out: TextIO) -> None:
    """One indented JSON document, keys sorted (stable for scripts and diffs)."""
    print(json.dumps(document, indent=2, sort_keys=True), file=out)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    """Left-aligned columns two spaces apart; ``(none)`` under the headers when empty."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )
    if not rows:
        print("(none)", file=out)


def time_text(message: Message, field: str) -> str:
    """The Timestamp ``field`` of ``message`` in RFC 3339, or ``-`` when unset."""
    if not message.HasField(field):
        return "-"
    stamp = getattr(message, field)
    return str(stamp.ToJsonString())


def enum_short(enum: Any, value: int, prefix: str) -> str:
    """An enum value's name without ``prefix``; the number for a value this build does not know."""
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def print_listing(
    key: str,
    messages: Sequence[_Message],
    headers: Sequence[str],
    row: Callable[[_Message], Sequence[Any]],
    *,
    as_json: bool,
    out: TextIO,
) -> None:
    """A listing: ``{key: [message, ...]}`` (every field, defaults too) for scripts, else one
    table row per message."""
    if as_json:
        print_json({key: [message_json(m, defaults=True) for m in messages]}, out)
    else:
        print_table(headers, [row(m) for m in messages], out)
