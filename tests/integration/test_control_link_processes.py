"""The control link of ``serve --processes N``: one process registers and forwards, every
process follows certificates (R-C-4, R-C-5).

Two workers over one data dir and one SQLite store, joined to one real control plane, as two
children of a supervisor are: the primary (process 0) and another. Receipts scored by either
land in the shared outbox; only the primary forwards it, and control gets each receipt once.
A certificate issued at control is adopted by both, each in its own memory, without a restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.linked_stack import (
    control_receipts,
    eventually,
    issue_certificate,
    link_of,
    score_honest,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.worker_stack import stop_stack

from rewardseal_control.app import ControlApp


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlApp]:
    app = await start_control_plane(tmp_path)
    yield app
    await app.stop()


async def test_one_process_forwards_and_every_process_follows_certificates(
    control: ControlApp, data_dir: Path
) -> None:
    primary = await start_linked_worker(data_dir, control.target, control.key)
    other = await start_linked_worker(data_dir, control.target, control.key, primary=False)
    try:
        scored = [await score_honest(other, i) for i in range(3)]
        scored += [await score_honest(primary, i) for i in range(3, 6)]
        wanted = sorted(r.receipt.receipt_id for r in scored)

        async def all_at_control() -> bool:
            return sorted(await control_receipts(control, primary.digest)) == wanted

        await eventually(all_at_control)

        async def all_counted() -> bool:
            # Control commits a receipt before the primary marks its outbox row done and counts it.
            return link_of(primary).forwarded == len(wanted)

        # The primary forwarded all six, the other's three too; the other forwarded none and
        # never registered (the primary did, once).
        await eventually(all_counted)
        assert link_of(other).forwarded == 0
        assert link_of(primary).registered.is_set()
        assert not link_of(other).registered.is_set()

        certificate_id = await issue_certificate(control, data_dir, primary.digest)
        await scoring_under(primary, certificate_id)
        await scoring_under(other, certificate_id)
        got = await score_honest(other, 6)
        assert got.receipt.certificate_id == certificate_id
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(other)
        await stop_stack(primary)
