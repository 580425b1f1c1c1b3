"""Console sign-in sessions and their CSRF tokens.

The bearer token an operator signs in with is checked once (by the gRPC server's own
constant-time token -> role lookup) and never kept: the browser holds only a session cookie
whose value is a random session id signed with a per-process key (HMAC-SHA256), and the
server keeps the session (role, CSRF token, expiry) in memory. A forged or altered cookie
fails the signature before any lookup; signing out, or a restart, ends the session.

Every form carries a CSRF token that is checked in constant time: the session's own token
once signed in, and for the sign-in form itself a token bound (by the same key) to a random
nonce held in a short-lived pre-login cookie, so a page on another site cannot sign a browser
in to a session of its choosing either.

Sessions are capped per role and credential (R-H-23): the credential signed in with is kept
only as a keyed digest (:meth:`SessionStore.credential_digest`), and when one role+credential
holds its cap (:data:`MAX_ADMIN_SESSIONS`, :data:`MAX_SESSIONS_PER_CREDENTIAL` for every other
role) a new sign-in with it ends *that* credential's oldest session, never another's. So signing
in with the trainer token a thousand times never signs the admin out. Only a console credential
can open a session, so the table holds at most the sum of the caps of those credentials.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from rewardseal_control.roles import ADMIN_ROLE

__all__ = [
    "LOGIN_COOKIE",
    "MAX_ADMIN_SESSIONS",
    "MAX_SESSIONS_PER_CREDENTIAL",
    "SESSION_COOKIE",
    "SESSION_LIFETIME_SECONDS",
    "Session",
    "SessionStore",
]

SESSION_COOKIE: Final = "rewardseal_console"
LOGIN_COOKIE: Final = "rewardseal_console_login"
SESSION_LIFETIME_SECONDS: Final = 8 * 3600
"""A session ends this long after sign-in, whatever happens in between."""
LOGIN_LIFETIME_SECONDS: Final = 15 * 60
"""How long a sign-in form stays usable."""
MAX_ADMIN_SESSIONS: Final = 64
"""Admin sessions one admin credential holds at once; one more ends its own oldest."""
MAX_SESSIONS_PER_CREDENTIAL: Final = 256
"""Sessions any other role+credential (the trainer's) holds at once; one more ends its own
oldest, never an admin session."""


@dataclass(frozen=True)
class Session:
    """A signed-in browser: its role (``admin`` or ``trainer``) and its CSRF token."""

    session_id: str
    role: str
    csrf_token: str
    expires_at: float
    credential: str = field(default="", repr=False)
    """A keyed digest of the credential signed in with (never the token): the cap's key."""

    @property
    def is_admin(self) -> bool:
        """True for the admin credential (the only one that may revoke)."""
        return self.role == ADMIN_ROLE


class SessionStore:
    """In-memory sessions of one console process, keyed by signed random ids."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, key: bytes | None = None
    ) -> None:
        """``key``: the signing key (default: 32 random bytes, new in every process)."""
        self._key = key or secrets.token_bytes(32)
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    # ------------------------------------------------------------------ signing

    def _mac(self, purpose: str, value: str) -> str:
        digest = hmac.new(self._key, f"{purpose}\x00{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def _signed(self, purpose: str, value: str) -> str:
        return f"{value}.{self._mac(purpose, value)}"

    def _unsigned(self, purpose: str, signed: str | None) -> str | None:
        value, dot, mac = (signed or "").rpartition(".")
        if not dot or not value or not hmac.compare_digest(mac, self._mac(purpose, value)):
            return None
        return value

    # ------------------------------------------------------------------ sessions

    def credential_digest(self, token: str) -> str:
        """A keyed digest of ``token`` (this process's key): what the session caps and the
        sign-in limit key on, so that neither keeps the token itself."""
        return self._mac("credential", token)

    def open(self, role: str, credential: str) -> tuple[Session, str]:
        """A new session for ``role``, signed in with ``credential`` (its
        :meth:`credential_digest`), and the cookie value that names it.

        When that role+credential holds its cap already, its own oldest session ends.
        """
        now = self._clock()
        self._prune(now)
        cap = MAX_ADMIN_SESSIONS if role == ADMIN_ROLE else MAX_SESSIONS_PER_CREDENTIAL
        key = (role, credential)
        same = [held for held in self._sessions.values() if (held.role, held.credential) == key]
        # Insertion order is sign-in order: the first ones are the oldest.
        for oldest in same[: max(0, len(same) - cap + 1)]:
            del self._sessions[oldest.session_id]
        session = Session(
            session_id=secrets.token_urlsafe(32),
            role=role,
            csrf_token=secrets.token_urlsafe(32),
            expires_at=now + SESSION_LIFETIME_SECONDS,
            credential=credential,
        )
        self._sessions[session.session_id] = session
        return session, self._signed("session", session.session_id)

    def find(self, cookie: str | None) -> Session | None:
        """The live session a cookie value names; None when forged, unknown or expired."""
        session_id = self._unsigned("session", cookie)
        if session_id is None:
            return None
        session = self._sessions.get(session_id)
        if session is None or session.expires_at <= self._clock():
            self._sessions.pop(session_id, None)
            return None
        return session

    def close(self, session: Session) -> None:
        """End ``session`` (sign-out): its cookie names nothing any more."""
        self._sessions.pop(session.session_id, None)

    def _prune(self, now: float) -> None:
        for session_id in [s for s, held in self._sessions.items() if held.expires_at <= now]:
            del self._sessions[session_id]

    # ------------------------------------------------------------------ sign-in form

    def login_form(self) -> tuple[str, str]:
        """``(cookie value, CSRF token)`` for one sign-in form: a fresh nonce, signed with its
        issue time, and the token bound to it."""
        nonce = f"{secrets.token_urlsafe(24)}:{int(self._clock())}"
        return self._signed("login", nonce), self._mac("login-csrf", nonce)

    def login_form_ok(self, cookie: str | None, csrf_token: str) -> bool:
        """True when ``csrf_token`` belongs to the unexpired sign-in form ``cookie`` names."""
        nonce = self._unsigned("login", cookie)
        if nonce is None:
            return False
        issued = int(nonce.rpartition(":")[2])
        if self._clock() - issued > LOGIN_LIFETIME_SECONDS:
            return False
        return hmac.compare_digest(csrf_token, self._mac("login-csrf", nonce))
