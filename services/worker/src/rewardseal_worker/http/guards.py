"""What every HTTP request passes before a route sees it: the bearer token (R-W-10), the content
type and the body-size limit.

One pure ASGI middleware, so a refusal costs no parsing: a missing or wrong token is 401 before
a byte of the body is read; a declared ``Content-Length`` above the limit is 413 at once, and a
body sent without one (chunked) is read only up to the limit, then refused. The server stays up
and the connection is answered, whatever the body's size.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_worker.http.responses import plain_error

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body the HTTP face reads (one descriptor; far above any real one)."""
OPEN_PATHS = frozenset({"/health", "/openapi.json"})
"""Paths answered without a token: they name the worker and its API, nothing else."""
JSON_TYPES = ("application/json",)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _is_json(content_type: str) -> bool:
    """``application/json``, with parameters (``; charset=utf-8``) or as a ``+json`` type."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


class RequestGuard:
    """ASGI middleware: token, then content type, then size, in that order."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        auth: BearerAuthInterceptor,
        max_body: int = MAX_BODY_BYTES,
        open_paths: Collection[str] = OPEN_PATHS,
    ) -> None:
        # The gRPC interceptor's comparison (every token, constant time): one check, two faces.
        self._auth = auth
        self._app = app
        self._max_body = max_body
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"] not in self._open:
            header = _header(scope, b"authorization") or ""
            if self._auth.role_for(header) is None:
                refusal = plain_error(401, "unauthenticated", "missing or wrong bearer token")
                await refusal(scope, receive, send)
                return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self._app(scope, receive, send)
            return
        content_type = _header(scope, b"content-type")
        if content_type is None or not _is_json(content_type):
            refusal = plain_error(
                415,
                "unsupported_media_type",
                "the body must be JSON (content-type: application/json)",
            )
            await refusal(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_body:
            await self._too_large(scope, receive, send)
            return
        body = await self._read(receive)
        if body is None:
            await self._too_large(scope, receive, send)
            return
        await self._app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it grows past the limit (the rest is never read)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client went away; the app sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = plain_error(
            413,
            "body_too_large",
            f"the body is larger than {self._max_body} bytes",
        )
        # The connection closes after this answer: the unread rest of the body is not waited for.
        refusal.headers["connection"] = "close"
        await refusal(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's later
    messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
