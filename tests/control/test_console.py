"""The operator console against a real control plane and its real console server over real HTTP:
sign-in and sign-out, the pages over seeded data (reward integrity too), escaping, CSRF, and
revocation that needs the admin credential and a confirmation; and ``--http-port`` as
``serve`` wires it.

One control plane serves the whole module (its event loop too: the console runs in it)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from support.builders import make_certificate
from support.console import ConsoleBrowser, csrf_of
from support.control import (
    ADMIN,
    ADMIN_TOKEN,
    CLIENT_TOKEN,
    WORKER_TOKEN,
    ControlStack,
    start_control,
    stop_control,
)
from support.control_store_builders import (
    FAILED,
    WORKER,
    WRONG,
    contract_version,
    key_message,
    opened,
    sealed,
    seeded,
)
from support.integrity import agreeing_rows, audit_to_end, capture, create_system
from support.linked_stack import start_control_plane
from support.tls_certs import TlsWorld

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal_control.console.server import start_console
from rewardseal_control.settings import resolve_settings
from rewardseal_kit.mockmed import mockmed_contract
from rewardseal_server.embedded_http import RunningHttpServer
from rewardseal_server.sqlstore import sqlite_url
from rewardseal_server.tls import ServerTls

pytestmark = pytest.mark.asyncio(loop_scope="module")

HTML_VERSION = '<script>alert("version")</script>'
HTML_KEY_NAME = "<img src=x onerror=alert(1)>"
HTML_REASON = "<b>leaked</b> & <i>gone</i>"
HTML_REVIEW = "<em>reviewed</em> by <u>ops</u>"
TOKENS = (ADMIN_TOKEN, CLIENT_TOKEN, WORKER_TOKEN)


@dataclass
class Seeded:
    app: ControlStack
    url: str
    digest: str
    html_digest: str
    audit_id: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Seeded]:
    stack = await start_control(sqlite_url(tmp_path_factory.mktemp("console") / "control.sqlite"))
    server: RunningHttpServer = await start_console(stack.servicer, host="127.0.0.1", port=0)
    store = stack.store
    digest = seeded(store)
    html_contract = contract_version(7)
    html_contract.contract_version = HTML_VERSION
    html_digest, _ = store.contracts.register_contract(
        html_contract, contract_digest(html_contract)
    )
    store.keys.register_issuer_key(
        key_message(SigningKey.generate(), WORKER, display_name=HTML_KEY_NAME), "admin", "seed"
    )
    contract = mockmed_contract()
    for certificate_id, issued, expiry in (
        ("cert.console.current", 100, 50),
        ("cert.console.expired", 0, 50),
        ("cert.console.future", 500, 50),
        ("cert.console.html", 100, 50),
        ("cert.console.revoke-me", 100, 50),
    ):
        certificate = make_certificate(
            contract,
            certificate_id=certificate_id,
            issued_at_policy_update=issued,
            expiry_policy_updates=expiry,
        )
        store.certificates.record_certificate(certificate, "admin", "seed")
    receipts = [
        sealed("episode.c001", policy_update=100),
        sealed("episode.c002", policy_update=101),
        sealed("episode.c003", policy_update=102, outcome=WRONG),
        sealed("episode.c004", policy_update=110, outcome=FAILED),
        sealed("episode.c005", policy_update=130),
    ]
    assert all(r.recorded for r in store.receipts.record_receipts(opened(*receipts)))
    await stack.servicer.revoke("cert.console.html", HTML_REASON, "admin")
    # Reward integrity: one boundary captured, sealed and audited, then a reviewed decision.
    system_id = await create_system(stack)
    shard = await capture(stack, agreeing_rows(20), system_id=system_id)
    audit = await audit_to_end(stack, shard.shard_id)
    await stack.integrity_stub().ReviewDecision(
        ipb.ReviewDecisionRequest(
            audit_id=audit.audit_id, action=ipb.REVIEW_ACTION_STOP, reason=HTML_REVIEW
        ),
        metadata=ADMIN,
    )
    try:
        yield Seeded(
            app=stack,
            url=server.url,
            digest=digest,
            html_digest=html_digest,
            audit_id=audit.audit_id,
        )
    finally:
        await server.stop()
        await stop_control(stack)


@pytest_asyncio.fixture(loop_scope="module")
async def browser(console: Seeded) -> AsyncIterator[ConsoleBrowser]:
    opened_browser = ConsoleBrowser(console.url)
    try:
        yield opened_browser
    finally:
        await opened_browser.close()


async def signed_in(console: Seeded, token: str) -> ConsoleBrowser:
    signed = ConsoleBrowser(console.url)
    answer = await signed.sign_in(token)
    assert answer.status_code == 303, answer.text
    return signed


def assert_no_secret(text: str) -> None:
    for token in TOKENS:
        assert token not in text


# ------------------------------------------------------------------ sign-in


async def test_pages_need_a_session_and_carry_the_security_headers(browser: ConsoleBrowser) -> None:
    for path in ("/", "/contracts", "/certificates", "/keys", "/audit-log", "/integrity"):
        answer = await browser.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login"
    page = await browser.get("/login")
    csp = page.headers["content-security-policy"]
    assert "script-src" not in csp
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script" not in page.text


async def test_sign_in_sets_a_signed_session_cookie_never_the_token(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        session = [h for h in admin.set_cookie_headers if h.startswith("rewardseal_console=")]
        assert len(session) == 1
        attributes = session[0].lower()
        assert "httponly" in attributes
        assert "secure" in attributes
        assert "samesite=strict" in attributes
        assert_no_secret(session[0])
        page = await admin.get("/contracts")
        assert page.status_code == 200
        assert 'class="role role-admin"' in page.text
        assert_no_secret(page.text)
    finally:
        await admin.close()


@pytest.mark.parametrize(
    "token",
    ["not-a-token-at-all-xxxxxxxxxxxxxxxx", WORKER_TOKEN, ""],
    ids=["wrong", "worker", "empty"],
)
async def test_sign_in_refuses_a_token_that_is_not_a_console_credential(
    browser: ConsoleBrowser, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="rewardseal_control.console.app"):
        answer = await browser.sign_in(token)
    assert "console sign-in refused from 127.0.0.1" in caplog.text
    if token:
        assert token not in caplog.text  # who tried is logged, never what they typed
    assert answer.status_code == 401
    assert "does not sign in" in answer.text
    assert "rewardseal_console" not in browser.cookies
    assert_no_secret(answer.text)


async def test_sign_in_refuses_a_forged_form(browser: ConsoleBrowser) -> None:
    """A page elsewhere posting the sign-in form has neither the pre-login cookie nor its token."""
    answer = await browser.post("/login", {"csrf_token": "forged", "token": ADMIN_TOKEN})
    assert answer.status_code == 403
    assert "rewardseal_console" not in browser.cookies


async def test_a_tampered_session_cookie_is_no_session(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        value = admin.cookies["rewardseal_console"]
        session_id, _, mac = value.rpartition(".")
        admin.cookies["rewardseal_console"] = f"{session_id}x.{mac}"
        assert (await admin.get("/contracts")).status_code == 303
    finally:
        await admin.close()


async def test_sign_out_ends_the_session_and_needs_its_csrf_token(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        page = await admin.get("/contracts")
        kept = dict(admin.cookies)
        assert (await admin.post("/logout", {"csrf_token": "forged"})).status_code == 403
        assert (await admin.get("/contracts")).status_code == 200
        answer = await admin.post("/logout", {"csrf_token": csrf_of(page)})
        assert answer.status_code == 303
        assert "rewardseal_console" not in admin.cookies
        admin.cookies = kept  # the old cookie, replayed: the session is gone on the server
        assert (await admin.get("/contracts")).status_code == 303
    finally:
        await admin.close()


# ------------------------------------------------------------------ pages


async def test_pages_render_the_seeded_state(console: Seeded) -> None:
    trainer = await signed_in(console, CLIENT_TOKEN)
    try:
        contracts = await trainer.get("/contracts")
        assert contracts.status_code == 200
        assert "mockmed" in contracts.text
        assert console.digest in contracts.text

        contract = await trainer.get(f"/contracts/{console.digest}")
        assert contract.status_code == 200
        assert "<strong>5</strong> receipts" in contract.text
        assert "<svg" in contract.text
        assert 'class="outcome-verified"' in contract.text
        assert 'class="outcome-wrong-effect"' in contract.text

        certificates = await trainer.get("/certificates")
        assert 'id="revocation-version"' in certificates.text
        # The revocation list's entries, then the certificates' table.
        listed, _, text = certificates.text.partition('class="hint"')
        assert ">cert.console.html<" in listed
        # States at the newest receipt's update (130): one rule, core's certificate_state.
        for certificate_id, state in (
            ("cert.console.current", "current"),
            ("cert.console.expired", "expired"),
            ("cert.console.future", "not yet valid"),
            ("cert.console.html", "revoked"),
        ):
            row = text[text.index(f">{certificate_id}<") :]
            assert row[: row.index("</tr>")].count(f">{state}<") == 1, certificate_id
        asked = await trainer.get("/certificates?policy_update=520")
        row = asked.text[asked.text.index(">cert.console.future<") :]
        assert ">current<" in row[: row.index("</tr>")]

        keys = await trainer.get("/keys")
        assert "control plane organization key" in keys.text
        assert ">active<" in keys.text
        integrity = await trainer.get("/integrity")
        assert integrity.status_code == 200
        assert console.audit_id in integrity.text
        assert ">stop<" in integrity.text  # the reviewed decision is the one in force
        audit = await trainer.get(f"/integrity/audits/{console.audit_id}")
        assert audit.status_code == 200
        assert ">automatic<" in audit.text
        assert ">reviewed<" in audit.text
        # The run's gate (R-I-10) is shown with the audit: the reviewer's stop, final.
        assert 'Run\'s gate</dt><dd class="run-gate"><strong>stop</strong>' in audit.text
        assert "): final</dd>" in audit.text
        for page in (contracts, contract, certificates, keys, integrity):
            assert "<script" not in page.text
            assert_no_secret(page.text)
        # The audit log is the admin's; the trainer is told so.
        assert (await trainer.get("/audit-log")).status_code == 403
    finally:
        await trainer.close()


async def test_bad_input_gets_a_clear_error_page(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        assert (await admin.get("/certificates/cert.console.missing")).status_code == 404
        assert (await admin.get("/contracts/sha256:nope")).status_code == 400
        assert (await admin.get("/certificates?policy_update=-1")).status_code == 400
        assert (await admin.get("/certificates?page=garbage")).status_code == 400
        assert (await admin.get("/audit-log?before=x")).status_code == 400
        page = await admin.get("/contracts")
        wrong_type = await admin.client.post(
            "/logout",
            content=b"{}",
            headers={**admin._cookie_header(), "content-type": "application/json"},
        )
        assert wrong_type.status_code == 415
        huge = await admin.post("/logout", {"csrf_token": csrf_of(page), "x": "y" * 20_000})
        assert huge.status_code == 413
        assert (await admin.get("/contracts")).status_code == 200  # still signed in, still up
    finally:
        await admin.close()


async def test_every_value_is_escaped(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        contracts = await admin.get("/contracts")
        assert HTML_VERSION not in contracts.text
        assert "&lt;script&gt;alert(&#34;version&#34;)&lt;/script&gt;" in contracts.text
        keys = await admin.get("/keys")
        assert HTML_KEY_NAME not in keys.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in keys.text
        listing = await admin.get("/certificates")  # the revocation list's entries
        assert HTML_REASON not in listing.text
        assert "&lt;b&gt;leaked&lt;/b&gt; &amp; &lt;i&gt;gone&lt;/i&gt;" in listing.text
        certificate = await admin.get("/certificates/cert.console.html")
        assert HTML_REASON not in certificate.text
        assert "&lt;b&gt;leaked&lt;/b&gt; &amp; &lt;i&gt;gone&lt;/i&gt;" in certificate.text
        review = await admin.get(f"/integrity/audits/{console.audit_id}")
        assert HTML_REVIEW not in review.text
        assert "&lt;em&gt;reviewed&lt;/em&gt;" in review.text
        audit = await admin.get("/audit-log")
        assert HTML_REASON not in audit.text
        assert "&lt;b&gt;leaked" in audit.text
        # An id in the path that is HTML comes back as text in the error page.
        bad = await admin.get("/certificates/%3Cscript%3Ex")
        assert bad.status_code == 400
        assert "<script>x" not in bad.text
        assert "&lt;script&gt;x" in bad.text
        unknown = await admin.get("/no/such/%3Cscript%3Epage")
        assert unknown.status_code == 404
        assert "<script>" not in unknown.text
    finally:
        await admin.close()


# ------------------------------------------------------------------ revocation


async def revoked(console: Seeded, certificate_id: str) -> bool:
    return console.app.store.certificates.get_certificate(certificate_id).revoked


async def test_a_forged_revoke_form_is_refused(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        path = "/certificates/cert.console.current/revoke"
        form = {"reason": "forged", "confirm": "cert.console.current"}
        for csrf in ({}, {"csrf_token": "forged"}):
            answer = await admin.post(path, {**form, **csrf})
            assert answer.status_code == 403
            assert "CSRF" in answer.text
        assert not await revoked(console, "cert.console.current")
    finally:
        await admin.close()


async def test_without_the_admin_credential_nothing_is_revoked(
    console: Seeded, browser: ConsoleBrowser
) -> None:
    path = "/certificates/cert.console.current/revoke"
    form = {"reason": "no", "confirm": "cert.console.current"}
    assert (await browser.post(path, form)).status_code == 303  # no session: sign in first
    trainer = await signed_in(console, CLIENT_TOKEN)
    try:
        page = await trainer.get("/certificates/cert.console.current")
        assert 'id="revoke"' not in page.text
        assert (await trainer.get(path)).status_code == 403
        answer = await trainer.post(path, {**form, "csrf_token": csrf_of(page)})
        assert answer.status_code == 403
        assert "admin credential" in answer.text
    finally:
        await trainer.close()
    assert not await revoked(console, "cert.console.current")


async def test_revoking_needs_the_confirmation_and_a_reason(console: Seeded) -> None:
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        path = "/certificates/cert.console.current/revoke"
        csrf = csrf_of(await admin.get(path))
        wrong = await admin.post(path, {"csrf_token": csrf, "reason": "x", "confirm": "cert"})
        assert wrong.status_code == 400
        assert "type the certificate id" in wrong.text
        blank = await admin.post(
            path, {"csrf_token": csrf, "reason": "  ", "confirm": "cert.console.current"}
        )
        assert blank.status_code == 400
        assert "reason is required" in blank.text
        assert not await revoked(console, "cert.console.current")
    finally:
        await admin.close()


async def test_revoking_with_confirmation_publishes_the_next_signed_list(console: Seeded) -> None:
    store = console.app.store
    before = store.revocations.revocation_head()
    assert before is not None
    admin = await signed_in(console, ADMIN_TOKEN)
    try:
        certificate = await admin.get("/certificates/cert.console.revoke-me")
        assert 'id="revoke"' in certificate.text
        form = await admin.get("/certificates/cert.console.revoke-me/revoke")
        answer = await admin.post(
            "/certificates/cert.console.revoke-me/revoke",
            {
                "csrf_token": csrf_of(form),
                "reason": "key material leaked",
                "confirm": "cert.console.revoke-me",
            },
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == "/certificates/cert.console.revoke-me"
        page = await admin.get("/certificates/cert.console.revoke-me")
        assert ">revoked<" in page.text
        assert "key material leaked" in page.text
        head = store.revocations.revocation_head()
        assert head is not None
        assert head.version == before.version + 1
        listing = await admin.get("/certificates")
        assert f'id="revocation-version">{head.version}<' in listing.text
        audit = await admin.get("/audit-log")
        assert "admin:console" in audit.text
        assert "certificate.revoke" in audit.text
    finally:
        await admin.close()
    assert await revoked(console, "cert.console.revoke-me")


async def test_a_contract_revocation_shows_as_one_entry_and_revokes_its_certificates(
    console: Seeded,
) -> None:
    """R-C-13 in the console: the list's entry names the whole contract, and a certificate of
    that contract reads revoked though no entry names it."""
    store = console.app.store
    html_contract = store.contracts.get_contract(console.html_digest).contract
    store.certificates.record_certificate(
        make_certificate(html_contract, certificate_id="cert.console.whole-contract"),
        "admin",
        "seed",
    )
    await console.app.servicer.revoke_scope(
        "contract", console.html_digest, "checker broken", "admin"
    )
    trainer = await signed_in(console, CLIENT_TOKEN)
    try:
        page = await trainer.get("/certificates")
        listed, _, table = page.text.partition('class="hint"')
        assert f"every certificate of contract <code>{console.html_digest}</code>" in listed
        assert "checker broken" in listed
        row = table[table.index(">cert.console.whole-contract<") :]
        assert row[: row.index("</tr>")].count(">revoked<") == 1
        shown = await trainer.get("/certificates/cert.console.whole-contract")
        assert ">revoked<" in shown.text
    finally:
        await trainer.close()


# ------------------------------------------------------------------ serving


async def test_serve_with_an_http_port_serves_the_console_beside_grpc(tmp_path: Path) -> None:
    """``start_control`` as ``serve --http-port 0`` runs it: the banner names the console, which
    answers in the same process and stops with it."""
    app = await start_control_plane(tmp_path, http_port=0)
    try:
        assert app.console is not None
        assert app.banner()["console_url"] == app.console.url
        browser = ConsoleBrowser(app.console.url)
        try:
            assert (await browser.get("/login")).status_code == 200
            assert (await browser.sign_in(ADMIN_TOKEN)).status_code == 401  # another control
        finally:
            await browser.close()
    finally:
        await app.stop()
    off = await start_control_plane(tmp_path, directory="off")
    try:
        assert off.console is None
        assert off.banner()["console_url"] is None
    finally:
        await off.stop()


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
async def test_with_controls_tls_the_console_serves_https(
    console: Seeded, tmp_path: Path, mutual: bool
) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    tls = ServerTls.from_files(
        world.server.cert, world.server.key, world.ca.cert if mutual else None
    )
    server = await start_console(console.app.servicer, host="127.0.0.1", port=0, tls=tls)
    try:
        assert server.url.startswith("https://")
        trusted = ssl.create_default_context(cafile=str(world.ca.cert))
        if mutual:
            async with httpx.AsyncClient(verify=trusted) as stranger:
                with pytest.raises(httpx.HTTPError):  # no client certificate: no handshake
                    await stranger.get(f"{server.url}/login")
            trusted.load_cert_chain(world.client.cert, world.client.key)
        async with httpx.AsyncClient(verify=trusted) as client:
            page = await client.get(f"{server.url}/login")
        assert page.status_code == 200
        assert page.headers["strict-transport-security"] == "max-age=31536000"
    finally:
        await server.stop()


async def test_plain_http_is_refused_off_loopback(console: Seeded) -> None:
    with pytest.raises(ValidationError, match="loopback addresses only"):
        await start_console(console.app.servicer, host="0.0.0.0", port=0)


async def test_the_console_port_comes_from_the_flag_or_the_environment(tmp_path: Path) -> None:
    env = {
        "REWARDSEAL_CONTROL_ADMIN_TOKEN": ADMIN_TOKEN,
        "REWARDSEAL_CONTROL_TOKEN": CLIENT_TOKEN,
        "REWARDSEAL_CONTROL_WORKER_TOKEN": WORKER_TOKEN,
    }
    assert resolve_settings(data_dir=tmp_path, env=env).http_port is None
    configured = {**env, "REWARDSEAL_CONTROL_HTTP_PORT": "8793"}
    assert resolve_settings(data_dir=tmp_path, env=configured).http_port == 8793
    assert resolve_settings(data_dir=tmp_path, env=configured, http_port=0).http_port == 0
    with pytest.raises(ValidationError, match="out of range"):
        resolve_settings(data_dir=tmp_path, env=env, http_port=70000)
