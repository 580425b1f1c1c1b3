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
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "LOGIN_COOKIE",
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
MAX_SESSIONS: Final = 1024
"""Sessions held at once; signing in beyond this ends the oldest (memory stays bounded)."""


@dataclass(frozen=True)
class Session:
    """A signed-in browser: its role (``admin`` or ``trainer``) and its CSRF token."""

    session_id: str
    role: str
    csrf_token: str
    expires_at: float

    @property
    def is_admin(self) -> bool:
        """True for the admin credential (the only one that may revoke)."""
        return self.role == "admin"


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

    def open(self, role: str) -> tuple[Session, str]:
        """A new session for ``role`` and the cookie value that names it."""
        now = self._clock()
        self._prune(now)
        while len(self._sessions) >= MAX_SESSIONS:
            oldest = min(self._sessions.values(), key=lambda session: session.expires_at)
            del self._sessions[oldest.session_id]
        session = Session(
            session_id=secrets.token_urlsafe(32),
            role=role,
            csrf_token=secrets.token_urlsafe(32),
            expires_at=now + SESSION_LIFETIME_SECONDS,
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
