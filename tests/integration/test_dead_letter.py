"""A receipt control refuses for good leaves the outbox for the dead letter (R-C-12), against a
real control plane and real workers on port 0.

Issue 24, hole 2: a sentinel worker scoring the optimizer's episode id saw its receipts refused
``duplicate_episode`` and retried forever. Now the refusal moves the receipt to the dead letter
once, with one log line and a metric, and it is not sent again; a retryable refusal stays in the
outbox. ``rewardseal-worker outbox dead-letter list|retry`` shows and retries them, and a fixed
control then records the retried receipt.

Where control itself gives no such refusal today (a retryable per-item one, a refusal an
operator can fix), :class:`RefusingIndex` makes control's real receipt index answer it for
chosen episodes: every other receipt goes through the real index, and the refusal travels the
real wire path (``to_episode_error``, RecordReceipts, the worker's client).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.linked_stack import (
    control_receipts,
    eventually,
    link_of,
    score_honest,
    start_control_plane,
    start_linked_worker,
)
from support.metrics_scrape import scrape, value
from support.worker_stack import RunningStack, stop_stack
from support.worker_store import outbox_size

from rewardseal.core.errors import RewardSealError
from rewardseal.core.receipts import OpenedReceipt
from rewardseal_control.app import ControlApp
from rewardseal_control.store.receipts import RecordResult
from rewardseal_worker.cli import main as worker_main

LINK_LOGGER = "rewardseal_worker.control_link"
W = "rewardseal_worker_"


def refusal(reason: str, code: grpc.StatusCode, message: str) -> RewardSealError:
    """A per-item refusal as control would build it for ``reason`` under ``code``."""
    error = RewardSealError(message, reason=reason)
    error.code = code
    return error


class RefusingIndex:
    """Wraps control's real receipt index: counts the receipt ids every RecordReceipts call
    carries (after control verified them) and answers the episodes in :attr:`refuse` with the
    given refusal instead of storing them; everything else is recorded by the real index."""

    def __init__(self, control: ControlApp) -> None:
        self._index = control.store.receipts
        self._record = self._index.record_receipts
        self.seen: Counter[str] = Counter()
        self.refuse: dict[str, RewardSealError] = {}
        # An instance attribute: the servicer looks the method up at every call.
        self._index.record_receipts = self._record_receipts  # type: ignore[method-assign]

    def _record_receipts(
        self, receipts: Sequence[OpenedReceipt], *args: Any, **kwargs: Any
    ) -> list[RecordResult]:
        self.seen.update(opened.receipt.receipt_id for opened in receipts)
        passing = [o for o in receipts if o.receipt.episode_id not in self.refuse]
        stored = iter(self._record(passing, *args, **kwargs) if passing else [])
        return [
            RecordResult(
                o.receipt.receipt_id, recorded=False, error=self.refuse[o.receipt.episode_id]
            )
            if o.receipt.episode_id in self.refuse
            else next(stored)
            for o in receipts
        ]


def dead_letter_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LINK_LOGGER and "moved to the dead letter" in r.getMessage()
    ]


def second_data_dir(seeded_template: Path, tmp_path: Path) -> Path:
    """Another private copy of the seeded data dir (a second worker on the same contract)."""
    target = tmp_path / "sentinel"
    shutil.copytree(seeded_template, target)
    return target


async def recorded_at_control(control: ControlApp, stack: RunningStack, receipt_id: str) -> None:
    async def there() -> bool:
        return receipt_id in await control_receipts(control, stack.digest)

    await eventually(there, within=30)


async def test_permanent_refusal_goes_to_dead_letter_not_retried_forever(
    tmp_path: Path, data_dir: Path, seeded_template: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LINK_LOGGER)
    control = await start_control_plane(tmp_path)
    index = RefusingIndex(control)
    optimizer = await start_linked_worker(data_dir, control.target, control.key)
    sentinel = await start_linked_worker(
        second_data_dir(seeded_template, tmp_path), control.target, control.key, metrics_port=0
    )
    try:
        link = link_of(sentinel)
        await asyncio.wait_for(link.registered.wait(), 20)
        # The optimizer's receipt for the episode reaches control's index first ...
        first = await score_honest(optimizer, 0)
        await recorded_at_control(control, optimizer, first.receipt.receipt_id)
        # ... then the sentinel scores the same episode id under the same contract.
        second = await score_honest(sentinel, 0)
        receipt_id = second.receipt.receipt_id
        assert receipt_id != first.receipt.receipt_id
        episode_id = second.receipt.episode_id

        async def dead_lettered() -> bool:
            return link.dead_lettered == 1

        await eventually(dead_lettered, within=30)
        store = sentinel.app.store
        [entry] = store.dead_letter_entries()
        assert (entry.receipt_id, entry.episode_id, entry.reason) == (
            receipt_id,
            episode_id,
            "duplicate_episode",
        )
        assert entry.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        assert episode_id in entry.message
        assert entry.attempts == 1, "refused once, moved at once"
        assert outbox_size(store) == 0
        # One line, naming the receipt, its episode, the reason and the command to retry.
        [line] = dead_letter_lines(caplog)
        assert receipt_id in line
        assert f"episode {episode_id}" in line
        assert "duplicate_episode" in line
        assert f"rewardseal-worker outbox dead-letter retry {receipt_id}" in line
        assert sentinel.app.metrics is not None
        samples = await scrape(sentinel.app.metrics.url)
        assert value(samples, f"{W}dead_letter_depth") == 1
        assert value(samples, f"{W}dead_letter_receipts", {"reason": "duplicate_episode"}) == 1
        assert value(samples, f"{W}outbox_depth") == 0

        # A retryable refusal (the key awaits an admin's approval) stays in the outbox and is
        # sent again, with backoff.
        later = "episode.linked.0001"
        index.refuse[later] = refusal(
            "key_not_admitted", grpc.StatusCode.FAILED_PRECONDITION, "key awaits approval"
        )
        waiting = await score_honest(sentinel, 1)

        async def sent_twice() -> bool:
            return index.seen[waiting.receipt.receipt_id] >= 2

        await eventually(sent_twice, within=30)
        assert outbox_size(store) == 1
        assert store.dead_letter_counts() == {"duplicate_episode": 1}
        # Sent once, never again: the dead letter is not forwarded, however often it runs.
        for _ in range(3):
            await link.forward_once()
        assert index.seen[receipt_id] == 1
        assert len(dead_letter_lines(caplog)) == 1
        # Approved: the waiting receipt is recorded and leaves the outbox.
        del index.refuse[later]
        await recorded_at_control(control, sentinel, waiting.receipt.receipt_id)

        async def drained() -> bool:
            return outbox_size(store) == 0

        await eventually(drained, within=30)
        assert store.dead_letter_counts() == {"duplicate_episode": 1}, "nothing deleted"
        assert receipt_id not in await control_receipts(control, sentinel.digest)
        kept = await sentinel.client.get_receipt(receipt_id=receipt_id)
        assert kept.receipt.receipt_id == receipt_id, "the worker still holds the receipt"
    finally:
        await stop_stack(sentinel)
        await stop_stack(optimizer)
        await control.stop()


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``rewardseal-worker ARGV`` in this process (tests call it off the event loop: the worker
    runs on it)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = worker_main(list(argv))
    return status, out.getvalue(), err.getvalue()


async def test_dead_letter_cli_lists_and_retry_puts_it_back_for_a_fixed_control(
    tmp_path: Path, data_dir: Path
) -> None:
    control = await start_control_plane(tmp_path)
    index = RefusingIndex(control)
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        link = link_of(stack)
        await asyncio.wait_for(link.registered.wait(), 20)
        # Control refuses two receipts permanently: the key is not bound to the contract.
        for n in (0, 1):
            index.refuse[f"episode.linked.{n:04d}"] = refusal(
                "key_not_bound", grpc.StatusCode.PERMISSION_DENIED, "key not bound to contract"
            )
        refused = [await score_honest(stack, n) for n in (0, 1)]
        ids = sorted(r.receipt.receipt_id for r in refused)

        async def both() -> bool:
            return link.dead_lettered == 2

        await eventually(both, within=30)
        where = ["--data-dir", str(data_dir)]
        status, out, _ = await asyncio.to_thread(run_cli, "outbox", "dead-letter", "list", *where)
        assert status == 0
        for receipt in refused:
            assert receipt.receipt.receipt_id in out
            assert f"episode {receipt.receipt.episode_id}" in out
        assert "key_not_bound" in out
        assert "key not bound to contract" in out
        status, out, _ = await asyncio.to_thread(
            run_cli, "outbox", "dead-letter", "list", "--json", *where
        )
        assert status == 0
        listed = json.loads(out)["dead_letter"]
        assert sorted(e["receipt_id"] for e in listed) == ids
        assert {(e["code"], e["reason"], e["attempts"]) for e in listed} == {
            ("PERMISSION_DENIED", "key_not_bound", 1)
        }

        # An id that is not in the dead letter: refused, exit 2, nothing moved.
        status, _, err = await asyncio.to_thread(
            run_cli, "outbox", "dead-letter", "retry", ids[0], "rcpt.unknown", *where
        )
        assert status == 2
        assert "not in the dead letter" in err
        assert "rcpt.unknown" in err
        assert stack.app.store.dead_letter_counts() == {"key_not_bound": 2}
        # Neither ids nor --all, or both: a usage error.
        status, _, _ = await asyncio.to_thread(run_cli, "outbox", "dead-letter", "retry", *where)
        assert status == 2

        # The operator binds the key (control is fixed) and retries one, then the rest.
        index.refuse.clear()
        status, out, _ = await asyncio.to_thread(
            run_cli, "outbox", "dead-letter", "retry", ids[0], *where
        )
        assert status == 0
        assert ids[0] in out
        await recorded_at_control(control, stack, ids[0])
        status, out, _ = await asyncio.to_thread(
            run_cli, "outbox", "dead-letter", "retry", "--all", "--json", *where
        )
        assert status == 0
        assert json.loads(out) == {"retried": [ids[1]]}
        await recorded_at_control(control, stack, ids[1])

        async def drained() -> bool:
            return outbox_size(stack.app.store) == 0

        await eventually(drained, within=30)
        status, out, _ = await asyncio.to_thread(run_cli, "outbox", "dead-letter", "list", *where)
        assert (status, out.strip()) == (0, "the dead letter is empty")
        assert link.dead_lettered == 2, "a retried receipt control records is not refused again"
    finally:
        await stop_stack(stack)
        await control.stop()


def test_dead_letter_cli_refuses_a_data_dir_without_a_store(tmp_path: Path) -> None:
    status, out, err = run_cli(
        "outbox", "dead-letter", "list", "--data-dir", str(tmp_path / "nothing")
    )
    assert status == 2
    assert out == ""
    assert "no worker store at" in err
    assert "--data-dir" in err
    assert not (tmp_path / "nothing" / "worker.sqlite").exists(), "a wrong dir makes nothing"
