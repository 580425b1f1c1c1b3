"""A limit on failed console sign-ins, counted per client and per credential tried (R-H-22).

The sign-in form takes a bearer token, and without a limit a client could try tokens as fast as
the console answers. Each refused sign-in is recorded under two keys: the *client* (the socket
peer, never an address a header claims: :mod:`rewardseal_control.console.peers`; an IPv6 client
counts as its /64) and the *credential tried* (a keyed digest of the token: the token itself is
never kept, nor logged).

* Per client: after :data:`MAX_FAILURES` refused sign-ins with *different* credentials within
  :data:`WINDOW_SECONDS`, the client is held (429, with ``Retry-After``) until its oldest failure
  leaves the window: every attempt, a right token included, for as long as it lasts (a guess
  that happens to be right must not get through either). The same wrong token sent again by the
  same client (a stale token in a script, a double submit) is refused but not counted again: it
  tells a guesser nothing, and counting it would let one misconfigured process lock out every
  operator who shares its address (on loopback, all of them).
* Across clients: after :data:`GLOBAL_MAX_FAILURES` counted failures within the window (a guesser
  spread over many addresses), every client with a failure of its own in the window is held
  too; a client without one still signs in. So neither one noisy client nor many can lock out
  an operator who has not failed.
* Never per credential: a hold keyed on the admin credential would let anyone who can reach the
  form lock the operators out of it.

A successful sign-in does not wipe a count: one address may be shared (a NAT, a proxy) by the
guesser and an operator who knows the token. The counts live in this process's memory, as the
sessions do (a restart forgets them), and are bounded: at most :data:`MAX_CLIENTS` clients are
tracked (the one whose last failure is oldest is forgotten first), each with at most
:data:`MAX_FAILURES` digests.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

__all__ = [
    "GLOBAL_MAX_FAILURES",
    "MAX_CLIENTS",
    "MAX_FAILURES",
    "WINDOW_SECONDS",
    "SignInThrottle",
]

MAX_FAILURES: Final = 10
"""Refused sign-ins (distinct credentials) one client may make within :data:`WINDOW_SECONDS`."""
GLOBAL_MAX_FAILURES: Final = 100
"""Refused sign-ins of all clients together within the window before any client that has failed
is held."""
WINDOW_SECONDS: Final = 300.0
"""The sliding window the failures are counted in."""
MAX_CLIENTS: Final = 4096
"""Clients tracked at once (memory stays bounded whatever the number of addresses)."""


class SignInThrottle:
    """Failed sign-ins per client and credential in a sliding window (see the module
    docstring)."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        global_max_failures: int = GLOBAL_MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(max_failures, global_max_failures, max_clients) < 1 or window_seconds <= 0:
            raise ValueError(
                "max_failures, global_max_failures, window_seconds and max_clients must be positive"
            )
        self._max_failures = max_failures
        self._window = window_seconds
        self._max_clients = max_clients
        self._clock = clock
        # Client -> (time, credential digest) of its counted failures in the window, oldest
        # first; the client whose last failure is oldest comes first (moved to the end on each).
        self._failures: OrderedDict[str, deque[tuple[float, str]]] = OrderedDict()
        # Times of every counted failure in the window, oldest first (all clients together).
        self._all: deque[float] = deque(maxlen=global_max_failures)

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may try again, or None when it may try now."""
        now = self._clock()
        failures = self._recent(client, now)
        if failures is None:
            return None
        if len(failures) >= self._max_failures:
            return self._seconds_until(failures[0][0], now)
        while self._all and self._all[0] <= now - self._window:
            self._all.popleft()
        if self._all.maxlen is not None and len(self._all) >= self._all.maxlen:
            # Held until either its own failures or enough of everyone's leave the window.
            return self._seconds_until(min(failures[0][0], self._all[0]), now)
        return None

    def failed(self, client: str, credential: str) -> None:
        """Count a refused sign-in from ``client`` with ``credential`` (a digest of the token
        tried, never the token), unless that client tried that credential in the window."""
        now = self._clock()
        failures = self._recent(client, now)
        if failures is None:
            failures = deque(maxlen=self._max_failures)
            self._failures[client] = failures
        elif any(tried == credential for _, tried in failures):
            return
        failures.append((now, credential))
        self._all.append(now)
        self._failures.move_to_end(client)
        while len(self._failures) > self._max_clients:
            self._failures.popitem(last=False)

    def _seconds_until(self, oldest: float, now: float) -> int:
        return max(1, math.ceil(oldest + self._window - now))

    def _recent(self, client: str, now: float) -> deque[tuple[float, str]] | None:
        """``client``'s failures within the window (older ones dropped); None when none."""
        failures = self._failures.get(client)
        if failures is None:
            return None
        while failures and failures[0][0] <= now - self._window:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return None
        return failures
