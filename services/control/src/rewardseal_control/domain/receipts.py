"""The receipt index's intake (R-C-5, R-C-10): forwarded receipts, verified, then indexed.

Per receipt, the first check that fails decides its refusal; one bad receipt never fails the
batch:

1. the signature over the exact bytes against the registered, active worker keys, then the
   strict parse, core's rules and the envelope flags
   (:func:`~rewardseal.core.receipts.open_receipt`: ``signature_invalid`` and the receipt's own
   errors), here, before anything is parsed or stored; an unverified payload is never parsed, not
   even for its receipt id;
2. in the index's one transaction (a consistent state of what exists,
   :meth:`~rewardseal_control.store.receipts.ReceiptIndex.record_receipts` lists every rule):
   the same receipt stored already (``duplicate``), an unregistered contract (``not_found``),
   an unregistered key (``signature_invalid``), ``key_not_admitted``, ``key_not_bound``,
   ``certificate_unknown``, ``duplicate_episode``. Who may write comes before what exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.receipts import OpenedReceipt, open_receipt
from rewardseal.core.signing import TrustSet
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import ControlStore, RecordResult

__all__ = ["MAX_RECEIPT_BATCH", "ReceiptIntake"]

MAX_RECEIPT_BATCH: Final = 1024
"""The most receipts one RecordReceipts call may carry."""


class ReceiptIntake:
    """Verifies forwarded receipt envelopes and records them in the index; ``recorded`` is told
    the receipts each call stored now (a resend of a stored one is not told again)."""

    def __init__(
        self,
        store: ControlStore,
        clock: Callable[[], datetime],
        recorded: Callable[[Sequence[OpenedReceipt]], None],
    ) -> None:
        self._store = store
        self._clock = clock
        self._recorded = recorded

    async def record(self, envelopes: Sequence[SignedEnvelope]) -> list[RecordResult]:
        """One result per envelope, in order (refused ones carry their error; one refused for
        its signature or content has no receipt id).

        Raises:
            ValidationError: more than :data:`MAX_RECEIPT_BATCH` envelopes.
        """
        if len(envelopes) > MAX_RECEIPT_BATCH:
            raise ValidationError(f"at most {MAX_RECEIPT_BATCH} receipts per call")
        if not envelopes:
            return []
        now = self._clock()
        trust: TrustSet = await asyncio.to_thread(self._store.keys.worker_trust, now)
        results: list[RecordResult | None] = [None] * len(envelopes)
        verified: list[tuple[int, OpenedReceipt]] = []
        for index, envelope in enumerate(envelopes):
            # Check 1. The opened receipt goes to the index as it is: this is the one parse and
            # validation.
            try:
                opened = open_receipt(envelope, trust)
            except RewardSealError as exc:
                results[index] = RecordResult(receipt_id="", recorded=False, error=exc)
                continue
            verified.append((index, opened))
        if verified:
            stored: list[RecordResult] = await asyncio.to_thread(
                self._store.receipts.record_receipts, [opened for _, opened in verified], at=now
            )
            for (index, _), outcome in zip(verified, stored, strict=True):
                results[index] = outcome
            self._recorded(
                [
                    opened
                    for (_, opened), outcome in zip(verified, stored, strict=True)
                    if outcome.recorded and not outcome.duplicate
                ]
            )
        return [result for result in results if result is not None]
