"""The console's limit on failed sign-ins per client and credential tried (R-H-22): the sliding
window on a hand-moved clock, then over real HTTP against a real console on a real control plane
served by the real embedded uvicorn, where the eleventh attempt within five minutes is 429 with
Retry-After, a right token included, and logged with the socket peer's address whatever
``X-Forwarded-For`` claims (R-H-20, R-H-21; issue 24, finding 5)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from support.console import ConsoleBrowser, csrf_of
from support.control import ADMIN_TOKEN, ControlStack, start_control, stop_control

from rewardseal_control.console.app import create_console_app
from rewardseal_control.console.peers import parse_trusted_proxies
from rewardseal_control.console.server import start_console
from rewardseal_control.console.throttle import (
    GLOBAL_MAX_FAILURES,
    MAX_FAILURES,
    WINDOW_SECONDS,
    SignInThrottle,
)
from rewardseal_server.embedded_http import start_http_server
from rewardseal_server.sqlstore import sqlite_url

WRONG = "not-a-console-token-" + "x" * 20


def guess(number: int) -> str:
    """The ``number``-th distinct wrong token (each one a new guess)."""
    return f"guess-{number:04d}-" + "x" * 20


@dataclass
class Ticks:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- the window


def test_an_address_is_held_after_ten_failures_until_the_oldest_leaves_the_window() -> None:
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    for number in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.1", guess(number))
        clock.now += 1
    assert throttle.retry_after("10.0.0.1") is None  # nine: still allowed
    throttle.failed("10.0.0.1", guess(9))  # the tenth, at 1009
    # Held until the first failure (at 1000) is a whole window old.
    assert throttle.retry_after("10.0.0.1") == int(WINDOW_SECONDS) - 9
    assert throttle.retry_after("10.0.0.2") is None, "another address is not held"
    clock.now = 1000 + WINDOW_SECONDS - 0.5
    assert throttle.retry_after("10.0.0.1") == 1  # never 0 while held
    clock.now = 1000 + WINDOW_SECONDS
    assert throttle.retry_after("10.0.0.1") is None  # the oldest left: nine in the window
    throttle.failed("10.0.0.1", guess(10))
    assert throttle.retry_after("10.0.0.1") == 1  # the next oldest (1001) leaves in 1 s
    clock.now += WINDOW_SECONDS
    assert throttle.retry_after("10.0.0.1") is None


def test_failures_spread_wider_than_the_window_never_hold() -> None:
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    for number in range(5 * MAX_FAILURES):
        throttle.failed("10.0.0.1", guess(number))
        assert throttle.retry_after("10.0.0.1") is None
        # Just over a ninth of the window apart: never ten within one window.
        clock.now += WINDOW_SECONDS / (MAX_FAILURES - 1) + 0.001


def test_the_table_is_bounded_and_forgets_the_stalest_address() -> None:
    clock = Ticks()
    throttle = SignInThrottle(max_failures=2, max_clients=3, clock=clock)
    for address in ("a", "b", "c"):
        throttle.failed(address, guess(1))
        throttle.failed(address, guess(2))
        clock.now += 1
    assert [throttle.retry_after(a) is not None for a in "abc"] == [True, True, True]
    throttle.failed("a", guess(3))  # a is now the freshest; b the stalest
    throttle.failed("d", guess(1))
    assert throttle.retry_after("b") is None, "the stalest address is forgotten"
    assert throttle.retry_after("a") is not None
    assert throttle.retry_after("c") is not None
    with pytest.raises(ValueError, match="positive"):
        SignInThrottle(max_failures=0)
    with pytest.raises(ValueError, match="positive"):
        SignInThrottle(global_max_failures=0)


def test_the_same_wrong_token_again_is_not_a_new_guess() -> None:
    """A script retrying a stale token from the operators' own address (on loopback, every
    local client's) is refused every time but never locks that address out."""
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    for _ in range(10 * MAX_FAILURES):
        throttle.failed("127.0.0.1", WRONG)
        clock.now += 1
    assert throttle.retry_after("127.0.0.1") is None
    # Distinct guesses are counted, the stale one among them once.
    for number in range(MAX_FAILURES - 1):
        throttle.failed("127.0.0.1", guess(number))
    assert throttle.retry_after("127.0.0.1") is not None


def test_guesses_spread_over_many_clients_hold_those_that_failed_not_the_others() -> None:
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    guessers = [f"198.51.100.{n % 250}/{n // 250}" for n in range(GLOBAL_MAX_FAILURES)]
    for number, client in enumerate(guessers[:-1]):
        throttle.failed(client, guess(number))
    assert throttle.retry_after(guessers[0]) is None, "one failure each: under both limits"
    clock.now += 10
    throttle.failed(guessers[-1], guess(GLOBAL_MAX_FAILURES))
    # The hundredth failure of all clients together: every client that failed is held ...
    assert throttle.retry_after(guessers[0]) == int(WINDOW_SECONDS) - 10
    assert throttle.retry_after(guessers[-1]) == int(WINDOW_SECONDS) - 10
    # ... and a client without a failure of its own is not: no lock-out of everyone.
    assert throttle.retry_after("192.0.2.10") is None
    clock.now += WINDOW_SECONDS - 10
    assert throttle.retry_after(guessers[-1]) is None, "the oldest failures left the window"


# ---------------------------------------------------------------------- over HTTP


@dataclass
class Console:
    url: str
    clock: Ticks


@pytest_asyncio.fixture(loop_scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Console]:
    stack: ControlStack = await start_control(
        sqlite_url(tmp_path_factory.mktemp("throttle") / "control.sqlite")
    )
    clock = Ticks()
    app = create_console_app(stack.plane, tokens=stack.tokens, throttle=SignInThrottle(clock=clock))
    server = await start_http_server(app, host="127.0.0.1", port=0, name="console")
    try:
        yield Console(server.url, clock)
    finally:
        await server.stop()
        await stop_control(stack)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_eleventh_attempt_is_429_with_retry_after_even_with_the_right_token(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    browser = ConsoleBrowser(console.url)
    try:
        for number in range(MAX_FAILURES):
            assert (await browser.sign_in(guess(number))).status_code == 401
            console.clock.now += 1
        with caplog.at_level(logging.INFO, logger="rewardseal_control.console.app"):
            held = await browser.sign_in(ADMIN_TOKEN)
        assert held.status_code == 429
        assert held.headers["retry-after"] == str(int(WINDOW_SECONDS) - MAX_FAILURES)
        assert "too many failed sign-ins" in held.text
        assert "rewardseal_console" not in browser.cookies, "no session while held"
        assert "console sign-in throttled from 127.0.0.1 (retry after" in caplog.text
        assert ADMIN_TOKEN not in caplog.text
        # The form still renders (a fresh sign-in form for later), and the page has no secret.
        assert held.headers["content-type"].startswith("text/html")
        assert ADMIN_TOKEN not in held.text
        # Once the window has passed, the right token signs in.
        console.clock.now += WINDOW_SECONDS
        signed = await browser.sign_in(ADMIN_TOKEN)
        assert signed.status_code == 303, signed.text
        assert "rewardseal_console" in browser.cookies
    finally:
        await browser.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_forwarded_for_header_does_not_move_the_throttle(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 5 of issue 24: each guess claims another client in ``X-Forwarded-For``; every one
    is counted against the socket peer, the right admin token is refused once the limit is
    reached, and the log names 127.0.0.1, never an address a client wrote."""
    console.clock.now += 10 * WINDOW_SECONDS  # whatever an earlier test left has expired
    claimed = [f"203.0.113.{n}" for n in range(1, MAX_FAILURES + 2)]
    browser = ConsoleBrowser(console.url)
    try:
        with caplog.at_level(logging.INFO, logger="rewardseal_control.console.app"):
            for number, address in enumerate(claimed[:-1]):
                form = await browser.get("/login")
                answer = await browser.post(
                    "/login",
                    {"csrf_token": csrf_of(form), "token": guess(100 + number)},
                    headers={"x-forwarded-for": address, "x-real-ip": address},
                )
                assert answer.status_code == 401, answer.text
            form = await browser.get("/login")
            held = await browser.post(
                "/login",
                {"csrf_token": csrf_of(form), "token": ADMIN_TOKEN},
                headers={"x-forwarded-for": f"{claimed[-1]}, 198.51.100.1"},
            )
        assert held.status_code == 429, "the admin token signed in while throttled"
        assert "rewardseal_console" not in browser.cookies
        refused = [r for r in caplog.records if "console sign-in refused" in r.getMessage()]
        assert [r.getMessage() for r in refused] == [
            "console sign-in refused from 127.0.0.1"
        ] * MAX_FAILURES
        assert "console sign-in throttled from 127.0.0.1 (retry after" in caplog.text
        assert not [a for a in claimed if a in caplog.text], "the log names a made-up address"
        assert ADMIN_TOKEN not in caplog.text
    finally:
        await browser.close()


async def test_a_trusted_proxy_names_the_client_and_nobody_else_does(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``--console-trusted-proxy 127.0.0.1`` the console reads the client from that
    proxy's ``X-Forwarded-For`` (its rightmost untrusted hop): one forwarded client is held,
    another one behind the same proxy still signs in, and the log names both hops."""
    stack = await start_control(sqlite_url(tmp_path_factory.mktemp("proxy") / "control.sqlite"))
    proxies = parse_trusted_proxies(["127.0.0.1", "10.0.0.0/8"], source="test")
    server = await start_console(
        stack.plane, tokens=stack.tokens, host="127.0.0.1", port=0, trusted_proxies=proxies
    )
    browser = ConsoleBrowser(server.url)

    async def sign_in(token: str, forwarded_for: str) -> int:
        form = await browser.get("/login")
        answer = await browser.post(
            "/login",
            {"csrf_token": csrf_of(form), "token": token},
            headers={"x-forwarded-for": forwarded_for},
        )
        return int(answer.status_code)

    try:
        with caplog.at_level(logging.INFO, logger="rewardseal_control.console.app"):
            for number in range(MAX_FAILURES):
                # The client wrote the first hop; the proxies appended the others.
                assert (
                    await sign_in(guess(number), f"192.0.2.{number}, 203.0.113.7, 10.1.2.3") == 401
                )
            assert await sign_in(ADMIN_TOKEN, "203.0.113.7, 10.1.2.3") == 429
            assert await sign_in(ADMIN_TOKEN, "203.0.113.8") == 303
        assert "console sign-in refused from 203.0.113.7 via 127.0.0.1" in caplog.text
        assert "console sign-in: admin credential from 203.0.113.8 via 127.0.0.1" in caplog.text
        assert "192.0.2." not in caplog.text, "a hop the client wrote is never believed"
    finally:
        await browser.close()
        await server.stop()
        await stop_control(stack)
