"""Bearer-token authentication for the rewardseal gRPC servers (R-W-10, R-C roles).

One interceptor serves both services: each token maps to a role, some methods are open
(health), some need particular roles (control's admin RPCs; the worker role's narrow set).
Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeAlias

import grpc

from rewardseal.core.errors import PermissionDenied, RewardSealError, Unauthenticated
from rewardseal.rpc.status import TooDeep, guard_decoding, to_status

HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
REFLECTION_METHOD_PREFIX = "/grpc.reflection."


# A string alias: grpc's handler class is generic only in its type stubs, not at run time.
_AnyHandler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuse calls without a known ``authorization: Bearer <token>`` or the right role."""

    def __init__(
        self,
        tokens: Mapping[str, str],
        *,
        open_methods: Collection[str] = (),
        roles_by_method: Mapping[str, Collection[str]] | None = None,
        too_deep: TooDeep | None = None,
    ) -> None:
        """``tokens`` maps each accepted token to its role name; ``too_deep`` makes the error
        for a request nested past protobuf's parse limit (see
        :func:`rewardseal.rpc.status.guard_decoding`)."""
        if not tokens or any(len(token) < 16 for token in tokens):
            raise ValueError("every bearer token must have at least 16 characters")
        self._tokens = [(token.encode(), role) for token, role in tokens.items()]
        self._open = frozenset(open_methods)
        self._roles_by_method = {m: frozenset(r) for m, r in (roles_by_method or {}).items()}
        self._too_deep = too_deep
        # method -> (the server's handler, its guarded form): guarding builds a new handler, and
        # the server hands the same one for a method on every call. Only registered methods
        # (a handler, not None) are kept, so the map is bounded by the service's methods.
        self._guarded: dict[str, tuple[_AnyHandler, _AnyHandler | None]] = {}

    def role_for(self, authorization: str) -> str | None:
        """The role of the presented header value, or None; every token is compared."""
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

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_AnyHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _AnyHandler | None:
        method: str = handler_call_details.method
        if (
            method in self._open
            or method.startswith(HEALTH_METHOD_PREFIX)
            or method.startswith(REFLECTION_METHOD_PREFIX)
        ):
            return self._guard(method, await continuation(handler_call_details))
        metadata = handler_call_details.invocation_metadata or ()
        header = next((str(v) for k, v in metadata if k == "authorization"), "")
        role = self.role_for(header)
        handler = await continuation(handler_call_details)
        if role is None:
            return _refusing(handler, Unauthenticated("missing or wrong bearer token"))
        required = self._roles_by_method.get(method)
        if required is not None and role not in required:
            # Name the role, never the token; the admin RPCs say so (the common case).
            needs = "the admin credential" if required == {"admin"} else "another credential"
            return _refusing(
                handler, PermissionDenied(f"{method} needs {needs}, not the {role} credential")
            )
        return self._guard(method, handler)

    def _guard(self, method: str, handler: _AnyHandler | None) -> _AnyHandler | None:
        """``handler`` guarded (every server this interceptor guards answers undecodable
        requests INVALID_ARGUMENT), built once per method while the server's handler stays."""
        if handler is None:
            return None
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = guard_decoding(handler, too_deep=self._too_deep)
        self._guarded[method] = (handler, guarded)
        return guarded


def _refusing(handler: _AnyHandler | None, error: RewardSealError) -> _AnyHandler:
    """A handler of the same streaming shape as ``handler`` that only aborts with ``error``."""
    status = to_status(error)

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort_with_status(status)

    # grpc.aio accepts a plain coroutine for every shape (streams then use context.write), so
    # one refusing behaviour serves unary and streaming methods alike.
    if handler is None or not (handler.request_streaming or handler.response_streaming):
        return grpc.unary_unary_rpc_method_handler(refuse)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.stream_unary_rpc_method_handler(refuse)
