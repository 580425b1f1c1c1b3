"""The operator console's web app: server-rendered pages over the control plane's store.

Read-only for every signed-in operator (the admin or the client credential); revoking a
certificate needs the admin credential, a confirmation (typing the certificate id again and a
reason) and the session's CSRF token, and goes through the servicer's one revocation path (the
signed list is published and pushed to watching workers exactly as for the RPC). Every page is
rendered by Jinja2 with autoescaping on; no page carries a script, and the security headers
(:data:`SECURITY_HEADERS`) forbid one, forbid framing and forbid caching.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from rewardseal.core.certificates import check_policy_update
from rewardseal.core.errors import NotFound, RewardSealError, ValidationError
from rewardseal_control.console import views
from rewardseal_control.console.peers import FORWARDED_FOR, Peer, TrustedProxies, throttle_key
from rewardseal_control.console.sessions import (
    LOGIN_COOKIE,
    LOGIN_LIFETIME_SECONDS,
    SESSION_COOKIE,
    SESSION_LIFETIME_SECONDS,
    Session,
    SessionStore,
)
from rewardseal_control.console.throttle import SignInThrottle
from rewardseal_control.service import ADMIN_ROLE, TRAINER_ROLE, ControlPlaneServicer

__all__ = ["CONSOLE_ACTOR", "SECURITY_HEADERS", "create_console_app"]

_log = logging.getLogger(__name__)

CONSOLE_ACTOR: Final = "admin:console"
"""Who the audit log names for a revocation made in the console (a role, never a token)."""
CONSOLE_ROLES: Final = frozenset({ADMIN_ROLE, TRAINER_ROLE})
"""Credentials that may sign in (the worker credential may not)."""
MAX_FORM_BYTES: Final = 16 * 1024
SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""Sent with every response (the stylesheet included: nothing here is worth a cache)."""


class _SignInRequired(Exception):
    """No live session: the browser is sent to the sign-in page."""


class _Refused(Exception):
    """A request the console answers with an error page (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("rewardseal_control.console", "templates"),
        autoescape=True,  # every value is text, whatever it contains
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = _when
    environment.filters["json_value"] = _json_value
    return environment


def _json_value(value: object) -> str:
    """A plain JSON value as JSON text (``false``, ``"text"``, ``12``): how the log stores it."""
    return json.dumps(value, sort_keys=True)


def _when(value: datetime | None) -> str:
    """A moment as the console shows it: UTC, to the second."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def create_console_app(
    servicer: ControlPlaneServicer,
    *,
    secure_cookies: bool = True,
    sessions: SessionStore | None = None,
    throttle: SignInThrottle | None = None,
    trusted_proxies: TrustedProxies | None = None,
) -> FastAPI:
    """The console over ``servicer``'s store, credentials (its ``role_for``) and revocation.

    ``secure_cookies``: mark cookies Secure (keep True; browsers accept Secure cookies from
    ``http://localhost`` and ``http://127.0.0.1``, and over anything else the console serves
    HTTPS only). ``throttle``: the limit on failed sign-ins per client and credential
    (default: :class:`SignInThrottle`'s). ``trusted_proxies``: the proxies whose
    ``X-Forwarded-For`` names the client (default none: the socket peer is the client).
    """
    store = servicer.store
    sessions = sessions or SessionStore()
    throttle = throttle or SignInThrottle()
    proxies = trusted_proxies or TrustedProxies()
    templates = _templates()
    stylesheet = resources.files("rewardseal_control.console").joinpath("static/console.css")
    css = stylesheet.read_bytes()
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        if request.url.scheme == "https":
            response.headers["Strict-Transport-Security"] = "max-age=31536000"
        return response

    # ------------------------------------------------------------------ helpers

    def render(
        template: str, session: Session | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        body = templates.get_template(template).render(session=session, **context)
        return HTMLResponse(body, status_code=status)

    def set_cookie(response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path="/",
            secure=secure_cookies,
            httponly=True,
            samesite="strict",
        )

    def signed_in(request: Request, *, admin: bool = False) -> Session:
        session = sessions.find(request.cookies.get(SESSION_COOKIE))
        if session is None:
            raise _SignInRequired
        if admin and not session.is_admin:
            raise _Refused(403, "this needs the admin credential: sign in with the admin token")
        return session

    async def read_form(request: Request) -> dict[str, str]:
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise _Refused(415, "a form must be sent as application/x-www-form-urlencoded")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                raise _Refused(413, f"a form may carry at most {MAX_FORM_BYTES} bytes")
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=16)
        except (UnicodeDecodeError, ValueError):
            raise _Refused(400, "the form could not be read") from None
        # A field sent twice is ambiguous: it counts as absent.
        return {name: values[0] for name, values in fields.items() if len(values) == 1}

    def peer_of(request: Request) -> Peer:
        socket_peer = request.client.host if request.client is not None else None
        return proxies.peer(socket_peer, request.headers.getlist(FORWARDED_FOR))

    def check_csrf(session: Session, form: Mapping[str, str]) -> None:
        if not hmac.compare_digest(form.get("csrf_token", ""), session.csrf_token):
            raise _Refused(
                403, "this form did not come from this console session (CSRF check failed)"
            )

    def policy_update_query(request: Request) -> int | None:
        text = request.query_params.get("policy_update", "")
        if not text:
            return None
        try:
            return check_policy_update(int(text))
        except ValueError:
            raise ValidationError("policy_update must be a whole number") from None

    async def read(work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(work, store, *args, **kwargs)

    # ------------------------------------------------------------------ errors

    @app.exception_handler(_SignInRequired)
    async def sign_in(request: Request, exc: _SignInRequired) -> Response:
        return RedirectResponse("/login", status_code=303)

    @app.exception_handler(_Refused)
    async def refused(request: Request, exc: _Refused) -> Response:
        session = sessions.find(request.cookies.get(SESSION_COOKIE))
        return render("error.html", session, exc.status, message=exc.message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        session = sessions.find(request.cookies.get(SESSION_COOKIE))
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return render("error.html", session, exc.status_code, message=message)

    @app.exception_handler(RewardSealError)
    async def domain_error(request: Request, exc: RewardSealError) -> Response:
        session = sessions.find(request.cookies.get(SESSION_COOKIE))
        status = 404 if isinstance(exc, NotFound) else 400
        if not isinstance(exc, NotFound | ValidationError):
            status = 503
        return render("error.html", session, status, message=exc.message)

    # ------------------------------------------------------------------ sign-in

    def login_page(
        status: int = 200, error: str = "", headers: Mapping[str, str] | None = None
    ) -> Response:
        cookie, csrf = sessions.login_form()
        response = render("login.html", None, status, csrf_token=csrf, error=error)
        set_cookie(response, LOGIN_COOKIE, cookie, LOGIN_LIFETIME_SECONDS)
        response.headers.update(headers or {})
        return response

    @app.get("/login")
    async def login_form(request: Request) -> Response:
        if sessions.find(request.cookies.get(SESSION_COOKIE)) is not None:
            return RedirectResponse("/contracts", status_code=303)
        return login_page()

    @app.post("/login")
    async def login(request: Request) -> Response:
        peer = peer_of(request)
        client = throttle_key(peer.client)
        wait = throttle.retry_after(client)
        if wait is not None:
            # Before the form is read: a throttled client costs no token lookup.
            _log.warning("console sign-in throttled from %s (retry after %d s)", peer, wait)
            return login_page(
                429,
                f"too many failed sign-ins from this address: try again in {wait} s",
                {"Retry-After": str(wait)},
            )
        form = await read_form(request)
        if not sessions.login_form_ok(
            request.cookies.get(LOGIN_COOKIE), form.get("csrf_token", "")
        ):
            return login_page(403, "the sign-in form expired or did not come from this console")
        token = form.get("token", "").strip()
        role_for = servicer.role_for
        role = role_for(f"Bearer {token}") if role_for is not None and token else None
        # The limit and the session keep only a keyed digest of what was typed.
        credential = sessions.credential_digest(token)
        if role not in CONSOLE_ROLES:
            throttle.failed(client, credential)
            # Who tried, never what they typed.
            _log.warning("console sign-in refused from %s", peer)
            return login_page(401, "that token does not sign in to the console")
        assert role is not None
        _log.info("console sign-in: %s credential from %s", role, peer)
        _, cookie = sessions.open(role, credential)
        response = RedirectResponse("/contracts", status_code=303)
        set_cookie(response, SESSION_COOKIE, cookie, SESSION_LIFETIME_SECONDS)
        response.delete_cookie(LOGIN_COOKIE, path="/", secure=secure_cookies, httponly=True)
        return response

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        session = signed_in(request)
        check_csrf(session, await read_form(request))
        sessions.close(session)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=secure_cookies, httponly=True)
        return response

    # ------------------------------------------------------------------ pages

    @app.get("/")
    async def home(request: Request) -> Response:
        signed_in(request)
        return RedirectResponse("/contracts", status_code=303)

    @app.get("/static/console.css")
    async def style() -> Response:
        return Response(css, media_type="text/css")

    @app.get("/contracts")
    async def contracts(request: Request) -> Response:
        session = signed_in(request)
        rows, next_token = await read(
            views.contracts, page_token=request.query_params.get("page", "")
        )
        return render("contracts.html", session, rows=rows, next_token=next_token)

    @app.get("/contracts/{digest}")
    async def contract(request: Request, digest: str) -> Response:
        session = signed_in(request)
        detail = await read(views.contract_detail, digest)
        return render("contract.html", session, detail=detail)

    @app.get("/certificates")
    async def certificates(request: Request) -> Response:
        session = signed_in(request)
        asked = policy_update_query(request)
        rows, next_token = await read(
            views.certificates, page_token=request.query_params.get("page", ""), asked_update=asked
        )
        head = await asyncio.to_thread(store.revocations.revocation_head)
        return render(
            "certificates.html",
            session,
            rows=rows,
            next_token=next_token,
            asked_update=asked,
            revocation=views.revocation_status(head, servicer.clock()),
        )

    @app.get("/certificates/{certificate_id}")
    async def certificate(request: Request, certificate_id: str) -> Response:
        session = signed_in(request)
        row, registered = await read(
            views.certificate_detail, certificate_id, asked_update=policy_update_query(request)
        )
        return render("certificate.html", session, row=row, contract=registered)

    @app.get("/certificates/{certificate_id}/revoke")
    async def revoke_form(request: Request, certificate_id: str) -> Response:
        session = signed_in(request, admin=True)
        row, _ = await read(views.certificate_detail, certificate_id)
        return render("revoke.html", session, row=row, error="", reason="")

    @app.post("/certificates/{certificate_id}/revoke")
    async def revoke(request: Request, certificate_id: str) -> Response:
        session = signed_in(request, admin=True)
        form = await read_form(request)
        check_csrf(session, form)
        row, _ = await read(views.certificate_detail, certificate_id)
        reason = form.get("reason", "")
        error = ""
        if form.get("confirm", "") != certificate_id:
            error = "type the certificate id exactly to confirm the revocation"
        elif not reason.strip():
            error = "a reason is required: it is published in the signed revocation list"
        if not error:
            try:
                await servicer.revoke(certificate_id, reason.strip(), CONSOLE_ACTOR)
            except ValidationError as exc:
                error = exc.message
        if error:
            return render("revoke.html", session, 400, row=row, error=error, reason=reason)
        return RedirectResponse(f"/certificates/{quote(certificate_id, safe='')}", status_code=303)

    @app.get("/keys")
    async def keys(request: Request) -> Response:
        session = signed_in(request)
        rows, next_token = await read(
            views.keys, servicer.clock(), page_token=request.query_params.get("page", "")
        )
        return render("keys.html", session, rows=rows, next_token=next_token)

    @app.get("/audit-log")
    async def audit_log(request: Request) -> Response:
        session = signed_in(request, admin=True)
        text = request.query_params.get("before", "")
        if text and not text.isdigit():
            raise ValidationError("before must be an entry id")
        entries = await read(views.audit_log, before=int(text) if text else None)
        return render("audit_log.html", session, entries=entries, page_size=views.LIST_SIZE)

    @app.get("/integrity")
    async def integrity(request: Request) -> Response:
        session = signed_in(request)
        audits, next_token = await read(
            views.integrity_audits, page_token=request.query_params.get("page", "")
        )
        return render("integrity.html", session, audits=audits, next_token=next_token)

    @app.get("/integrity/audits/{audit_id}")
    async def integrity_audit(request: Request, audit_id: str) -> Response:
        session = signed_in(request)
        found = await read(views.integrity_audit, audit_id)
        return render("integrity_audit.html", session, found=found)

    return app
