"""A limit on failed console sign-ins per client address.

The sign-in form takes a bearer token, and without a limit a client could try tokens as fast as
the console answers. After :data:`MAX_FAILURES` refused sign-ins from one address within
:data:`WINDOW_SECONDS`, that address is refused (429, with ``Retry-After``) until its oldest
failure in the window is older than the window: every attempt, a right token included, for as
long as it lasts (a guess that happens to be right must not get through either). A successful
sign-in does not wipe the count: one address may be shared (a NAT, a proxy) by the guesser and
an operator who knows the token.

The count lives in this process's memory, as the sessions do (a restart forgets it), and is
bounded: at most :data:`MAX_CLIENTS` addresses are tracked, the one whose last failure is oldest
is forgotten first. Behind a reverse proxy every client has the proxy's address, so the limit
then applies to all of them together; limit per client at the proxy as well.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

__all__ = ["MAX_CLIENTS", "MAX_FAILURES", "WINDOW_SECONDS", "SignInThrottle"]

MAX_FAILURES: Final = 10
"""Refused sign-ins one address may make within :data:`WINDOW_SECONDS`."""
WINDOW_SECONDS: Final = 300.0
"""The sliding window the failures are counted in."""
MAX_CLIENTS: Final = 4096
"""Addresses tracked at once (memory stays bounded whatever the number of addresses)."""


class SignInThrottle:
    """Failed sign-ins per client address in a sliding window (see the module docstring)."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures < 1 or window_seconds <= 0 or max_clients < 1:
            raise ValueError("max_failures, window_seconds and max_clients must be positive")
        self._max_failures = max_failures
        self._window = window_seconds
        self._max_clients = max_clients
        self._clock = clock
        # Address -> times of its failures in the window, oldest first; the address whose last
        # failure is oldest comes first (moved to the end on each failure).
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may try again, or None when it may try now."""
        now = self._clock()
        failures = self._recent(client, now)
        if failures is None or len(failures) < self._max_failures:
            return None
        return max(1, math.ceil(failures[0] + self._window - now))

    def failed(self, client: str) -> None:
        """Count a refused sign-in from ``client``."""
        now = self._clock()
        failures = self._recent(client, now)
        if failures is None:
            failures = deque(maxlen=self._max_failures)
            self._failures[client] = failures
        failures.append(now)
        self._failures.move_to_end(client)
        while len(self._failures) > self._max_clients:
            self._failures.popitem(last=False)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        """``client``'s failures within the window (older ones dropped); None when none."""
        failures = self._failures.get(client)
        if failures is None:
            return None
        while failures and failures[0] <= now - self._window:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return None
        return failures
