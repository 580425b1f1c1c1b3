"""Credential scrubbing for integrity definitions (R-I-1).

A reward-system spec may name an endpoint with its token, a header dict with ``Authorization``,
or a URL with ``user:pass@``. Definitions are stored and hashed for good, so every credential is
replaced by :data:`SCRUBBED` *before* anything digests or stores it. Scrubbing first also means two
specs that differ only in a credential are the same revision: a rotated token is not a new reward.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["SCRUBBED", "is_credential_key", "scrub_credentials", "scrub_text"]

SCRUBBED: Final = "[scrubbed]"
"""What replaces a credential; a fixed string, so scrubbed documents still digest stably."""

# A key is a credential when one of its ``_``-separated words (after lowercasing and mapping
# ``-`` and spaces to ``_``) is one of these, or two adjacent words are one of the pairs.
# "key" alone is not one: ``worker_key_id`` names a public key, and it must survive.
_CREDENTIAL_WORDS: Final = frozenset(
    {
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "apikey",
        "authorization",
        "auth",
        "cookie",
        "credential",
        "credentials",
        "bearer",
    }
)
_CREDENTIAL_PAIRS: Final = frozenset(
    {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"), ("client", "secret")}
)

_URL_USERINFO: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s?#]+@")
_AUTH_SCHEME: Final = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{4,}")
_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def is_credential_key(key: str) -> bool:
    """True when a mapping key names a credential (``api_key``, ``X-Auth-Token``, ...)."""
    words = re.sub(r"[-\s.]+", "_", key.strip().lower()).split("_")
    if any(word in _CREDENTIAL_WORDS for word in words):
        return True
    return any(pair in _CREDENTIAL_PAIRS for pair in itertools.pairwise(words))


def _scrub_query(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib can take apart: leave it to the other patterns
        return url
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(is_credential_key(name) for name, _ in pairs):
        return url
    query = urlencode([(n, SCRUBBED if is_credential_key(n) else v) for n, v in pairs], safe="[]")
    return urlunsplit(parts._replace(query=query))


def scrub_text(text: str) -> str:
    """``text`` with URL user-info, credential query parameters and auth-scheme tokens scrubbed."""
    # Query parameters first: urllib cannot split a URL once its user-info reads "[scrubbed]".
    text = _URL.sub(lambda m: _scrub_query(m.group(0)), text)
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{SCRUBBED}@", text)
    return _AUTH_SCHEME.sub(lambda m: f"{m['scheme']} {SCRUBBED}", text)


def scrub_credentials(value: Any) -> Any:
    """A copy of a JSON value with every credential replaced by :data:`SCRUBBED`, recursively.

    The value under a credential-named key is replaced whole (even a dict or list: a nested
    ``{"auth": {"user": ..., "password": ...}}`` leaves nothing behind); every string elsewhere
    goes through :func:`scrub_text`. Non-string leaves are returned as they are. The input is
    never modified.
    """
    if isinstance(value, Mapping):
        return {
            key: (
                SCRUBBED
                if isinstance(key, str) and is_credential_key(key) and value[key] is not None
                else scrub_credentials(value[key])
            )
            for key in value
        }
    if isinstance(value, list | tuple):
        return [scrub_credentials(item) for item in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value
