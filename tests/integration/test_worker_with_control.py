"""The worker and the control plane together (R-C-4, R-C-5), both real servers on port 0.

The worker registers its contract and key, scores under the organization's certificate,
forwards privacy-safe receipts through its durable outbox (exactly once, even when control is
down while it scores) and follows the signed revocation list: a revocation, a rolled-back list
or no list at all each stop receipts from being certified.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.linked_stack import (
    approve,
    control_receipts,
    eventually,
    issue_certificate,
    link_of,
    organization_key,
    revoke,
    score_honest,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.worker_stack import stop_stack
from support.worker_store import outbox_size

from rewardseal.core.scoring import revocation_unknown_sentence
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    RewardOutcome,
)
from rewardseal_control.app import ControlApp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlApp]:
    app = await start_control_plane(tmp_path)
    yield app
    await app.stop()


async def test_receipts_are_certified_forwarded_and_revocation_stops_certification(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        link = link_of(stack)
        await asyncio.wait_for(link.registered.wait(), 20)
        # Issued while the worker runs: adopted at the next poll, no restart.
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
        await eventually(lambda: _fresh(link, control, certificate_id))
        first = await score_honest(stack, 1)
        assert first.receipt.certificate_id == certificate_id
        assert first.receipt.certified, first.receipt.certification_refusals
        assert first.receipt.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC

        async def forwarded() -> bool:
            return first.receipt.receipt_id in await control_receipts(control, stack.digest)

        await eventually(forwarded)

        await revoke(control, certificate_id)
        # The revoked certificate is dropped, and not for the seeded self-signed one: control
        # does not list that one, so a linked worker does not count it (R-C-9). Receipts are
        # scored as before and certified by nothing.
        await scoring_under(stack, None)
        assert link.revocation(_certificate(control, certificate_id)).value == "revoked"
        second = await score_honest(stack, 2)
        assert second.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
        assert second.scalar == 1.0
        assert second.receipt.certificate_id == ""
        assert second.receipt.certified is False
    finally:
        await stop_stack(stack)


def _certificate(control: ControlApp, certificate_id: str) -> RewardCertificate:
    return control.store.certificates.get_certificate(certificate_id).certificate


async def _fresh(link, control: ControlApp, certificate_id: str) -> bool:  # type: ignore[no-untyped-def]
    return link.revocation(_certificate(control, certificate_id)).value == "not_revoked"


async def test_rolled_back_revocation_list_makes_certification_unknown(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        link = link_of(stack)
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
        await eventually(lambda: _fresh(link, control, certificate_id))
        # A newer list exists once control re-signs; then feed the worker the older one.
        old = control.store.revocations.revocation_head()
        assert old is not None
        head = await asyncio.to_thread(
            control.store.revocations.publish_revocation_list, sign=control.servicer._sign_list
        )
        await control.servicer._advance(head)

        async def newer() -> bool:
            follower = link._follower
            return follower is not None and follower.version > old.version

        await eventually(newer)
        link._accept(old.envelope)
        got = await score_honest(stack, 3)
        assert got.receipt.certified is False
        assert revocation_unknown_sentence(certificate_id) in got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_control_down_scoring_unaffected_then_outbox_drains_exactly_once(
    tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    # The operator pins the organization key before control ever runs (and so cannot make an
    # enrollment credential: it admits the key once the worker has registered).
    stack = await start_linked_worker(data_dir, target, organization_key(tmp_path), enroll=False)
    control: ControlApp | None = None
    try:
        receipts = [await score_honest(stack, 10 + i) for i in range(5)]
        # Scored and answered while control is unreachable; not certified (no fresh list).
        assert all(
            r.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED for r in receipts
        )
        assert all(not r.receipt.certified for r in receipts)
        assert outbox_size(stack.app.store) == 5
        control = await start_control_plane(tmp_path, port=port)
        with caplog.at_level(logging.WARNING, logger="rewardseal_worker.control_link"):
            await asyncio.wait_for(link_of(stack).registered.wait(), 60)
        # Not admitted yet: one line says what the operator runs; the receipts wait.
        told = [r.getMessage() for r in caplog.records if "has not admitted" in r.getMessage()]
        assert len(told) == 1
        assert f"keys approve {stack.app.key.key_id} --contract {stack.digest}" in told[0]
        assert outbox_size(stack.app.store) == 5
        # A forwarding pass while the key waits says so in one line, not one per receipt (if
        # the worker's own pass ran first, it said it, and the rows are not due yet).
        with caplog.at_level(logging.DEBUG, logger="rewardseal_worker.control_link"):
            await link_of(stack).forward_once()
        held = [r for r in caplog.records if "receipt(s) back until" in r.getMessage()]
        assert held
        assert all(r.levelno == logging.WARNING for r in held)
        assert f"keys approve {stack.app.key.key_id}" in held[0].getMessage()
        per_receipt = [r for r in caplog.records if "control refused receipt" in r.getMessage()]
        assert all(r.levelno == logging.DEBUG for r in per_receipt)
        assert outbox_size(stack.app.store) == 5
        await approve(control, stack)

        async def drained() -> bool:
            return outbox_size(stack.app.store) == 0

        await eventually(drained, within=60)
        stored = await control_receipts(control, stack.digest)
        assert sorted(stored) == sorted(r.receipt.receipt_id for r in receipts)
        # Forwarding again (a resend after a crash) stores nothing twice.
        assert len(stored) == len(set(stored))
    finally:
        await stop_stack(stack)
        if control is not None:
            await control.stop()
