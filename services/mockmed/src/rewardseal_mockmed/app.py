"""The MockMed HTTP API (FastAPI).

=======================================  ================================================
``POST /api/encounters``                  create an encounter; 201 with the record and the
                                          UI banner ``"Saved"`` (client token)
``GET  /api/encounters?patient_id=P``     ``{"encounters": [record, ...]}`` (client token)
``GET  /fhir/Encounter?patient=P``        FHIR R4 searchset Bundle (client token)
``GET  /api/patients/P``                  the patient's summary: ``patient_id``,
                                          ``encounter_count``, ``open_encounter_count``,
                                          ``last_encounter_at`` (client token)
``POST /api/drafts``                      open an encounter form (a draft): 201 with the
                                          draft, no write, no banner (client token)
``PATCH /api/drafts/D?patient_id=P``      change the draft's ``type``, ``note``, ``status``,
                                          ``priority``; 404 unless it is P's (client token)
``POST /api/drafts/D/submit?patient_id=P``  store the draft as an encounter: 201 with the
                                          record and the banner ``"Saved"`` (client token)
``POST /ui/claim``                        show a saved banner and a row WITHOUT storing it:
                                          the banner lie (client token)
``POST /ui/draft``                        show a filled-in form that was never submitted:
                                          no write, no banner, no screen row (client token)
``GET  /screen.json``                     the screen dump (client token)
``GET  /admin/faults``, ``POST``          read or set the fault switch (admin token)
``GET  /healthz``                         ``{"status": "ok"}`` (open)
=======================================  ================================================

A record is every column of the table: ``id``, ``patient_id``, ``type``, ``note``, ``status``,
``priority``, ``created_at`` (NULL columns as ``null``). A write may set ``patient_id``
(required), ``type``, ``note``, ``status`` and ``priority`` (strings or null); any other field,
including ``id`` and ``created_at`` (set by the service), is refused with 422.

Drafts live in the serving process, never in the table (:mod:`rewardseal_mockmed.drafts`): an
unsubmitted form is invisible to the system of record, as it is in a real EMR.

An optional read-only token may call the four ``GET`` read routes above and nothing else (a
write with it is 403): the credential a reward worker's oracle holds.

Authentication and the fault switch sit in one ASGI middleware in front of every route, so a
request without the right ``Authorization: Bearer`` token is answered 401 before its body is
read, and faults reach only reads that carry a valid token.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from rewardseal.core.errors import RewardSealError, Unavailable, ValidationError
from rewardseal_mockmed import __version__
from rewardseal_mockmed.drafts import DRAFT_FIELDS, DraftBook
from rewardseal_mockmed.faults import MALFORMED_BODY, FaultSetting, FaultSwitch
from rewardseal_mockmed.fhir import FHIR_CONTENT_TYPE, operation_outcome, searchset_bundle
from rewardseal_mockmed.screen import SAVED_BANNER, ScreenDump
from rewardseal_mockmed.store import EncounterStore, Record, timestamp

__all__ = [
    "DEFAULT_CLAIM_NOTE",
    "ClaimIn",
    "DraftChange",
    "EncounterIn",
    "create_app",
]

DEFAULT_CLAIM_NOTE: Final = "Synthetic triage: mild headache since morning; vitals stable."
HEALTH_PATH: Final = "/healthz"
ADMIN_PREFIX: Final = "/admin/"
_READ_PATHS: Final = ("/api/encounters", "/screen.json")
_READ_PREFIXES: Final = ("/fhir/", "/api/patients/")
_MAX_ID: Final = 256
_MAX_TEXT: Final = 10_000


class EncounterIn(BaseModel):
    """A write: the writable columns only (anything else is refused with 422)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    patient_id: str = Field(min_length=1, max_length=_MAX_ID)
    type: str | None = Field(default=None, max_length=_MAX_ID)
    note: str | None = Field(default=None, max_length=_MAX_TEXT)
    status: str | None = Field(default=None, max_length=_MAX_ID)
    priority: str | None = Field(default=None, max_length=_MAX_ID)


class ClaimIn(EncounterIn):
    """What the UI claims to have saved; by default a Triage encounter."""

    type: str | None = Field(default="Triage", max_length=_MAX_ID)
    note: str | None = Field(default=DEFAULT_CLAIM_NOTE, max_length=_MAX_TEXT)
    status: str | None = Field(default="open", max_length=_MAX_ID)


class DraftChange(BaseModel):
    """A change of a draft: any of its fields (its patient is fixed; anything else is 422)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: str | None = Field(default=None, max_length=_MAX_ID)
    note: str | None = Field(default=None, max_length=_MAX_TEXT)
    status: str | None = Field(default=None, max_length=_MAX_ID)
    priority: str | None = Field(default=None, max_length=_MAX_ID)


_NO_DRAFT: Final = {"detail": "no such draft for this patient"}


def _json(status_code: int, content: Any, media_type: str | None = None) -> JSONResponse:
    return JSONResponse(content, status_code=status_code, media_type=media_type)


def _is_read(method: str, path: str) -> bool:
    return method in ("GET", "HEAD") and (path in _READ_PATHS or path.startswith(_READ_PREFIXES))


def _presented_token(scope: Scope) -> bytes | None:
    scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token.encode()


class GuardMiddleware:
    """Bearer-token check on every route but the health check, then read faults."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        admin_token: str | None,
        faults: FaultSwitch,
        read_token: str | None = None,
    ) -> None:
        """Guard ``app`` with the client ``token`` (admin routes: ``admin_token``; reads also
        ``read_token``)."""
        self._app = app
        self._token = token.encode()
        self._admin_token = admin_token.encode() if admin_token is not None else None
        self._read_token = read_token.encode() if read_token is not None else None
        self._faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 401/403 or a fault directly; pass everything else on."""
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self._app(scope, receive, send)
            return
        response = self._refusal(scope)
        if response is None and _is_read(scope["method"], scope["path"]):
            response = await self._fault(scope["path"])
        if response is not None:
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        admin = scope["path"].startswith(ADMIN_PREFIX)
        expected = self._admin_token if admin else self._token
        if expected is None:
            return _json(403, {"detail": "the fault switch is off (no admin token configured)"})
        presented = _presented_token(scope)
        # compare_digest on every request: the time taken says nothing about the token.
        if (
            not admin
            and presented is not None
            and self._read_token is not None
            and hmac.compare_digest(presented, self._read_token)
        ):
            if _is_read(scope["method"], scope["path"]):
                return None
            return _json(403, {"detail": "the read token may only read"})
        if presented is None or not hmac.compare_digest(presented, expected):
            return JSONResponse(
                {"detail": "missing or invalid bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return None

    async def _fault(self, path: str) -> Response | None:
        setting = self._faults.get()
        if setting.mode == "slow":
            await asyncio.sleep(setting.delay_seconds)
        elif setting.mode == "down":
            return _json(503, {"detail": "MockMed is down (fault switch)"})
        elif setting.mode == "error500":
            return _json(500, {"detail": "internal error (fault switch)"})
        elif setting.mode == "malformed":
            media_type = FHIR_CONTENT_TYPE if path.startswith("/fhir/") else "application/json"
            return Response(MALFORMED_BODY, status_code=200, media_type=media_type)
        return None


def create_app(
    store: EncounterStore,
    screen: ScreenDump,
    *,
    token: str,
    admin_token: str | None = None,
    faults: FaultSwitch | None = None,
    read_token: str | None = None,
) -> FastAPI:
    """The MockMed application over ``store`` and ``screen`` (both already open).

    ``token`` guards every route but ``/healthz``; ``admin_token`` guards ``/admin/``
    (without it the fault switch answers 403); ``read_token``, when given, may call the read
    routes only.
    """
    switch = faults if faults is not None else FaultSwitch()
    app = FastAPI(
        title="MockMed",
        summary="A synthetic EMR system of record (no real patient data).",
        version=__version__,
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(
        GuardMiddleware,
        token=token,
        admin_token=admin_token,
        faults=switch,
        read_token=read_token,
    )

    @app.exception_handler(RewardSealError)
    async def store_error(request: Request, exc: RewardSealError) -> Response:
        if isinstance(exc, ValidationError):
            return _json(422, {"detail": exc.message})
        if isinstance(exc, Unavailable):
            return _json(503, {"detail": exc.message})
        return _json(500, {"detail": exc.message})

    def save(fields: dict[str, str | None]) -> Record:
        record = store.create(fields)
        screen.show(record)
        return record

    @app.post("/api/encounters", status_code=201)
    async def create_encounter(body: EncounterIn) -> JSONResponse:
        """Store an encounter; answer with the record and the UI banner."""
        record = await run_in_threadpool(save, body.model_dump())
        return _json(201, {**record, "banner": SAVED_BANNER})

    @app.get("/api/encounters")
    async def list_encounters(patient_id: str) -> JSONResponse:
        """Every stored encounter of ``patient_id`` (the rest oracle's read)."""
        records = await run_in_threadpool(store.list_for_patient, patient_id)
        return _json(200, {"encounters": records})

    @app.get("/fhir/Encounter")
    async def fhir_encounters(request: Request, patient: str | None = None) -> JSONResponse:
        """FHIR R4 Encounter search by patient (``P`` or ``Patient/P``): a searchset Bundle."""
        patient_id = (patient or "").removeprefix("Patient/")
        if not patient_id:
            return _json(
                400,
                operation_outcome("required", "search by patient: ?patient=<id>"),
                FHIR_CONTENT_TYPE,
            )
        records = await run_in_threadpool(store.list_for_patient, patient_id)
        bundle = searchset_bundle(records, base_url=f"{str(request.base_url).rstrip('/')}/fhir")
        return _json(200, bundle, FHIR_CONTENT_TYPE)

    @app.get("/api/patients/{patient_id}")
    async def patient_summary(patient_id: str) -> JSONResponse:
        """The patient's summary from the stored encounters (a patient with none has zeros)."""
        records = await run_in_threadpool(store.list_for_patient, patient_id)
        stamps = [r["created_at"] for r in records if r["created_at"] is not None]
        return _json(
            200,
            {
                "patient_id": patient_id,
                "encounter_count": len(records),
                "open_encounter_count": sum(r["status"] == "open" for r in records),
                "last_encounter_at": max(stamps, default=None),
            },
        )

    drafts = DraftBook()

    def draft_answer(status_code: int, draft: dict[str, str | None]) -> JSONResponse:
        return _json(status_code, {"draft": draft, "submitted": False, "banner": None})

    @app.post("/api/drafts", status_code=201)
    async def open_draft(body: EncounterIn) -> JSONResponse:
        """Open a draft of ``body.patient_id``: nothing is stored and no banner shows."""
        fields = body.model_dump()
        return draft_answer(201, drafts.open(fields.pop("patient_id"), fields))

    @app.patch("/api/drafts/{draft_id}")
    async def change_draft(draft_id: str, patient_id: str, body: DraftChange) -> JSONResponse:
        """Change the fields ``body`` names on ``patient_id``'s draft (404 when not theirs)."""
        draft = drafts.change(draft_id, patient_id, body.model_dump(exclude_unset=True))
        return _json(404, _NO_DRAFT) if draft is None else draft_answer(200, draft)

    def submit(draft_id: str, patient_id: str) -> Record | None:
        draft = drafts.take(draft_id, patient_id)
        if draft is None:
            return None
        try:
            return save({"patient_id": patient_id, **{k: draft[k] for k in DRAFT_FIELDS}})
        except BaseException:
            drafts.put_back(draft)  # the store refused: the form is still open
            raise

    @app.post("/api/drafts/{draft_id}/submit", status_code=201)
    async def submit_draft(draft_id: str, patient_id: str) -> JSONResponse:
        """Store ``patient_id``'s draft as an encounter; answer as a create does."""
        record = await run_in_threadpool(submit, draft_id, patient_id)
        if record is None:
            return _json(404, _NO_DRAFT)
        return _json(201, {**record, "banner": SAVED_BANNER})

    def claim(fields: dict[str, str | None]) -> dict[str, str | None]:
        row: dict[str, str | None] = {
            "id": ScreenDump.claimed_row_id(),
            **fields,
            "created_at": timestamp(),
        }
        screen.show(row)
        return row

    @app.post("/ui/claim", status_code=201)
    async def claim_saved(body: ClaimIn) -> JSONResponse:
        """Show a saved banner and a row on screen without writing the store (the lie)."""
        row = await run_in_threadpool(claim, body.model_dump())
        return _json(201, {**row, "banner": SAVED_BANNER})

    @app.post("/ui/draft")
    async def show_draft(body: EncounterIn) -> JSONResponse:
        """Show the form filled in but not submitted: nothing is stored and no banner shows.

        The answer is the form as the UI displays it (``"submitted": false``). A reward that
        judges the form on screen sees a complete encounter; the store has none.
        """
        return _json(200, {"form": body.model_dump(), "submitted": False, "banner": None})

    @app.get("/screen.json")
    async def screen_dump(patient_id: str | None = None) -> JSONResponse:
        """The screen dump (only ``patient_id``'s rows and banner when given)."""
        return _json(200, screen.document(patient_id))

    @app.get("/admin/faults")
    async def get_faults() -> FaultSetting:
        """The current fault setting."""
        return switch.get()

    @app.post("/admin/faults")
    async def set_faults(setting: FaultSetting) -> FaultSetting:
        """Switch faults on (``slow``, ``down``, ``error500``, ``malformed``) or off (``none``)."""
        return switch.set(setting)

    @app.get(HEALTH_PATH)
    async def healthz() -> JSONResponse:
        """``{"status": "ok"}`` while the database answers, else 503."""
        try:
            await run_in_threadpool(store.ping)
        except RewardSealError:
            return _json(503, {"status": "unavailable"})
        return _json(200, {"status": "ok"})

    return app
