"""Where the scorer's batches run: how many batch calls at once, which run on the event loop,
how unary calls are grouped. Decided by the serving layer, not by the scoring rules.

The scorer (:mod:`rewardseal_worker.engine`) holds the rules: checks, reads, judging, signing,
the commit. It runs each batch where the :class:`BatchPlan` it was given says, through a
:class:`BatchRunner`. The serving layer (:mod:`rewardseal_worker.app`) chooses the plan from
what it opened, the store's dialect and whether the oracle is local
(:meth:`BatchPlan.for_store`); a scorer given no plan (tests, benches) runs every batch in a
worker thread, which is right for any store. The machinery (the micro-batcher, the placement
of one batch) is :mod:`rewardseal_worker.batching`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal_worker.batching import CallCount, MicroBatcher, run_placed

__all__ = [
    "DEFAULT_BATCH_CALLS",
    "GATHER_SECONDS",
    "INLINE_BATCH",
    "UNARY_IN_FLIGHT",
    "BatchPlan",
    "BatchRunner",
]

_Job = TypeVar("_Job")
_Outcome = TypeVar("_Outcome")

UNARY_IN_FLIGHT = 3
"""Batches of unary calls (scores, begins) that may run at once; see MicroBatcher."""

DEFAULT_BATCH_CALLS = {"sqlite": 1, "postgresql": 2}
"""Batch calls that run at once by store dialect (see :meth:`BatchPlan.for_store`)."""

INLINE_BATCH = 64
"""The largest batch run on the event loop when the store and the oracle are files on this host
(see rewardseal_worker.batching): about 15-20 ms of work on a 2-core machine, the longest a call
waits behind one. Larger batches, and every batch over a network store or oracle, run in a
worker thread."""

GATHER_SECONDS = 0.002
"""How long, under load, a unary call waits for company when batches run on the event loop: a
step of the wait, which grows with the calls in the worker (MicroBatcher._gather_wait)."""


@dataclass(frozen=True)
class BatchPlan:
    """Where one scorer's batches run. The default runs every batch in a worker thread."""

    batch_calls: int = 2
    """Batch calls (BeginEpisodes, ScoreEpisodes, stream runs) that run at once."""
    inline_batch: int = 0
    """The largest batch run on the event loop (0: every batch runs in a worker thread)."""
    max_batch: int = 256
    """The most unary calls one micro-batch takes."""

    def __post_init__(self) -> None:
        if self.inline_batch < 0:
            raise ValidationError("inline_batch must be 0 or more")
        if self.batch_calls < 1 or self.max_batch < 1:
            raise ValidationError("batch_calls and max_batch must be at least 1")

    @classmethod
    def for_store(
        cls,
        dialect: str,
        *,
        local_reader: bool,
        inline_batch: int | None = None,
        batch_calls: int | None = None,
        max_batch: int = 256,
    ) -> BatchPlan:
        """The plan for a store of ``dialect`` and an oracle that is (``local_reader``) or is
        not a file on this host; ``inline_batch`` and ``batch_calls``, when given, override
        the choice (``$REWARDSEAL_WORKER_INLINE_BATCH``)."""
        # Few batch calls in flight on purpose: every batch pays a fixed cost (store round
        # trips, one durable commit), and calls that arrive while one runs form a larger next
        # batch. On SQLite (one writer) a second batch thread only fought the first for the
        # GIL: one at a time cost 13% less CPU per episode for 5% more episodes/s
        # (bench/peer_bench.py batched, paired runs); PostgreSQL overlaps one batch's round
        # trips with another's work, so it keeps two. Unary calls have their own batchers and
        # never wait for these.
        if batch_calls is None:
            batch_calls = DEFAULT_BATCH_CALLS.get(dialect, 2)
        # Small batches run on the event loop where nothing they wait for is across a network
        # (SQLite store, a local-file oracle): cheaper than a worker thread (see
        # rewardseal_worker.batching). Never over a network: a slow database or API would stop
        # every call.
        if inline_batch is None:
            inline_batch = INLINE_BATCH if dialect == "sqlite" and local_reader else 0
        return cls(batch_calls=batch_calls, inline_batch=inline_batch, max_batch=max_batch)


class BatchRunner:
    """Runs one scorer's batches as its :class:`BatchPlan` says: batch calls in their slots,
    unary calls through micro-batchers that share one count of the calls in the worker."""

    def __init__(self, plan: BatchPlan) -> None:
        self.plan = plan
        self._slots = asyncio.Semaphore(plan.batch_calls)
        self._calls = CallCount()

    async def call(
        self, run: Callable[[Sequence[_Job]], list[_Outcome]], jobs: Sequence[_Job]
    ) -> list[_Outcome]:
        """``run(jobs)`` for a batch call: in its slot, on the loop or in a worker thread."""
        async with self._slots:
            return await run_placed(run, jobs, self.plan.inline_batch)

    def unary(
        self,
        run: Callable[[Sequence[_Job]], Sequence[_Outcome | RewardSealError]],
        *,
        name: str,
    ) -> MicroBatcher[_Job, _Outcome]:
        """The micro-batcher that groups unary calls into batches of ``run``: one batch at a
        time under light load; beside a large batch up to :data:`UNARY_IN_FLIGHT`, the last
        slot kept for lone calls, so a lone call never waits for a large batch to finish."""
        inline = self.plan.inline_batch
        return MicroBatcher(
            run,
            max_batch=self.plan.max_batch,
            name=name,
            in_flight=UNARY_IN_FLIGHT,
            inline_max=inline,
            gather_seconds=GATHER_SECONDS if inline else 0.0,
            calls=self._calls,
        )
