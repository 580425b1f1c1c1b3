"""Reading typed fields out of plain JSON objects, for every ``from_json`` of this package.

Each integrity type is stored as a plain dict (SQL rows, proto mirrors, bundle payloads); reading
one back must refuse what the type could not have written: unknown keys, wrong types, non-finite
numbers. The readers here raise :class:`~rewardseal.core.errors.ValidationError` naming the field,
so a caller sees *where* a stored document is wrong, not just that it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeAlias

from rewardseal.core.errors import ValidationError

__all__ = [
    "JsonObject",
    "boolean",
    "finite",
    "finite_number",
    "integer",
    "mapping",
    "no_unknown_keys",
    "non_finite_paths",
    "optional_finite",
    "optional_string",
    "rfc3339",
    "sequence",
    "string",
]

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object as Python holds it: str keys; str, int, bool, None, finite float, list, dict."""


def mapping(doc: object, where: str) -> Mapping[str, Any]:
    """``doc`` as a JSON object, or a ValidationError naming ``where``."""
    if not isinstance(doc, Mapping) or not all(isinstance(key, str) for key in doc):
        raise ValidationError(f"{where} must be a JSON object")
    return doc


def no_unknown_keys(doc: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Refuse any key of ``doc`` outside ``allowed`` (a typo must not pass silently)."""
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise ValidationError(f"{where} has unknown key(s): {', '.join(unknown)}")


def _get(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise ValidationError(f"{where}.{key} is missing")
    return doc[key]


def string(doc: Mapping[str, Any], key: str, where: str, *, allow_empty: bool = False) -> str:
    """The string at ``doc[key]`` (non-empty unless ``allow_empty``)."""
    value = _get(doc, key, where)
    if not isinstance(value, str) or (not allow_empty and not value):
        raise ValidationError(f"{where}.{key} must be a non-empty string")
    return value


def optional_string(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    """The non-empty string at ``doc[key]``, or None when the key is absent or null."""
    if doc.get(key) is None:
        return None
    return string(doc, key, where)


def integer(doc: Mapping[str, Any], key: str, where: str, *, minimum: int = 0) -> int:
    """The integer at ``doc[key]`` (never a bool, never below ``minimum``)."""
    value = _get(doc, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{where}.{key} must be an integer >= {minimum}")
    return value


def boolean(doc: Mapping[str, Any], key: str, where: str) -> bool:
    """The boolean at ``doc[key]``."""
    value = _get(doc, key, where)
    if not isinstance(value, bool):
        raise ValidationError(f"{where}.{key} must be true or false")
    return value


def finite_number(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def finite(doc: Mapping[str, Any], key: str, where: str) -> float:
    """The finite number at ``doc[key]`` as a float (ints accepted, bools and NaN/inf refused)."""
    value = finite_number(_get(doc, key, where))
    if value is None:
        raise ValidationError(f"{where}.{key} must be a finite number")
    return value


def optional_finite(doc: Mapping[str, Any], key: str, where: str) -> float | None:
    """Like :func:`finite`, but None when the key is absent or null."""
    if doc.get(key) is None:
        return None
    return finite(doc, key, where)


def sequence(doc: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """The list at ``doc[key]``; an absent key reads as an empty list."""
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ValidationError(f"{where}.{key} must be a list")
    return value


def non_finite_paths(value: object, path: str = "$") -> list[str]:
    """Paths of every NaN or infinite number anywhere in ``value`` (they have no JSON form)."""
    found: list[str] = []
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(where)
        elif isinstance(item, Mapping):
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return sorted(found)


def rfc3339(moment: datetime, field: str = "time") -> str:
    """``moment`` as RFC 3339 UTC with microseconds and ``Z`` (one spelling, so stored entries
    and signed bundles digest alike). The time is always injected, never read here.

    Raises:
        ValidationError: ``moment`` is naive (its instant is unknown).
    """
    if moment.tzinfo is None:
        raise ValidationError(f"{field} must be timezone-aware (UTC)")
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
