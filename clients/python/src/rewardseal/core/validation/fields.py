"""Field checks every message shares (R-MSG-10, R-VAL-6, R-SIG-1): ids, digests, key ids,
bounded floats, policy updates, enum values and name lists."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from typing import Any

from rewardseal.core.certificates import MAX_POLICY_UPDATE
from rewardseal.core.digest import is_digest
from rewardseal.core.errors import ValidationError, preview

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,127}\Z")
"""R-MSG-10: every id that enters the system.

The patterns end in backslash-Z, not ``$``: ``$`` also matches before a trailing newline.
"""

KEY_ID_PATTERN = re.compile(r"^ed25519:sha256:[0-9a-f]{64}\Z")
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
"""Identity keys, component names and metadata keys."""

MAX_ABS_FLOAT = 1e6
MAX_COMPONENTS = 64
MAX_IDENTITY_KEYS = 32
SIGNATURE_LENGTH = 64


def validate_id(value: str, field: str, *, error: type[ValidationError] = ValidationError) -> str:
    """Return ``value`` if it matches R-MSG-10, else raise ``error`` naming ``field``."""
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise error(
            f"{field} {preview(value, 40)} is not a valid id (8-128 of A-Z a-z 0-9 . _ : -, "
            "starting with a letter or digit)"
        )
    return value


def validate_digest(
    value: str, field: str, *, error: type[ValidationError] = ValidationError
) -> str:
    """Return ``value`` if it is a ``sha256:`` digest, else raise ``error`` naming ``field``."""
    if not is_digest(value):
        raise error(f"{field} must be 'sha256:' followed by 64 lowercase hex digits")
    return value


def validate_key_id(value: str, field: str = "issuer_key_id") -> str:
    """Return ``value`` if it is an ``ed25519:sha256:`` key id (R-SIG-1)."""
    if not KEY_ID_PATTERN.match(value):
        raise ValidationError(f"{field} must be 'ed25519:sha256:' followed by 64 hex digits")
    return value


def check_float(
    value: float, field: str, *, error: type[ValidationError] = ValidationError
) -> None:
    """Refuse a non-finite float or one with |x| > 1e6 (R-VAL-6)."""
    if not is_bounded_float(value):
        raise error(f"{field} must be finite with |x| <= 1e6, got {value!r}")


def is_bounded_float(value: float) -> bool:
    """The rule :func:`check_float` enforces, as a test: finite with |x| <= 1e6 (R-VAL-6)."""
    return math.isfinite(value) and abs(value) <= MAX_ABS_FLOAT


def check_policy_update_field(
    value: int, field: str, *, error: type[ValidationError] = ValidationError
) -> None:
    """Refuse a policy update outside 0 .. 2^53-1 (R-VAL-6)."""
    if value < 0 or value > MAX_POLICY_UPDATE:
        raise error(f"{field} must be in 0..2^53-1, got {value}")


@functools.cache
def _known_values(enum: Any) -> frozenset[int]:
    # Enum wrappers rebuild their value list on every call; validation runs per receipt.
    return frozenset(v for v in enum.values() if v != 0)


def check_enum(value: int, enum: Any, field: str, error: type[ValidationError]) -> None:
    """Refuse ``value`` unless it is a known value of ``enum`` other than UNSPECIFIED."""
    if value not in _known_values(enum):
        raise error(f"{field} must be a known value other than UNSPECIFIED, got {value}")


def check_names(names: Iterable[str], field: str, *, low: int, high: int) -> None:
    """Refuse a list of ``low``-``high`` names that repeats one or holds an invalid one."""
    names = list(names)
    if not low <= len(names) <= high:
        raise ValidationError(f"{field} must have {low}-{high} entries, got {len(names)}")
    if len(set(names)) != len(names):
        raise ValidationError(f"{field} must be unique")
    for name in names:
        if not NAME_PATTERN.match(name):
            raise ValidationError(f"{field} entry {preview(name)} is not a valid name")
