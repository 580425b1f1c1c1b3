"""Keep ``grpc.health.v1`` truthful: NOT_SERVING while the worker's store does not answer.

A worker without its store cannot begin, score or fetch anything (every such call answers
UNAVAILABLE), so a load balancer or a Kubernetes probe that asks the standard health service
must be told so and route elsewhere; SERVING returns as soon as the store answers again. The
system of record is NOT watched: an unreachable SoR is an outcome (FAILED_PLATFORM), not a
reason to stop taking episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from rewardseal.errors import RewardSealError
from rewardseal_server.serving import RunningServer

__all__ = ["StoreHealthWatch"]

log = logging.getLogger(__name__)


class StoreHealthWatch:
    """Probe the store every ``interval`` seconds and mirror the answer into the health service."""

    def __init__(
        self, probe: Callable[[], None], running: RunningServer, *, interval: float
    ) -> None:
        self._probe = probe
        self._running = running
        self._interval = interval
        self._serving = True
        self._task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        """What the health service reports now."""
        return self._serving

    async def check(self) -> bool:
        """Probe once (in a thread: the probe blocks) and update the health service."""
        try:
            await asyncio.to_thread(self._probe)
            healthy = True
        except (RewardSealError, OSError) as exc:
            healthy = False
            reason = str(exc)
        if healthy != self._serving:
            self._serving = healthy
            await self._running.set_serving(healthy)
            if healthy:
                log.warning("event=store_recovered health=SERVING")
            else:
                log.warning("event=store_unavailable health=NOT_SERVING error=%r", reason)
        return healthy

    def start(self) -> None:
        """Start probing in the background (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="store-health-watch")

    async def stop(self) -> None:
        """Stop probing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check()
