"""Canonical JSON and digests (R-DIG-1, R-DIG-2).

A digest is ``"sha256:" + lowercase hex`` of SHA-256 over the RFC 8785 (JCS) canonical JSON of a
message's proto3 JSON mapping with the original field names. Nothing about where or when the
message was loaded enters the bytes, so two parties holding equal messages always agree.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import rfc8785
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from rewardseal.core.errors import ValidationError

DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


def message_to_json_object(message: Message) -> dict[str, Any]:
    """The proto3 JSON mapping of ``message`` with original (snake_case) field names."""
    return MessageToDict(message, preserving_proto_field_name=True)


MAX_SAFE_INTEGER = 2**53 - 1
MAX_BMP = 0xFFFF


def _plain(value: Any) -> bool:
    """True when ``json.dumps`` with sorted keys already yields the RFC 8785 form of ``value``.

    That holds for trees of dicts and lists whose keys are Basic-Multilingual-Plane strings
    (Python's code-point order then equals JCS's UTF-16 order) and whose leaves are strings,
    JSON-safe integers, booleans and None. Floats, whose JCS number form differs from Python's
    repr, take the full RFC 8785 path.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        # Exact types first, one identity test each (a worker's documents are plain str, int,
        # dict and list); subclasses (a str-valued enum, an int enum) take the isinstance tests.
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return False
        if kind is dict or (kind is not list and isinstance(item, dict)):
            for key in item:
                # isascii and max run in C; max(key) is the key's highest code point.
                if not isinstance(key, str) or (not key.isascii() and ord(max(key)) > MAX_BMP):
                    return False
            stack.extend(item.values())
        elif kind is list or isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            continue
        elif isinstance(item, int):
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return False
        else:
            return False
    return True


canonical_string: Callable[[str], str] = json.encoder.encode_basestring
"""The RFC 8785 text of one JSON string, quotes included (the C function ``json.dumps`` uses
with ``ensure_ascii=False``; a property test holds it to rfc8785).

For a caller that writes a document whose shape it built, member by member in canonical order,
without :func:`canonical_json`'s walk; :func:`canonical_bytes` encodes the text."""


def canonical_bytes(text: str) -> bytes:
    """The UTF-8 bytes of canonical JSON text.

    Raises:
        ValidationError: the text holds a lone surrogate (which has no UTF-8 form).
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"value has no canonical JSON form: {exc}") from exc


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON-compatible value or a protobuf message."""
    if isinstance(value, Message):
        value = message_to_json_object(value)
    if _plain(value):
        # The common case on the worker's hot path, at C speed; equal to rfc8785.dumps (a
        # property test holds the two together).
        return canonical_bytes(
            json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        )
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        # Non-finite floats and integers outside the JSON-safe range have no canonical form.
        raise ValidationError(f"value has no canonical JSON form: {exc}") from exc


def digest_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """Digest of a JSON-compatible document (or a message) through its canonical JSON."""
    return digest_bytes(canonical_json(value))


def is_digest(value: str) -> bool:
    """True when ``value`` is a well-formed ``sha256:`` digest."""
    # fullmatch: ``$`` in DIGEST_PATTERN would also match before a trailing newline.
    return isinstance(value, str) and DIGEST_PATTERN.fullmatch(value) is not None
