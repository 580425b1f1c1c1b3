"""Group concurrent calls into batches that run in a worker thread (group commit).

A durable commit costs an fsync; paying it once per batch instead of once per call is what
lets unary callers share the throughput of the batched path. Calls queue while a batch runs,
and the queue becomes the next batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from rewardseal.errors import RewardSealError, Unavailable

_log = logging.getLogger(__name__)

Job = TypeVar("Job")
Outcome = TypeVar("Outcome")


class MicroBatcher(Generic[Job, Outcome]):
    """Runs ``run_batch`` (blocking) over whatever calls are queued, at most ``slots`` at once."""

    def __init__(
        self,
        run_batch: Callable[[Sequence[Job]], Sequence[Outcome | RewardSealError]],
        *,
        max_batch: int,
        slots: asyncio.Semaphore,
        name: str,
    ) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._slots = slots
        self._name = name
        self._queue: list[tuple[Job, asyncio.Future[Outcome | RewardSealError]]] = []
        self._draining = False
        # The event loop keeps only weak references to tasks: hold them until they finish.
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def submit(self, job: Job) -> Outcome:
        """Queue ``job``; return its outcome or raise its error."""
        future: asyncio.Future[Outcome | RewardSealError] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((job, future))
        if not self._draining:
            self._draining = True
            self._spawn(self._drain())
        outcome = await future
        if isinstance(outcome, RewardSealError):
            raise outcome
        return outcome

    async def _drain(self) -> None:
        try:
            while self._queue:
                await self._slots.acquire()
                # Take the batch only once a slot is free: calls that arrived while we waited
                # join it, which is the whole point.
                items = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                task = self._spawn(self._run(items))
                task.add_done_callback(lambda _: self._slots.release())
                await asyncio.sleep(0)
        finally:
            self._draining = False

    async def _run(
        self, items: list[tuple[Job, asyncio.Future[Outcome | RewardSealError]]]
    ) -> None:
        jobs = [job for job, _ in items]
        try:
            outcomes: Sequence[Outcome | RewardSealError] = await asyncio.to_thread(
                self._run_batch, jobs
            )
        except Exception as exc:
            # The batch failed as a whole (e.g. the store is down): every call gets UNAVAILABLE,
            # and the store's single transaction guarantees nothing partial was kept.
            _log.exception("%s batch failed", self._name)
            error = Unavailable(f"the worker could not complete the {self._name} batch")
            error.__cause__ = exc
            outcomes = [error] * len(items)
        for (_, future), outcome in zip(items, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)
