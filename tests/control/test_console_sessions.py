"""Console sessions: signed ids, expiry, sign-out, a bounded table, the sign-in form's token."""

from __future__ import annotations

from dataclasses import dataclass

from rewardseal_control.console.sessions import (
    LOGIN_LIFETIME_SECONDS,
    MAX_SESSIONS,
    SESSION_LIFETIME_SECONDS,
    SessionStore,
)


@dataclass
class Ticks:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_signed_cookie_only() -> None:
    store = SessionStore(clock=Ticks())
    session, cookie = store.open("admin")
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
    session, cookie = store.open("trainer")
    assert not session.is_admin
    ticks.now += SESSION_LIFETIME_SECONDS - 1
    assert store.find(cookie) is not None
    ticks.now += 1
    assert store.find(cookie) is None
    again, cookie = store.open("trainer")
    store.close(again)
    assert store.find(cookie) is None


def test_the_session_table_is_bounded_oldest_out() -> None:
    ticks = Ticks()
    store = SessionStore(clock=ticks)
    _, first = store.open("admin")
    ticks.now += 1
    cookies = [store.open("trainer")[1] for _ in range(MAX_SESSIONS)]
    assert store.find(first) is None
    assert all(store.find(cookie) is not None for cookie in cookies)


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
