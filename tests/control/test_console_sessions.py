"""Console sessions: signed ids, expiry, sign-out, caps per role and credential (an admin
session is never ended by another credential's sign-ins, R-H-23, over real HTTP as well), the
sign-in form's token."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.console import ConsoleBrowser, csrf_of
from support.control import ADMIN_TOKEN, CLIENT_TOKEN, start_control, stop_control

from rewardseal_control.console.server import start_console
from rewardseal_control.console.sessions import (
    LOGIN_COOKIE,
    LOGIN_LIFETIME_SECONDS,
    MAX_ADMIN_SESSIONS,
    MAX_SESSIONS_PER_CREDENTIAL,
    SESSION_COOKIE,
    SESSION_LIFETIME_SECONDS,
    SessionStore,
)
from rewardseal_server.sqlstore import sqlite_url


@dataclass
class Ticks:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_signed_cookie_only() -> None:
    store = SessionStore(clock=Ticks())
    session, cookie = store.open("admin", store.credential_digest(ADMIN_TOKEN))
    assert store.find(cookie) == session
    assert session.is_admin
    assert session.session_id in cookie  # the id, never a token; the MAC beside it
    session_id, _, mac = cookie.rpartition(".")
    for forged in (
        session_id,
        f"{session_id}.",
        f"{session_id}.{mac[:-1]}x",
        f"x{cookie}",
        "",
        None,
    ):
        assert store.find(forged) is None
    # Another process's key signs other cookies: a cookie from there is no session here.
    assert SessionStore(clock=Ticks()).find(cookie) is None


def test_a_session_ends_at_its_lifetime_and_on_sign_out() -> None:
    ticks = Ticks()
    store = SessionStore(clock=ticks)
    trainer = store.credential_digest(CLIENT_TOKEN)
    session, cookie = store.open("trainer", trainer)
    assert not session.is_admin
    ticks.now += SESSION_LIFETIME_SECONDS - 1
    assert store.find(cookie) is not None
    ticks.now += 1
    assert store.find(cookie) is None
    again, cookie = store.open("trainer", trainer)
    store.close(again)
    assert store.find(cookie) is None


def test_the_credential_is_kept_as_a_keyed_digest_only() -> None:
    store = SessionStore(clock=Ticks())
    digest = store.credential_digest(ADMIN_TOKEN)
    assert digest == store.credential_digest(ADMIN_TOKEN)
    assert digest != store.credential_digest(CLIENT_TOKEN)
    assert ADMIN_TOKEN not in digest
    # Keyed by the process: another console's digest of the same token is another value.
    assert digest != SessionStore(clock=Ticks()).credential_digest(ADMIN_TOKEN)
    session, _ = store.open("admin", digest)
    assert ADMIN_TOKEN not in repr(session)
    assert digest not in repr(session)


def test_sessions_are_capped_per_role_and_credential_oldest_of_its_own_out() -> None:
    ticks = Ticks()
    store = SessionStore(clock=ticks)
    admin = store.credential_digest(ADMIN_TOKEN)
    trainer = store.credential_digest(CLIENT_TOKEN)
    other_trainer = store.credential_digest("another-trainer-token-" + "t" * 20)
    admins = [store.open("admin", admin)[1] for _ in range(MAX_ADMIN_SESSIONS)]
    spare = store.open("trainer", other_trainer)[1]
    trainers = [store.open("trainer", trainer)[1] for _ in range(MAX_SESSIONS_PER_CREDENTIAL)]
    assert all(store.find(cookie) is not None for cookie in [*admins, *trainers, spare])
    # One more trainer sign-in ends the oldest trainer session of that credential only.
    newest = store.open("trainer", trainer)[1]
    assert store.find(trainers[0]) is None
    assert all(store.find(c) is not None for c in [*trainers[1:], newest, spare, *admins])
    # One more admin sign-in ends the oldest admin session, nothing else.
    store.open("admin", admin)
    assert store.find(admins[0]) is None
    assert all(store.find(c) is not None for c in [*admins[1:], *trainers[1:], spare])
    # The same credential under another role is another cap (the role is part of the key).
    assert store.open("trainer", admin)[0].role == "trainer"
    assert all(store.find(c) is not None for c in admins[1:])


def test_the_sign_in_form_token_is_bound_to_its_cookie_and_expires() -> None:
    ticks = Ticks()
    store = SessionStore(clock=ticks)
    cookie, csrf = store.login_form()
    other_cookie, other_csrf = store.login_form()
    assert store.login_form_ok(cookie, csrf)
    assert not store.login_form_ok(cookie, other_csrf)
    assert not store.login_form_ok(other_cookie, csrf)
    assert not store.login_form_ok(None, csrf)
    assert not store.login_form_ok(cookie, "")
    ticks.now += LOGIN_LIFETIME_SECONDS + 1
    assert not store.login_form_ok(cookie, csrf)


async def test_trainer_sign_ins_never_evict_an_admin_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Finding 5 of issue 24 over real HTTP: the admin signs in, then the trainer token signs in
    1,030 times (past the old table-wide limit of 1,024); the admin's session still works and
    may still open an admin-only page, and the trainer's earliest sessions are the ones ended."""
    stack = await start_control(sqlite_url(tmp_path_factory.mktemp("caps") / "control.sqlite"))
    server = await start_console(stack.plane, tokens=stack.tokens, host="127.0.0.1", port=0)
    admin = ConsoleBrowser(server.url)
    try:
        assert (await admin.sign_in(ADMIN_TOKEN)).status_code == 303
        assert (await admin.get("/audit-log")).status_code == 200
        trainer = ConsoleBrowser(server.url)
        try:
            form = await trainer.get("/login")
            login = trainer.cookies[LOGIN_COOKIE]
            fields = {"csrf_token": csrf_of(form), "token": CLIENT_TOKEN}
            sessions: list[str] = []
            for _ in range(1030):
                # One sign-in form serves every attempt (it is not single-use, only expiring).
                trainer.cookies = {LOGIN_COOKIE: login}
                answer = await trainer.post("/login", fields)
                assert answer.status_code == 303, answer.text
                sessions.append(trainer.cookies[SESSION_COOKIE])
            trainer.cookies = {SESSION_COOKIE: sessions[0]}
            first = await trainer.get("/contracts")
            trainer.cookies = {SESSION_COOKIE: sessions[-1]}
            last = await trainer.get("/contracts")
        finally:
            await trainer.close()
        assert first.status_code == 303, "the trainer's own oldest session is the one ended"
        assert last.status_code == 200
        still = await admin.get("/audit-log")
        assert still.status_code == 200, "the admin is still signed in"
        assert "Sign out" in still.text
    finally:
        await admin.close()
        await server.stop()
        await stop_control(stack)
