"""The console's limit on failed sign-ins per client address: the sliding window on a hand-moved
clock, then over real HTTP against a real console on a real control plane, where the eleventh
attempt within five minutes is 429 with Retry-After, a right token included, and logged."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from support.console import ConsoleBrowser
from support.control import ADMIN_TOKEN, ControlStack, start_control, stop_control

from rewardseal_control.console.app import create_console_app
from rewardseal_control.console.throttle import MAX_FAILURES, WINDOW_SECONDS, SignInThrottle
from rewardseal_server.embedded_http import start_http_server
from rewardseal_server.sqlstore import sqlite_url

WRONG = "not-a-console-token-" + "x" * 20


@dataclass
class Ticks:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- the window


def test_an_address_is_held_after_ten_failures_until_the_oldest_leaves_the_window() -> None:
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    for _ in range(MAX_FAILURES - 1):
        throttle.failed("10.0.0.1")
        clock.now += 1
    assert throttle.retry_after("10.0.0.1") is None  # nine: still allowed
    throttle.failed("10.0.0.1")  # the tenth, at 1009
    # Held until the first failure (at 1000) is a whole window old.
    assert throttle.retry_after("10.0.0.1") == int(WINDOW_SECONDS) - 9
    assert throttle.retry_after("10.0.0.2") is None, "another address is not held"
    clock.now = 1000 + WINDOW_SECONDS - 0.5
    assert throttle.retry_after("10.0.0.1") == 1  # never 0 while held
    clock.now = 1000 + WINDOW_SECONDS
    assert throttle.retry_after("10.0.0.1") is None  # the oldest left: nine in the window
    throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 1  # the next oldest (1001) leaves in 1 s
    clock.now += WINDOW_SECONDS
    assert throttle.retry_after("10.0.0.1") is None


def test_failures_spread_wider_than_the_window_never_hold() -> None:
    clock = Ticks()
    throttle = SignInThrottle(clock=clock)
    for _ in range(5 * MAX_FAILURES):
        throttle.failed("10.0.0.1")
        assert throttle.retry_after("10.0.0.1") is None
        # Just over a ninth of the window apart: never ten within one window.
        clock.now += WINDOW_SECONDS / (MAX_FAILURES - 1) + 0.001


def test_the_table_is_bounded_and_forgets_the_stalest_address() -> None:
    clock = Ticks()
    throttle = SignInThrottle(max_failures=2, max_clients=3, clock=clock)
    for address in ("a", "b", "c"):
        throttle.failed(address)
        throttle.failed(address)
        clock.now += 1
    assert [throttle.retry_after(a) is not None for a in "abc"] == [True, True, True]
    throttle.failed("a")  # a is now the freshest; b the stalest
    throttle.failed("d")
    assert throttle.retry_after("b") is None, "the stalest address is forgotten"
    assert throttle.retry_after("a") is not None
    assert throttle.retry_after("c") is not None
    with pytest.raises(ValueError, match="positive"):
        SignInThrottle(max_failures=0)


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
    app = create_console_app(stack.servicer, throttle=SignInThrottle(clock=clock))
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
        for _ in range(MAX_FAILURES):
            assert (await browser.sign_in(WRONG)).status_code == 401
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
