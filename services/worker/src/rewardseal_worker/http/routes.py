"""The HTTP/JSON routes of the worker (R-H-1): a FastAPI application over one ``Scorer``.

Each route translates a body to the message the gRPC face takes, awaits the same Scorer call
(``begin``, ``score``, ``get_receipt``, the grader's :func:`grade_item`, ``health``) and turns
the answer into JSON (:mod:`.shapes`) or the error into its status (:mod:`.responses`).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from rewardseal.core.errors import RewardSealError, Unavailable
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_worker import __version__
from rewardseal_worker.engine import ScoreJob, Scorer
from rewardseal_worker.grading import grade_item
from rewardseal_worker.http.guards import MAX_BODY_BYTES, RequestGuard
from rewardseal_worker.http.responses import error_response, json_response, plain_error
from rewardseal_worker.http.shapes import (
    BeginBody,
    BeginView,
    EpisodeBody,
    ErrorView,
    GraderBody,
    GradeView,
    HealthView,
    RewardView,
    begin_request_from_body,
    begin_view,
    descriptor_from_body,
    health_view,
    reward_view,
)

TITLE = "rewardseal worker"
NOT_SERVING = (
    "the worker is not serving (grpc.health.v1 NOT_SERVING): its store or its system of "
    "record does not answer, or it is stopping"
)
"""The detail of ``GET /health``'s 503 while the gRPC health service says NOT_SERVING."""
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorView, "description": text}
    for status, text in (
        (401, "missing or wrong bearer token"),
        (422, "refused: the reason is a docs/spec.md §8 word, the detail names the field"),
        (503, "the worker is overloaded or its store is down"),
    )
}
_BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    **{
        status: {"model": ErrorView, "description": text}
        for status, text in (
            (400, "the body is not JSON"),
            (413, f"the body is larger than {MAX_BODY_BYTES} bytes"),
            (415, "the body is not declared as JSON"),
        )
    },
}


def _document(envelope: SignedEnvelope) -> dict[str, Any]:
    # The payload is the receipt this worker just signed or stored: its own bytes.
    return reward_view(RewardEvidenceReceipt.FromString(envelope.payload), envelope)


def create_app(
    scorer: Scorer,
    *,
    token: str,
    max_body: int = MAX_BODY_BYTES,
    serving: Callable[[], bool] | None = None,
    reason: Callable[[], str | None] | None = None,
) -> FastAPI:
    """The HTTP face of ``scorer``; every route but ``/health`` and ``/openapi.json`` needs
    ``Authorization: Bearer <token>`` (R-W-10).

    ``serving``: what the gRPC server's ``grpc.health.v1`` reports now (the worker passes
    :attr:`RunningServer.serving`, which its health watch keeps truthful); ``GET /health`` answers
    503 while it is False, so an HTTP probe and a gRPC probe agree. None: always serving.
    ``reason``: why not, added to that 503's detail (the health watch's reason: which dependency
    does not answer, and its error).
    """
    app = FastAPI(
        title=TITLE,
        version=__version__,
        description="HTTP/JSON face of the rewardseal worker (docs/spec.md §13, docs/http.md).",
        docs_url=None,  # no browser UI: it would load scripts from a CDN
        redoc_url=None,
    )
    app.add_middleware(
        RequestGuard,
        auth=BearerAuthInterceptor({token: "trainer"}),
        max_body=max_body,
    )
    _add_error_handlers(app)

    @app.post(
        "/v1/episodes",
        response_model=BeginView,
        responses=_BODY_ERRORS,
        summary="Begin an episode: record the baseline read before the rollout (R-W-1)",
    )
    async def begin_episode(body: BeginBody) -> Response:
        begun = await scorer.begin(begin_request_from_body(body))
        return json_response(
            begin_view(
                begun.episode_id, begun.begun_at.ToDatetime(tzinfo=UTC), begun.baseline_recorded
            )
        )

    @app.post(
        "/v1/rewards",
        response_model=RewardView,
        responses={
            **_BODY_ERRORS,
            409: {"model": ErrorView, "description": "duplicate_episode, with receipt_id"},
        },
        summary="Score an episode: read, judge, sign, store, answer (once per episode)",
    )
    async def score_episode(body: EpisodeBody) -> Response:
        envelope = await scorer.score(ScoreJob(descriptor_from_body(body)))
        return json_response(_document(envelope))

    @app.get(
        "/v1/rewards/{receipt_id}",
        response_model=RewardView,
        responses={**_ERRORS, 404: {"model": ErrorView, "description": "no such receipt"}},
        summary="A stored receipt by its id",
    )
    async def get_receipt(receipt_id: str) -> Response:
        envelope = await asyncio.to_thread(scorer.get_receipt, receipt_id=receipt_id)
        return json_response(_document(envelope))

    @app.post(
        "/v1/graders/openai",
        response_model=GradeView,
        responses=_BODY_ERRORS,
        summary="grade(sample, item) -> score in [0, 1]; an unscored episode is 422 unscored",
    )
    async def grade(body: GraderBody) -> Response:
        graded = await grade_item(scorer, body.item)
        return json_response(
            {"score": graded.score, **reward_view(graded.receipt, graded.envelope)}
        )

    @app.get(
        "/health",
        response_model=HealthView,
        responses={503: _ERRORS[503]},
        summary="Key, contract, tier and certificate of this worker (no token)",
    )
    async def health() -> Response:
        if serving is not None and not serving():
            why = reason() if reason is not None else None
            raise Unavailable(NOT_SERVING if why is None else f"{NOT_SERVING}; {why}")
        answer = await asyncio.to_thread(scorer.health)
        answer.version = __version__
        return json_response(health_view(answer))

    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document ``/openapi.json`` serves (checked in as docs/openapi.json), made
    without a worker: the routes are described, never called."""
    return create_app(cast(Scorer, None), token="0" * 16).openapi()


def _location(error: Mapping[str, Any]) -> list[str]:
    return [str(part) for part in error.get("loc", ()) if part != "body"]


def shape_refusal(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The field a 422 names and why, from pydantic's errors for one body (R-H-25).

    An unknown field comes first: a misspelled ``policy_chekpoint_id`` makes pydantic report
    both the unknown name and the real one as missing, and the caller's mistake is the first.
    The missing fields at the same place are what the caller probably meant.
    """
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    if not unknown:
        first = errors[0] if errors else {}
        return ".".join(_location(first)) or "body", str(first.get("msg", "invalid"))
    where = _location(unknown[0])
    missing = [
        _location(e)[-1]
        for e in errors
        if e.get("type") == "missing" and _location(e)[:-1] == where[:-1] and _location(e)
    ]
    field = ".".join(where) or "body"
    close = difflib.get_close_matches(where[-1] if where else "", missing, n=1) or missing[:1]
    hint = f" (did you mean {'.'.join([*where[:-1], close[0]])}?)" if close else ""
    return field, f"unknown field{hint}"


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as ``{"error", "detail"}`` (R-H-1)."""

    async def domain(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RewardSealError)
        return error_response(exc)

    async def shape(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        first = errors[0] if errors else {}
        location = _location(first)
        if first.get("type") == "json_invalid" or (first.get("type") == "missing" and not location):
            return plain_error(400, "invalid_json", "the body is not a JSON document")
        field, message = shape_refusal(errors)
        return plain_error(422, "invalid_episode", f"{field}: {message}"[:1024], field=field[:256])

    async def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        # FastAPI answers 400 itself for a body json cannot even decode (not UTF-8, nested too
        # deep): not JSON, as far as the caller is concerned.
        words = {400: "invalid_json", 404: "not_found", 405: "method_not_allowed"}
        word = words.get(exc.status_code, "http_error")
        return plain_error(exc.status_code, word, str(exc.detail))

    async def internal(request: Request, exc: Exception) -> Response:
        # Logged by the server; the caller learns only that it was not their input.
        return plain_error(500, "internal", "the worker failed to answer; see its log")

    app.add_exception_handler(RewardSealError, domain)
    app.add_exception_handler(Exception, internal)
    app.add_exception_handler(RequestValidationError, shape)
    app.add_exception_handler(HTTPException, http)
