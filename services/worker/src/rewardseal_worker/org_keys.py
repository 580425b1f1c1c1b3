"""Pinned organization keys: what the worker trusts to sign certificates and revocation lists.

The control plane is not asked whom to trust (a man in the middle, or a control plane that was
taken over, would answer with its own key). The operator pins the organization's Ed25519
public key or keys when starting the worker: ``--trust-org-key`` (repeatable) or
``REWARDSEAL_WORKER_TRUST_ORG_KEYS`` (comma-separated). Each value is the key as 64 hex
characters, or the path of a file that holds it: either the 64 hex characters alone, or the
JSON banner ``rewardseal-control serve --ready-file`` writes (its ``organization_public_key``),
so a single-host deployment can hand control's banner to the worker on a shared volume.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from rewardseal.errors import ValidationError

__all__ = ["BANNER_FIELD", "parse_org_key", "parse_org_keys"]

BANNER_FIELD = "organization_public_key"
"""The field of control's ready-file banner that carries its organization public key."""
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


def parse_org_key(value: str) -> bytes:
    """One pinned key: 64 hex characters, or a file holding them (alone or in control's banner).

    Raises:
        ValidationError: the value is neither a key nor a readable file that holds one.
    """
    text = value.strip()
    if _HEX_KEY.fullmatch(text):
        return bytes.fromhex(text)
    try:
        content = Path(text).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(
            f"--trust-org-key {text!r} is neither a 64-hex Ed25519 public key nor a readable "
            f"file ({type(exc).__name__})"
        ) from None
    if _HEX_KEY.fullmatch(content):
        return bytes.fromhex(content)
    key = _key_from_banner(content)
    if key is None:
        raise ValidationError(
            f"--trust-org-key file {text} holds no 64-hex Ed25519 public key (nor a control "
            f"banner with {BANNER_FIELD})"
        )
    return key


def _key_from_banner(content: str) -> bytes | None:
    """The organization key of a control ready-file banner, or None if ``content`` is not one."""
    try:
        document = json.loads(content)
    except ValueError:
        return None
    found = document.get(BANNER_FIELD) if isinstance(document, dict) else None
    if isinstance(found, str) and _HEX_KEY.fullmatch(found):
        return bytes.fromhex(found)
    return None


def parse_org_keys(values: Iterable[str]) -> tuple[bytes, ...]:
    """Every pinned key, in the order given, repeats dropped; empty values are skipped.

    Raises:
        ValidationError: a value names no key (see :func:`parse_org_key`).
    """
    keys: list[bytes] = []
    for value in values:
        if not value.strip():
            continue
        key = parse_org_key(value)
        if key not in keys:
            keys.append(key)
    return tuple(keys)
