"""Rewardseal errors as HTTP answers: one status per gRPC code, one JSON body (R-H-1).

The body is ``{"error": reason, "detail": sentence}`` (the ``ErrorInfo.reason`` and message the
gRPC face sends, cut the same way by :mod:`rewardseal.rpc.status`), plus the error's metadata
as further fields: ``receipt_id`` on ``duplicate_episode``, so a client that lost an answer can
``GET /v1/rewards/{receipt_id}``. Every INVALID_ARGUMENT and FAILED_PRECONDITION reason of
docs/spec.md §8 (``unscored`` for the grader among them) is 422.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grpc
from starlette.responses import Response

from rewardseal.core.errors import RewardSealError
from rewardseal.rpc.status import wire_message, wire_metadata

STATUS_BY_CODE: Mapping[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.FAILED_PRECONDITION: 422,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAVAILABLE: 503,
}
"""The HTTP status of each gRPC code a worker error carries; any other code is 500."""


def json_response(
    document: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``document`` as compact JSON (NaN and infinities refused: they are not JSON)."""
    body = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_body(error: str, detail: str, **extra: str) -> dict[str, str]:
    """``{"error", "detail", ...}``; ``extra`` never replaces the first two."""
    return {**extra, "error": error, "detail": detail}


def error_response(error: RewardSealError) -> Response:
    """The HTTP answer for ``error``."""
    status = STATUS_BY_CODE.get(error.code, 500)
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    body = error_body(error.reason, wire_message(error), **wire_metadata(error))
    return json_response(body, status, headers)


def plain_error(status: int, error: str, detail: str, **extra: str) -> Response:
    """An HTTP-level refusal that no rewardseal error stands for (not JSON, too large, ...)."""
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return json_response(error_body(error, detail, **extra), status, headers)
