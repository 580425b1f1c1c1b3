"""Canonical JSON and digests (R-DIG-1, R-DIG-2).

A digest is ``"sha256:" + lowercase hex`` of SHA-256 over the RFC 8785 (JCS) canonical JSON of a
message's proto3 JSON mapping with the original field names. Nothing about where or when the
message was loaded enters the bytes, so two parties holding equal messages always agree.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from rewardseal.errors import ValidationError

DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


def message_to_json_object(message: Message) -> dict[str, Any]:
    """The proto3 JSON mapping of ``message`` with original (snake_case) field names."""
    return MessageToDict(message, preserving_proto_field_name=True)


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON-compatible value or a protobuf message."""
    if isinstance(value, Message):
        value = message_to_json_object(value)
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
