"""Keep ``grpc.health.v1`` and ``GET /health`` truthful: NOT_SERVING while the worker's store or
its system of record does not answer (R-W-16).

A worker without its store cannot begin, score or fetch anything (every such call answers
UNAVAILABLE); a worker without its SoR can only answer FAILED_PLATFORM, an unscored episode a
training run wastes. Either way a load balancer, a Kubernetes probe or a trainer that asks the
standard health service must be told so and send new episodes elsewhere. The watch probes each
dependency every interval (in a thread: the probes block) and reports NOT_SERVING, with the
first failing dependency and its error as the reason, until every probe answers again; then
SERVING. Calls are not refused meanwhile: an episode already begun is still scored, and one
whose SoR read fails is FAILED_PLATFORM, unscored, never 0 (R-W-9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from rewardseal.core.errors import RewardSealError
from rewardseal_server.serving import RunningServer
from rewardseal_worker.oracles.base import OracleUnavailable

__all__ = ["HealthWatch", "Probe"]

log = logging.getLogger(__name__)

Probe = Callable[[], None]
"""A blocking check of one dependency: returns when it answers, raises when it does not."""
_FAILURES = (RewardSealError, OracleUnavailable, OSError)


class HealthWatch:
    """Probe the store and the SoR every ``interval`` seconds and mirror the answer into the
    health service; ``probes`` maps each dependency's name (``store``, ``system of record``)
    to its probe, checked in that order."""

    def __init__(
        self, probes: Mapping[str, Probe], running: RunningServer, *, interval: float
    ) -> None:
        self._probes = dict(probes)
        self._running = running
        self._interval = interval
        self._reason: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        """What the health service reports now."""
        return self._reason is None

    @property
    def reason(self) -> str | None:
        """Why the worker is NOT_SERVING (``the system of record does not answer: ...``); None
        while serving."""
        return self._reason

    async def check(self) -> bool:
        """Probe each dependency once and update the health service; True when all answer."""
        reason = None
        for name, probe in self._probes.items():
            try:
                await asyncio.to_thread(probe)
            except _FAILURES as exc:
                reason = f"the {name} does not answer: {exc}"[:512]
                break
        if reason != self._reason:
            was_serving = self._reason is None
            self._reason = reason
            if reason is None:
                log.warning("event=dependencies_recovered health=SERVING")
            else:
                log.warning("event=dependency_unavailable health=NOT_SERVING reason=%r", reason)
            if was_serving != (reason is None):
                await self._running.set_serving(reason is None)
        return reason is None

    def start(self) -> None:
        """Start probing in the background (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="health-watch")

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
