"""JSON decoding that refuses what two readers could read two ways.

``json.loads`` keeps the last of a repeated key and accepts ``NaN`` and ``Infinity``; another
reader may keep the first key or refuse the constant, so a document that digests, signs or
judges must not rely on either. Every reader of untrusted JSON in rewardseal (bundle files,
oracle reads, action reports) decodes through :func:`loads`.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StrictJsonError", "loads"]


class StrictJsonError(ValueError):
    """The text is not JSON, or is JSON that :func:`loads` refuses.

    A ValueError, like ``json.JSONDecodeError``, so callers catch both with one clause.
    """


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJsonError(f"duplicate key {key!r}: an object repeats it")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not JSON")


def loads(text: str | bytes | bytearray) -> Any:
    """Decode ``text``, refusing a repeated object key and ``NaN``/``Infinity``/``-Infinity``.

    Raises:
        ValueError: ``json.JSONDecodeError`` for text that is not JSON, :class:`StrictJsonError`
            for a repeated key or a non-JSON constant.
        RecursionError: nesting deeper than the decoder can follow (callers treat it as
            malformed, like a ValueError).
    """
    return json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
