"""Group concurrent calls into batches (group commit), run in a worker thread or, small and
local, on the event loop (:func:`run_placed`).

A durable commit costs an fsync; paying it once per batch instead of once per call is what
lets unary callers share the throughput of the batched path. Calls queue while batches run,
and the queue becomes the next batch.

The batcher adapts to load so that a lone call is never held behind a large batch, without
cutting the work into many small batches (each pays a transaction and an fsync; on a machine
whose cores are busy, that fixed cost is what throughput and latency are made of):

* **Batches in flight.** A call that finds the batcher idle starts at once. Behind a small
  batch (at most ``lone_batch`` calls: it ends soon) calls wait and go together as the next
  batch. Beside a large batch, up to ``in_flight`` batches run at once: the durable commit of one
  (an fsync, with the GIL released) overlaps the reads, judging and signing of the next.
* **Batch sizes.** A batch takes every queued call up to ``max_batch``, except in the last free
  slot, which is kept for lone calls: it starts a batch only when at most ``lone_batch`` calls
  are queued. Large batches therefore never fill every slot, and a call that arrives while they
  run starts at once beside them. A long queue is load, not a lone call: it waits for a large
  slot and goes as one batch, so a burst (a trainer's rollout sent at once) stays one batch.

Where the store and the oracle are files on this host (SQLite, no network round trip), small
batches run **on the event loop** instead (``inline_max``). A hand-off to a worker thread and
back, and the two threads taking the GIL from each other at every driver and libsodium call,
cost more CPU than a small batch's own work: at 8 unary callers, about a third of the server's
CPU per episode (``bench/peer_bench.py``). Large batches still go to a thread, so a lone call
is never held behind one.

An inline batch stops the loop from taking in calls while it runs; they wait in gRPC's buffers
and arrive in a flood spread over the next few turns of the loop. A batch started at the first
of them would carry one call, and so would the next (one-call batches, each a transaction and a
commit). So, **under load** (a batch ended moments ago and other calls are in the worker), a
call that finds the batcher idle waits for company before its batch starts: ``gather_seconds``,
once more per 16 calls in the worker, up to 4 times (2 ms at 8 callers, 8 ms at 64: the more
callers, the more arrive in the next moments). A lone caller never waits: no other call is in
the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from rewardseal.core.errors import RewardSealError, Unavailable

_log = logging.getLogger(__name__)

Job = TypeVar("Job")
Outcome = TypeVar("Outcome")

DEFAULT_LONE_BATCH = 8
"""The longest queue the last free slot takes (see the module docstring)."""

LOADED_FOR = 0.005
"""Seconds after a batch ends during which the batcher counts as under load (with other calls
in the worker): long enough to span a caller's round trip between two calls on loopback."""

GATHER_STEP = 16
"""Calls in the worker per step of the wait for company (see ``MicroBatcher._gather_wait``)."""

GATHER_STEPS = 4
"""The longest wait for company, in ``gather_seconds``."""


async def run_placed(
    run: Callable[[Sequence[Job]], Outcome], jobs: Sequence[Job], inline_max: int
) -> Outcome:
    """``run(jobs)`` on the event loop when there are at most ``inline_max`` jobs, else in a
    worker thread: where every batch runs, unary micro-batches and batch calls alike (see the
    module docstring)."""
    if len(jobs) <= inline_max:
        return run(jobs)
    return await asyncio.to_thread(run, jobs)


class CallCount:
    """Calls queued in, or being answered by, a worker's batchers; shared by those batchers so
    that each can tell a lone caller from load (see the module docstring)."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = 0


class MicroBatcher(Generic[Job, Outcome]):
    """Runs ``run_batch`` (blocking) over whatever calls are queued: in a worker thread, or on
    the event loop for batches of at most ``inline_max`` calls (0: never).

    At most ``in_flight`` batches run at once, more than one only beside a large batch (more
    than ``lone_batch`` calls), and the last free slot only for lone calls (a queue of at most
    ``lone_batch``). Under load a call waits for company: ``gather_seconds`` (0: never), longer
    with more calls in ``calls``, the count shared with the worker's other batchers. All state
    is touched on the event loop only.
    """

    def __init__(
        self,
        run_batch: Callable[[Sequence[Job]], Sequence[Outcome | RewardSealError]],
        *,
        max_batch: int,
        name: str,
        in_flight: int = 1,
        lone_batch: int = DEFAULT_LONE_BATCH,
        inline_max: int = 0,
        gather_seconds: float = 0.0,
        calls: CallCount | None = None,
    ) -> None:
        if max_batch < 1 or in_flight < 1 or lone_batch < 1:
            raise ValueError("max_batch, in_flight and lone_batch must be at least 1")
        if inline_max < 0 or gather_seconds < 0:
            raise ValueError("inline_max and gather_seconds must be 0 or more")
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._lone_batch = min(lone_batch, max_batch)
        self._name = name
        self._inline_max = inline_max
        self._gather_seconds = gather_seconds
        self._calls = calls if calls is not None else CallCount()
        self._last_end = float("-inf")
        self._queue: list[tuple[Job, asyncio.Future[Outcome | RewardSealError]]] = []
        self._running = 0
        self._large_running = 0
        self._dispatch_scheduled = False
        # The event loop keeps only weak references to tasks: hold them until they finish.
        self._tasks: set[asyncio.Task[None]] = set()
        self.on_batch: Callable[[str, int], None] | None = None
        """Told ``(name, size)`` as each batch starts (the metrics' batch-size histogram)."""

    @property
    def running(self) -> int:
        """How many batches are in flight now."""
        return self._running

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def submit(self, job: Job) -> Outcome:
        """Queue ``job``; return its outcome or raise its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome | RewardSealError] = loop.create_future()
        self._queue.append((job, future))
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            if self._gather_seconds and self._loaded(loop.time()):
                loop.call_later(self._gather_wait(), self._dispatch)
            else:
                # Dispatch on the next turn of the loop: calls that arrive in this one (a burst
                # a client sent together) join the same batch.
                loop.call_soon(self._dispatch)
        self._calls.active += 1
        try:
            outcome = await future
        finally:
            self._calls.active -= 1
        if isinstance(outcome, RewardSealError):
            raise outcome
        return outcome

    def _gather_wait(self) -> float:
        """``gather_seconds`` per :data:`GATHER_STEP` calls in the worker, at most
        :data:`GATHER_STEPS` times: the more callers, the more arrive in the next moments and
        the longer a batch may wait for them (each call's share of the wait stays small)."""
        steps = min(GATHER_STEPS, 1 + self._calls.active // GATHER_STEP)
        return self._gather_seconds * steps

    def _loaded(self, now: float) -> bool:
        """Under load: a batch ended moments ago and other calls are in the worker."""
        return now - self._last_end < LOADED_FOR and self._calls.active > 0

    def batch_size(self) -> int:
        """How many queued calls the next batch may take, given the batches in flight."""
        free = self._in_flight - self._running
        if free <= 0:
            return 0
        if self._running and not self._large_running:
            return 0  # behind small batches only: they end soon, wait and go together
        if free == 1 and self._in_flight > 1:
            # The last slot: for lone calls only; a longer queue waits for a large slot.
            return len(self._queue) if len(self._queue) <= self._lone_batch else 0
        return self._max_batch

    def _dispatch(self) -> None:
        """Start batches from the queue while slots are free."""
        self._dispatch_scheduled = False
        # Calls whose caller went away (cancelled) are not worth a place in a batch.
        self._queue = [(job, future) for job, future in self._queue if not future.done()]
        while self._queue:
            size = self.batch_size()
            if size == 0:
                return  # the next batch to finish dispatches again
            items = self._queue[:size]
            del self._queue[:size]
            self._running += 1
            self._large_running += len(items) > self._lone_batch
            if self.on_batch is not None:
                self.on_batch(self._name, len(items))
            self._spawn(self._run(items))

    async def _run(
        self, items: list[tuple[Job, asyncio.Future[Outcome | RewardSealError]]]
    ) -> None:
        jobs = [job for job, _ in items]
        try:
            outcomes = await run_placed(self._run_batch, jobs, self._inline_max)
        except Exception as exc:
            # The batch failed as a whole (e.g. the store is down): every call gets UNAVAILABLE,
            # and the store's single transaction guarantees nothing partial was kept.
            _log.exception("%s batch failed", self._name)
            error = Unavailable(f"the worker could not complete the {self._name} batch")
            error.__cause__ = exc
            outcomes = [error] * len(items)
        finally:
            self._running -= 1
            self._large_running -= len(items) > self._lone_batch
            self._last_end = asyncio.get_running_loop().time()
            # Calls that queued while this batch ran form the next one.
            self._dispatch()
        for (_, future), outcome in zip(items, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)
