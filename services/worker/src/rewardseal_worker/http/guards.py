"""What every HTTP request passes before a route sees it: the bearer token (R-W-10), the content
type, the body-size limit and the nesting limit.

One pure ASGI middleware, so a refusal costs no parsing: a missing or wrong token is 401 before
a byte of the body is read; a declared ``Content-Length`` above the limit is 413 at once, and a
body sent without one (chunked) is read only up to the limit, then refused. A body nested deeper
than :data:`MAX_BODY_DEPTH` is 422 ``invalid_episode`` before any JSON parser or model sees it
(R-MSG-9): a parser's recursion must never decide the answer (a body ~500 deep used to be a 500
with a two-thousand-line traceback). The server stays up and the connection is answered,
whatever the body's size or shape.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewardseal.core.validation import MAX_METADATA_DEPTH
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_worker.http.responses import plain_error

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body the HTTP face reads (one descriptor; far above any real one)."""
OPEN_PATHS = frozenset({"/health", "/openapi.json"})
"""Paths answered without a token: they name the worker and its API, nothing else."""
JSON_TYPES = ("application/json",)
MAX_BODY_DEPTH = MAX_METADATA_DEPTH + 2
"""Deepest nesting of a request body: the metadata bound plus the levels above the metadata
(the body, and a grader's ``item``). A body within it whose metadata is too deep is refused by
the descriptor's own check, naming ``metadata``."""
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_OPENING = frozenset(b"[{")


def nests_deeper_than(body: bytes, limit: int) -> bool:
    """True when the JSON text ``body`` opens more than ``limit`` objects and arrays inside one
    another; strings are skipped, so brackets in them do not count.

    No recursion and linear time whatever the bytes: escapes are dropped first (JSON has
    backslashes only inside strings), then strings (no quote is left inside one), then
    everything but brackets; one pass over the brackets stops at the first level too many.
    Not a JSON check: text that is not JSON is the parser's to refuse.
    """
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", _ESCAPE.sub(b"", body)))
    depth = 0
    for byte in brackets:
        if byte in _OPENING:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


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
        if nests_deeper_than(body, MAX_BODY_DEPTH):
            refusal = plain_error(
                422,
                "invalid_episode",
                f"the body nests deeper than {MAX_BODY_DEPTH} levels (metadata nests at most "
                f"{MAX_METADATA_DEPTH})",
            )
            await refusal(scope, receive, send)
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
