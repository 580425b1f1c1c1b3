"""The adaptive micro-batcher: batch sizes and batches in flight follow the load, and a lone call
is never held behind a large batch (issue 12). Behaviour only: batches are held open with events,
never timed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from rewardseal.core.errors import InvalidEpisode, RewardSealError, Unavailable
from rewardseal_worker import batching
from rewardseal_worker.batching import CallCount, MicroBatcher

WAIT = 30.0
"""A bound on waits that should end at once (a hang fails the test instead of blocking it)."""


class Recorder:
    """A ``run_batch`` that records its batches and holds batches larger than ``hold_above``
    open until :meth:`release`."""

    def __init__(self, *, hold_above: int | None = None) -> None:
        self.sizes: list[int] = []
        self.hold_above = hold_above
        self.gate = threading.Event()
        self.held = threading.Semaphore(0)
        self._lock = threading.Lock()

    def __call__(self, jobs: Sequence[int]) -> list[int | RewardSealError]:
        with self._lock:
            self.sizes.append(len(jobs))
        if self.hold_above is not None and len(jobs) > self.hold_above:
            self.held.release()
            if not self.gate.wait(WAIT):
                raise RuntimeError("never released")
        return [InvalidEpisode(f"odd {job}") if job % 2 else job * 10 for job in jobs]

    async def wait_held(self, count: int) -> None:
        for _ in range(count):
            acquired = await asyncio.to_thread(self.held.acquire, True, WAIT)
            assert acquired, "the batch never started"

    def release(self) -> None:
        self.gate.set()


async def submit_all(
    batcher: MicroBatcher[int, int], jobs: Sequence[int]
) -> list[asyncio.Task[int]]:
    tasks = [asyncio.create_task(batcher.submit(job)) for job in jobs]
    await asyncio.sleep(0)  # the calls are queued; the batcher dispatches on its next turn
    return tasks


async def test_lone_call_runs_beside_a_held_full_batch() -> None:
    run = Recorder(hold_above=4)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=16, in_flight=2, lone_batch=4, name="t"
    )
    big = await submit_all(batcher, [2 * i for i in range(16)])
    await run.wait_held(1)
    assert run.sizes == [16]
    # The full batch is still running: the lone call does not wait for it.
    assert await asyncio.wait_for(batcher.submit(100), WAIT) == 1000
    assert not any(task.done() for task in big)
    assert run.sizes == [16, 1]
    run.release()
    assert await asyncio.gather(*big) == [20 * i for i in range(16)]


async def test_large_batches_never_take_the_last_slot() -> None:
    run = Recorder(hold_above=4)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=16, in_flight=3, lone_batch=4, name="t"
    )
    big = await submit_all(batcher, [2 * i for i in range(32)])
    await run.wait_held(2)
    assert run.sizes == [16, 16]
    assert batcher.running == 2
    # Both large batches are held: a lone call still starts at once, in the last slot.
    assert await asyncio.wait_for(batcher.submit(100), WAIT) == 1000
    assert run.sizes == [16, 16, 1]
    run.release()
    assert await asyncio.wait_for(asyncio.gather(*big), WAIT) == [20 * i for i in range(32)]
    assert batcher.running == 0


async def test_a_long_queue_waits_for_a_large_slot_and_goes_as_one_batch() -> None:
    run = Recorder(hold_above=4)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=16, in_flight=2, lone_batch=4, name="t"
    )
    big = await submit_all(batcher, [2 * i for i in range(16)])
    await run.wait_held(1)
    # Ten calls are load, not a lone call: the last slot stays free and they queue.
    burst = await submit_all(batcher, [2 * i for i in range(16, 26)])
    await asyncio.sleep(0)
    assert run.sizes == [16]
    assert batcher.running == 1
    run.release()
    assert await asyncio.wait_for(asyncio.gather(*big, *burst), WAIT) == [20 * i for i in range(26)]
    assert run.sizes == [16, 10]


async def test_calls_behind_a_small_batch_wait_and_go_together() -> None:
    """A small batch ends soon: calls behind it form one batch instead of one each."""
    run = Recorder(hold_above=0)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, in_flight=3, lone_batch=4, name="t"
    )
    first = await submit_all(batcher, [0])
    await run.wait_held(1)
    later = [await submit_all(batcher, [2 * i]) for i in range(1, 4)]
    await asyncio.sleep(0)
    assert run.sizes == [1]
    run.hold_above = None
    run.release()
    assert await asyncio.wait_for(asyncio.gather(*first, *(t for [t] in later)), WAIT) == [
        20 * i for i in range(4)
    ]
    assert run.sizes == [1, 3]


async def test_calls_queued_while_slots_are_busy_form_the_next_batch() -> None:
    run = Recorder(hold_above=0)
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, in_flight=1, name="t")
    first = await submit_all(batcher, [0])
    await run.wait_held(1)
    later = await submit_all(batcher, [2 * i for i in range(1, 11)])
    assert run.sizes == [1]  # one slot, busy: the ten calls wait
    run.hold_above = None
    run.release()
    assert await asyncio.gather(*first, *later) == [20 * i for i in range(11)]
    assert run.sizes == [1, 10]


async def test_one_call_under_light_load_runs_alone_at_once() -> None:
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, in_flight=3, name="t")
    for job in (2, 4, 6):
        assert await batcher.submit(job) == job * 10
    assert run.sizes == [1, 1, 1]


@pytest.mark.parametrize("inline_max", [0, 64], ids=["thread", "loop"])
async def test_a_burst_sent_together_is_one_batch(inline_max: int) -> None:
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, in_flight=3, name="t", inline_max=inline_max
    )
    tasks = await submit_all(batcher, [2 * i for i in range(20)])
    assert await asyncio.gather(*tasks) == [20 * i for i in range(20)]
    assert run.sizes == [20]


@pytest.mark.parametrize("inline_max", [0, 64], ids=["thread", "loop"])
async def test_each_call_gets_its_own_error(inline_max: int) -> None:
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, name="t", inline_max=inline_max
    )
    tasks = await submit_all(batcher, [1, 2, 3])
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], InvalidEpisode)
    assert "odd 1" in str(results[0])
    assert results[1] == 20
    assert isinstance(results[2], InvalidEpisode)
    assert "odd 3" in str(results[2])


@pytest.mark.parametrize("inline_max", [0, 64], ids=["thread", "loop"])
async def test_a_failed_batch_fails_its_calls_only_and_the_batcher_goes_on(
    inline_max: int,
) -> None:
    calls = 0

    def flaky(jobs: Sequence[int]) -> list[int | RewardSealError]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("disk gone")
        return list(jobs)

    batcher: MicroBatcher[int, int] = MicroBatcher(
        flaky, max_batch=64, in_flight=2, name="t", inline_max=inline_max
    )
    tasks = await submit_all(batcher, [1, 2, 3])
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results)
    assert await batcher.submit(7) == 7
    assert batcher.running == 0


async def test_cancelled_calls_are_not_run() -> None:
    run = Recorder(hold_above=0)
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, in_flight=1, name="t")
    first = await submit_all(batcher, [0])
    await run.wait_held(1)
    gone = await submit_all(batcher, [2, 4])
    kept = await submit_all(batcher, [6])
    for task in gone:
        task.cancel()
    await asyncio.sleep(0)
    run.hold_above = None
    run.release()
    assert await asyncio.gather(*first, *kept) == [0, 60]
    assert run.sizes == [1, 1]


class Threads:
    """A ``run_batch`` that records the thread each batch ran in."""

    def __init__(self) -> None:
        self.ran_in: list[tuple[int, int]] = []

    def __call__(self, jobs: Sequence[int]) -> list[int | RewardSealError]:
        self.ran_in.append((len(jobs), threading.get_ident()))
        return [job * 10 for job in jobs]


async def test_small_batches_run_on_the_loop_and_large_ones_in_a_thread() -> None:
    run = Threads()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, in_flight=1, name="t", inline_max=3
    )
    for jobs in ([2, 4, 6], [2 * i for i in range(4)], [8]):
        tasks = await submit_all(batcher, jobs)
        assert await asyncio.gather(*tasks) == [10 * job for job in jobs]
    loop_thread = threading.get_ident()
    assert [size for size, _ in run.ran_in] == [3, 4, 1]
    assert [thread == loop_thread for _, thread in run.ran_in] == [True, False, True]


async def test_without_inline_batches_every_batch_runs_in_a_thread() -> None:
    run = Threads()
    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_batch=64, name="t")
    assert await batcher.submit(1) == 10
    assert run.ran_in[0][1] != threading.get_ident()


async def test_under_load_a_call_waits_for_company(monkeypatch: pytest.MonkeyPatch) -> None:
    # "Moments ago" made long, so that a slow test machine still counts as under load.
    monkeypatch.setattr(batching, "LOADED_FOR", WAIT)
    calls = CallCount()
    run = Recorder()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, name="t", inline_max=64, gather_seconds=0.5, calls=calls
    )
    # Another call is in the worker: held in a batch of a second batcher that shares the count.
    other_run = Recorder(hold_above=0)
    other: MicroBatcher[int, int] = MicroBatcher(other_run, max_batch=64, name="o", calls=calls)
    held = await submit_all(other, [0])
    await other_run.wait_held(1)
    # Idle, but not alone: the first call goes at once (no batch ended moments ago).
    assert await asyncio.wait_for(batcher.submit(2), WAIT) == 20
    # A batch just ended and another call is in the worker: the next call waits for company,
    # and a call that arrives turns of the loop later (alone it would have gone already) joins.
    first = await submit_all(batcher, [4])
    for _ in range(5):
        await asyncio.sleep(0)
    assert run.sizes == [1]
    second = await submit_all(batcher, [6])
    assert await asyncio.wait_for(asyncio.gather(*first, *second), WAIT) == [40, 60]
    assert run.sizes == [1, 2]
    other_run.release()
    assert await asyncio.gather(*held) == [0]


async def test_a_lone_caller_never_waits_for_company(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "LOADED_FOR", WAIT)
    run = Recorder()
    # A window far longer than the test's bound: a call that waited in it would time out.
    batcher: MicroBatcher[int, int] = MicroBatcher(
        run, max_batch=64, name="t", inline_max=64, gather_seconds=10 * WAIT
    )
    for job in (2, 4, 6, 8):
        assert await asyncio.wait_for(batcher.submit(job), WAIT) == job * 10
    assert run.sizes == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("active", "steps"), [(0, 1), (15, 1), (16, 2), (47, 3), (64, 4), (999, 4)]
)
def test_the_wait_for_company_grows_with_the_calls_in_the_worker(active: int, steps: int) -> None:
    calls = CallCount()
    calls.active = active
    batcher: MicroBatcher[int, int] = MicroBatcher(
        Recorder(), max_batch=64, name="t", gather_seconds=0.002, calls=calls
    )
    assert batcher._gather_wait() == pytest.approx(0.002 * steps)
    assert (batching.GATHER_STEP, batching.GATHER_STEPS) == (16, 4)


def test_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MicroBatcher(Recorder(), max_batch=0, name="t")
    with pytest.raises(ValueError, match="at least 1"):
        MicroBatcher(Recorder(), max_batch=8, in_flight=0, name="t")
    with pytest.raises(ValueError, match="0 or more"):
        MicroBatcher(Recorder(), max_batch=8, name="t", inline_max=-1)
    with pytest.raises(ValueError, match="0 or more"):
        MicroBatcher(Recorder(), max_batch=8, name="t", gather_seconds=-0.1)
