"""Input checks every aggregate of the control store shares (times, free text, unknown fields).

Rules of the messages themselves (ids, digests, contracts, certificates, receipts) are core's
(:mod:`rewardseal.core.validation`); what is here is what only a store needs: a moment that names
an instant, text a person typed that is safe to keep, and proto/datetime conversions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from rewardseal.core import revocation
from rewardseal.core.errors import ValidationError
from rewardseal.core.validation import parse_strict

__all__ = [
    "MAX_REASON_LENGTH",
    "moment",
    "no_unknown_fields",
    "text",
    "timestamp",
    "to_datetime",
]

MAX_REASON_LENGTH: Final = revocation.MAX_REASON_LENGTH
"""Longest reason of any admin action: a revocation's reason travels in the signed list, whose
bound is core's, and one bound for every reason keeps the audit log uniform."""


def moment(at: datetime | None) -> datetime:
    """``at`` in UTC, or now; a naive time is refused (it names no instant)."""
    if at is None:
        return datetime.now(UTC)
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise ValidationError("times must be timezone-aware datetimes (UTC)")
    return at.astimezone(UTC)


def text(value: str, name: str, *, max_length: int, required: bool = False) -> str:
    """A human-readable text field: bounded, no control characters but tab and newline."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string")
    if required and not value.strip():
        raise ValidationError(f"{name} is required")
    if len(value) > max_length:
        raise ValidationError(f"{name} is longer than {max_length} characters")
    if any((ord(ch) < 32 and ch not in "\t\n") or ord(ch) == 127 for ch in value):
        raise ValidationError(f"{name} contains control characters")
    return value


def timestamp(at: datetime) -> Timestamp:
    """A protobuf Timestamp of an aware datetime."""
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def to_datetime(stamp: Timestamp) -> datetime:
    """An aware UTC datetime of a protobuf Timestamp."""
    return stamp.ToDatetime(tzinfo=UTC)


def no_unknown_fields(message: Message) -> None:
    """Refuse a message carrying fields this schema does not know (they would be stored)."""
    parse_strict(type(message), message.SerializeToString(deterministic=True))
