"""Strict readers of an attestation's JSON: each value of its type, or ``AttestationError``
(``malformed``) naming the field (R-A-2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rewardseal.core.digest import is_digest
from rewardseal.core.errors import AttestationError, preview


def fail(reason: str, message: str) -> AttestationError:
    """The error to raise for a failed check: ``reason`` is its R-A-4 reason code."""
    return AttestationError(message, reason=reason)


def exact_object(doc: object, fields: Sequence[str], where: str) -> Mapping[str, Any]:
    """``doc`` as an object with exactly ``fields`` (no fewer, no others)."""
    if not isinstance(doc, Mapping):
        raise fail("malformed", f"{where} is a JSON object, not {type(doc).__name__}")
    unknown = sorted(str(key) for key in doc if key not in fields)
    if unknown:
        raise fail("malformed", f"{where} has an unknown field {preview(unknown[0])}")
    missing = [name for name in fields if name not in doc]
    if missing:
        raise fail("malformed", f"{where} lacks {missing[0]!r}")
    return doc


def string(doc: Mapping[str, Any], name: str, where: str, *, empty: bool = False) -> str:
    """doc[name], a string (non-empty unless ``empty``)."""
    value = doc[name]
    if not isinstance(value, str) or (not empty and not value):
        raise fail("malformed", f"{where}.{name} is a non-empty string")
    return value


def integer(doc: Mapping[str, Any], name: str, where: str) -> int:
    """doc[name], an integer in 0 .. 2^53-1 (not a boolean)."""
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53 - 1:
        raise fail("malformed", f"{where}.{name} is an integer in 0 .. 2^53-1")
    return value


def array(doc: Mapping[str, Any], name: str, where: str) -> list[Any]:
    """doc[name], a JSON array."""
    value = doc[name]
    if not isinstance(value, list):
        raise fail("malformed", f"{where}.{name} is a JSON array")
    return value


def strings(doc: Mapping[str, Any], name: str, where: str) -> list[str]:
    """doc[name], an array of non-empty strings."""
    values = array(doc, name, where)
    if not all(isinstance(value, str) and value for value in values):
        raise fail("malformed", f"{where}.{name} holds non-empty strings")
    return list(values)


def digest_field(doc: Mapping[str, Any], name: str, where: str) -> str:
    """doc[name], a ``sha256:`` digest."""
    value = string(doc, name, where)
    if not is_digest(value):
        raise fail("malformed", f"{where}.{name} is 'sha256:' and 64 lowercase hex digits")
    return value


def decimal(doc: Mapping[str, Any], name: str, where: str) -> str:
    """doc[name], decimal text of a number in 0 .. 1 (a share, an epsilon)."""
    value = string(doc, name, where)
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0.0 <= number <= 1.0:
        raise fail("malformed", f"{where}.{name} is a decimal in 0 .. 1, as text")
    return value


def rfc3339(doc: Mapping[str, Any], name: str, where: str) -> str:
    """doc[name], an RFC 3339 time with an offset."""
    value = string(doc, name, where)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or "T" not in value:
        raise fail("malformed", f"{where}.{name} is an RFC 3339 time with an offset")
    return value


def time_text(message: Any) -> str:
    """A protobuf Timestamp as RFC 3339 text (``Z``)."""
    return str(message.ToJsonString())
