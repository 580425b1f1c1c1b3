"""Wall-clock time as the messages carry it: aware UTC datetimes and protobuf Timestamps.

Every service reads the time through an injected clock (so tests can fix it); this is the one
default clock, and the one conversion from a datetime to the ``Timestamp`` a message signs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from rewardseal.core.errors import ValidationError

__all__ = ["timestamp", "utc_now"]


def utc_now() -> datetime:
    """The wall clock, timezone-aware UTC."""
    return datetime.now(UTC)


def timestamp(moment: datetime, field: str = "time") -> Timestamp:
    """``moment`` as a protobuf Timestamp (UTC).

    Raises:
        ValidationError: ``moment`` is naive; ``Timestamp.FromDatetime`` would silently read it
            as UTC, so a local time would be signed as the wrong instant. ``field`` names it.
    """
    # A tzinfo that gives no offset leaves the datetime naive (astimezone would read it as
    # local time): refused like a naive one.
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationError(f"{field} must be timezone-aware (UTC)")
    # What Timestamp.FromDatetime(moment.astimezone(UTC)) gives (whole seconds since the epoch,
    # rounded down, and the microseconds), by exact timedelta arithmetic at a fraction of its
    # cost: the worker stamps every receipt.
    since = moment - _EPOCH
    return Timestamp(
        seconds=since.days * _SECONDS_PER_DAY + since.seconds, nanos=since.microseconds * 1000
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECONDS_PER_DAY = 86_400
