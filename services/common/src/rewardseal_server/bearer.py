"""Bearer tokens and the role of the call being served, without grpc.

:class:`BearerTokens` maps presented ``authorization`` values to role names (constant-time
compares, tokens never logged); the gRPC interceptor (:mod:`rewardseal_server.auth`), the worker's
HTTP face and control's console all ask it. The interceptor resolves the caller's role once per
call and sets it with :func:`serve_as`; what runs the call reads it with :func:`caller_role`, so
nothing reads the ``authorization`` header twice.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from contextvars import ContextVar

__all__ = ["MIN_TOKEN_LENGTH", "BearerTokens", "caller_role", "serve_as"]

MIN_TOKEN_LENGTH = 16
"""The shortest bearer token a server accepts."""

_CALLER_ROLE: ContextVar[str | None] = ContextVar("rewardseal_caller_role", default=None)


class BearerTokens:
    """The accepted bearer tokens and the role each grants."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        """``tokens`` maps each accepted token to its role name.

        Raises:
            ValueError: no token, or one shorter than :data:`MIN_TOKEN_LENGTH` characters.
        """
        if not tokens or any(len(token) < MIN_TOKEN_LENGTH for token in tokens):
            raise ValueError(f"every bearer token must have at least {MIN_TOKEN_LENGTH} characters")
        self._tokens = [(token.encode(), role) for token, role in tokens.items()]

    def role_for(self, authorization: str) -> str | None:
        """The role of the presented header value (``Bearer <token>``), or None; every token
        is compared."""
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not presented:
            return None
        given = presented.strip().encode()
        role = None
        # Compare against every token (no early exit) so timing says nothing about which matched.
        for token, token_role in self._tokens:
            if hmac.compare_digest(given, token):
                role = token_role
        return role


def serve_as(role: str | None) -> None:
    """Record ``role`` as the caller's role for the rest of the call being served (the
    interceptor's one decision). A ``grpc.aio`` server runs each call's interceptors and handler
    in one task of its own, so the handler sees it and no other call does."""
    _CALLER_ROLE.set(role)


def caller_role() -> str | None:
    """The role the interceptor found for the call being served; None outside a call or for
    an open method (health, reflection)."""
    return _CALLER_ROLE.get()
