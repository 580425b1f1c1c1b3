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

from collections.abc import Iterable

from rewardseal.core.public_keys import parse_public_key

__all__ = ["BANNER_FIELD", "parse_org_key", "parse_org_keys"]

BANNER_FIELD = "organization_public_key"
"""The field of control's ready-file banner that carries its organization public key."""


def parse_org_key(value: str) -> bytes:
    """One pinned key: 64 hex characters (or base64), or a file holding it (alone or in
    control's banner); :func:`rewardseal.core.public_keys.parse_public_key` is the rule.

    Raises:
        ValidationError: the value is neither a key nor a readable file that holds one.
    """
    return parse_public_key(value, flag="--trust-org-key", banner_fields=(BANNER_FIELD,))


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
