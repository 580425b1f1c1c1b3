"""Forwarding the outbox to control (R-C-5), permanent refusals to the dead letter (R-C-12).

Part of the worker's control link (:mod:`rewardseal_worker.control_link`), and nothing on the
scoring path: scoring writes each receipt and its outbox row in one transaction and answers;
:class:`ReceiptForwarder` sends what is due and deletes what control recorded (control is
idempotent by receipt id, so a resend after a crash is harmless and every receipt arrives
exactly once). A receipt control refuses for good (:mod:`rewardseal_worker.record_refusals`)
moves to the dead letter instead of being resent forever; a refusal about this worker's key is
explained once (:mod:`rewardseal_worker.key_refusals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from rewardseal.core.errors import KeyNotAdmitted, RewardSealError
from rewardseal.rpc.control_client import AsyncControlClient
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_worker.control_calls import LINK_LOGGER, backoff
from rewardseal_worker.key_refusals import SIGNATURE_INVALID, KeyRefusals
from rewardseal_worker.record_refusals import Refusal, classify
from rewardseal_worker.store import Refused, WorkerStore

__all__ = ["FORWARD_BATCH", "ReceiptForwarder"]

_log = logging.getLogger(LINK_LOGGER)

FORWARD_BATCH = 256
"""Outbox rows sent per RecordReceipts call."""


class ReceiptForwarder:
    """Sends one worker's outbox to control, batch by batch, until cancelled."""

    def __init__(
        self,
        *,
        control: AsyncControlClient,
        store: WorkerStore,
        key_refusals: KeyRefusals,
        key_id: str,
        contract_digest: str,
        clock: Callable[[], datetime],
        interval: float,
    ) -> None:
        """``interval``: the longest wait between two looks at an outbox that had nothing
        due (:meth:`wake` cuts it short)."""
        self._control = control
        self._store = store
        self._key_refusals = key_refusals
        self._key_id = key_id
        self._contract_digest = contract_digest
        self._clock = clock
        self._interval = interval
        self._wake = asyncio.Event()
        self.forwarded = 0
        """Receipts control recorded from this forwarder; tests wait on it."""
        self.dead_lettered = 0
        """Receipts this forwarder moved to the dead letter (R-C-12); tests wait on it."""

    def wake(self) -> None:
        """New receipts wait in the outbox: look now (on the event loop only)."""
        self._wake.set()

    async def forward_forever(self, registered: asyncio.Event) -> None:
        """Forward what is due, again and again, once ``registered`` is set."""
        # Not before registration: a receipt sent before control knows the contract would be
        # refused not_found, which is permanent (R-C-12), for a cause of our own making.
        await registered.wait()
        attempt = 0
        while True:
            try:
                sent = await self.forward_once()
                attempt = 0
            except RewardSealError as exc:
                _log.warning("forwarding receipts failed (%s); will retry", exc.reason)
                await asyncio.sleep(backoff(attempt))
                attempt += 1
                continue
            if sent == 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._interval)

    async def forward_once(self) -> int:
        """Send one batch of due outbox rows; return how many control recorded.

        A receipt control refuses permanently (:mod:`rewardseal_worker.record_refusals`) moves
        to the dead letter; any other refusal, and a failed call, stays in the outbox for later.
        """
        due = await asyncio.to_thread(self._store.outbox_due, FORWARD_BATCH, self._clock())
        if not due:
            return 0
        envelopes = [SignedEnvelope.FromString(item.envelope) for item in due]
        registrations = self._key_refusals.registrations
        try:
            results = await self._control.record_receipts(envelopes)
        except RewardSealError as exc:
            await asyncio.to_thread(
                self._store.outbox_later,
                [item.receipt_id for item in due],
                error=f"control: {exc.reason}",
                now=self._clock(),
                delay_seconds=backoff(max(item.attempts for item in due)),
            )
            raise
        done: list[str] = []
        refused: list[Refused] = []
        keep_signature_refusals = False
        waiting = 0
        if any(r.error.reason == SIGNATURE_INVALID for r in results if not r.recorded):
            # Most often this worker's key is unknown or retired at control: said once. While
            # the key is unknown, or when it was registered again after this call was sent (by
            # another pass), the refusals are the key's, and the receipts stay.
            keep_signature_refusals = (
                await self._key_refusals.explain()
                or self._key_refusals.registrations != registrations
            )
        for item, result in zip(due, results, strict=True):
            if result.recorded:
                done.append(item.receipt_id)
                self._key_refusals.recorded()
                continue
            reason = result.error.reason or "refused"
            if classify(result.error) is Refusal.PERMANENT and not (
                reason == SIGNATURE_INVALID and keep_signature_refusals
            ):
                refused.append(
                    Refused(item.receipt_id, result.error.code, reason, result.error.message)
                )
                continue
            # A refusal is not a transport problem: retry it much later, and say why. A key
            # refusal already explained (a key control forgot, or one awaiting admission: the
            # registration logged the command to run) says so once per pass, not per receipt.
            if reason == KeyNotAdmitted.reason:
                waiting += 1
            explained = reason == KeyNotAdmitted.reason or (
                reason == SIGNATURE_INVALID and self._key_refusals.explained
            )
            _log.log(
                logging.DEBUG if explained else logging.WARNING,
                "control refused receipt %s: %s",
                item.receipt_id,
                reason,
            )
            await asyncio.to_thread(
                self._store.outbox_later,
                [item.receipt_id],
                error=f"control refused: {reason}",
                now=self._clock(),
                delay_seconds=backoff(item.attempts + 3),
            )
        if waiting:
            _log.warning(
                "control holds %d receipt(s) back until this worker's key %s is admitted "
                "(rewardseal-control keys approve %s --contract %s); they wait in the outbox",
                waiting,
                self._key_id,
                self._key_id,
                self._contract_digest,
            )
        if refused:
            await self._dead_letter(refused)
        await asyncio.to_thread(self._store.outbox_done, done)
        self.forwarded += len(done)
        return len(done)

    async def _dead_letter(self, refused: list[Refused]) -> None:
        """Move permanently refused receipts to the dead letter; one line for each moved."""
        moved = await asyncio.to_thread(self._store.dead_letter_refused, refused, now=self._clock())
        for entry in moved:
            _log.warning(
                "receipt %s (episode %s) moved to the dead letter: control refused it "
                "permanently (%s: %s); it is kept, not resent. Once the cause is fixed: "
                "rewardseal-worker outbox dead-letter retry %s",
                entry.receipt_id,
                entry.episode_id,
                entry.reason,
                entry.message,
                entry.receipt_id,
            )
        self.dead_lettered += len(moved)
