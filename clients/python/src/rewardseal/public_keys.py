"""Reading an Ed25519 public key the way people hand one over.

One rule for every command line that takes a public key (``rewardseal-control keys register
--public-key``, ``rewardseal-worker serve --trust-org-key``): the key as 64 hex characters, as
base64 (standard or URL-safe, padded or not: what Health and JSON renderings of protobuf
bytes show), or the path of a file that holds either, or a service's JSON ready file (its
banner) with the key in one of the named fields (the worker's ``public_key``, control's
``organization_public_key``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from pathlib import Path

from rewardseal.core.errors import ValidationError

__all__ = ["KEY_BYTES", "parse_public_key", "public_key_text"]

KEY_BYTES = 32
"""An Ed25519 public key's length."""
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
_BASE64_KEY = re.compile(r"[A-Za-z0-9+/_-]{43}=?")


def public_key_text(text: str) -> bytes | None:
    """The key ``text`` spells as 64 hex or as base64 of 32 bytes; None when it is neither."""
    text = text.strip()
    if _HEX_KEY.fullmatch(text):
        return bytes.fromhex(text)
    if _BASE64_KEY.fullmatch(text):
        padded = text.rstrip("=") + "="
        try:
            raw = base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_"))
        except (binascii.Error, ValueError):
            return None
        return raw if len(raw) == KEY_BYTES else None
    return None


def parse_public_key(value: str, *, flag: str, banner_fields: Sequence[str]) -> bytes:
    """The key ``value`` gives: hex, base64, or a file holding either or a JSON ready file
    with the key (hex or base64) in one of ``banner_fields``. ``flag`` names the option in
    errors.

    Raises:
        ValidationError: ``value`` is none of these.
    """
    text = value.strip()
    key = public_key_text(text)
    if key is not None:
        return key
    forms = "64 hex characters, base64 of 32 bytes, or a file holding one"
    try:
        content = Path(text).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValidationError(
            f"{flag} {text[:80]!r} is not an Ed25519 public key ({forms}, or a ready file), "
            f"nor a readable file ({type(exc).__name__})"
        ) from None
    key = public_key_text(content) or _key_from_banner(content, banner_fields)
    if key is None:
        raise ValidationError(
            f"{flag} file {text} holds no Ed25519 public key ({forms}, or a JSON ready file "
            f"with {' or '.join(banner_fields)})"
        )
    return key


def _key_from_banner(content: str, fields: Sequence[str]) -> bytes | None:
    """The key in the first of ``fields`` a JSON banner has, or None."""
    try:
        document = json.loads(content)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    for field in fields:
        found = document.get(field)
        if isinstance(found, str) and (key := public_key_text(found)) is not None:
            return key
    return None
