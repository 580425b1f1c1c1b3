"""A worker key control does not hold: one clear line instead of ``signature_invalid`` per
receipt; a key control forgot is registered again (its receipts stay in the outbox and are
resent), a retired one names the fix (its receipts go to the dead letter, R-C-12). Control logs
each key registration and certificate issue (one line, no secret)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import delete, update
from sqlalchemy.engine import Connection
from support.linked_stack import (
    ADMIN_TOKEN,
    WORKER_TOKEN,
    control_client,
    eventually,
    issue_certificate,
    link_of,
    score_honest,
    start_control_plane,
    start_linked_worker,
)
from support.worker_stack import RunningStack
from support.worker_store import outbox_size

from rewardseal_control.app import ControlApp
from rewardseal_control.store import tables

LINK_LOGGER = "rewardseal_worker.control_link"


async def linked(tmp_path: Path, data_dir: Path) -> tuple[ControlApp, RunningStack]:
    control = await start_control_plane(tmp_path)
    stack = await start_linked_worker(data_dir, control.target, control.key)
    await asyncio.wait_for(link_of(stack).registered.wait(), 20)
    return control, stack


async def stop(control: ControlApp, stack: RunningStack) -> None:
    await stack.client.close()
    await stack.app.stop()
    await control.stop()


def lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LINK_LOGGER and r.levelno == level and text in r.getMessage()
    ]


async def test_a_retired_worker_key_is_said_once_with_the_fix(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LINK_LOGGER)
    control, stack = await linked(tmp_path, data_dir)
    try:
        key_id = stack.app.key.key_id
        async with control_client(control.target, ADMIN_TOKEN) as admin:
            await admin.retire_issuer_key(key_id, reason="test: retired under a running worker")
        link = link_of(stack)
        for index in range(3):
            await score_honest(stack, index)
            await link.forward_once()
        said = lines(caplog, logging.ERROR, f"worker key {key_id} is retired at control")
        assert len(said) == 1, said
        assert "signature_invalid" in said[0]
        assert "move keys/worker.ed25519" in said[0]
        assert "dead letter" in said[0]
        # No retired key verifies again: the receipts are refused for good (R-C-12) and go to
        # the dead letter, one line each, instead of a warning per resend forever.
        assert not lines(caplog, logging.WARNING, "control refused receipt")
        moved = lines(caplog, logging.WARNING, "moved to the dead letter")
        assert len(moved) == 3, moved
        assert all("signature_invalid" in line for line in moved)
        assert stack.app.store.dead_letter_counts() == {"signature_invalid": 3}
        assert outbox_size(stack.app.store) == 0
        assert link.forwarded == 0
    finally:
        await stop(control, stack)


async def test_a_worker_key_control_forgot_is_registered_again(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    control, stack = await linked(tmp_path, data_dir)
    try:
        key_id = stack.app.key.key_id

        # Control loses the key (a database restored from before the worker registered: nor
        # its bindings, its bundle certificate, nor the use of its enrollment credential).
        def forget(conn: Connection) -> None:
            for table in (tables.key_bindings, tables.key_certificates):
                conn.execute(delete(table).where(table.c.key_id == key_id))
            enrollments = tables.enrollments
            conn.execute(
                update(enrollments)
                .where(enrollments.c.used_by_key_id == key_id)
                .values(used_at=None, used_by_key_id=None)
            )
            conn.execute(delete(tables.keys).where(tables.keys.c.key_id == key_id))

        control.store._db.write(forget)
        link = link_of(stack)
        await score_honest(stack, 0)
        assert await link.forward_once() == 0
        said = lines(caplog, logging.WARNING, f"worker key {key_id} was not registered")
        assert len(said) == 1, said
        assert "registered it again" in said[0]

        async def resent() -> bool:
            # The link's own forwarding task runs beside these calls: the receipt may go out
            # twice (control records the repeat as a duplicate), so "at least once".
            await link.forward_once()
            return link.forwarded >= 1

        await eventually(resent, within=30)
        # The refusals were the key's, not the receipt's: nothing went to the dead letter.
        assert stack.app.store.dead_letter_counts() == {}
        assert not lines(caplog, logging.ERROR, key_id)
    finally:
        await stop(control, stack)


async def test_control_logs_key_registrations_and_certificate_issues(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rewardseal_control.domain")
    control, stack = await linked(tmp_path, data_dir)
    try:
        messages = [r.getMessage() for r in caplog.records if r.name == "rewardseal_control.domain"]
        registered = [m for m in messages if m.startswith("registered WORKER key")]
        assert registered == [
            f"registered WORKER key {stack.app.key.key_id} (by the worker credential)"
        ]
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        issued = [
            r.getMessage()
            for r in caplog.records
            if r.getMessage().startswith(f"issued certificate {certificate_id} ")
        ]
        assert len(issued) == 1
        assert stack.digest in issued[0]
        assert all(
            token not in r.getMessage()
            for r in caplog.records
            for token in (ADMIN_TOKEN, WORKER_TOKEN)
        )
    finally:
        await stop(control, stack)
