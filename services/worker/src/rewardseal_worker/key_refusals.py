"""Why control refuses this worker's receipts as ``signature_invalid``, said once, with the fix.

Control verifies each forwarded receipt against its registered, active WORKER keys. When the
worker's own key is not among them (control's database was reset after the worker registered,
or an admin retired the key), every receipt is refused with the same reason. Logging
``signature_invalid`` per receipt hides the cause; this asks control once which it is, and
tells the forwarder whether the refusals are permanent (R-C-12):

* the key is unknown: register it again (the worker credential may register its own WORKER
  key); if that works the refused receipts are resent and one warning says what happened; if
  not, one error names the command that registers it. Either way the receipts stay in the
  outbox: the refusal is about the key, and control takes them once the key is registered;
* the key is retired: one error says so, and how to give the worker a new key; the receipts it
  signed go to the dead letter (no retired key verifies again);
* the key is registered and active: the refusals have another cause (the receipt's signature
  does not verify under it), and they are permanent;
* control cannot be asked: the receipts stay in the outbox (fail toward keeping).

After one explanation the per-receipt lines drop to debug until a receipt is recorded again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from rewardseal.core.errors import RewardSealError, SignatureError
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.control_client import AsyncControlClient
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole

__all__ = ["SIGNATURE_INVALID", "KeyRefusals"]

_log = logging.getLogger("rewardseal_worker.control_link")

SIGNATURE_INVALID: Final = SignatureError.reason
"""The refusal reason control gives a receipt no registered, active WORKER key verifies."""


class KeyRefusals:
    """Explains ``signature_invalid`` refusals of this worker's receipts (see the module)."""

    def __init__(
        self,
        control: AsyncControlClient,
        key: SigningKey,
        register: Callable[[], Awaitable[None]],
    ) -> None:
        """``register``: registers the contract and this worker's key at control again."""
        self._control = control
        self._key = key
        self._register = register
        self._asking = asyncio.Lock()
        self.explained = False
        """True once the cause was found and said; per-receipt lines are then debug."""
        self._keep = True
        """What the explanation found: the refusals are the key's, so keep the receipts."""
        self.registrations = 0
        """How often the key was registered again here: refusals answered to a call sent
        before the latest one are the key's too, whatever control says now."""

    def recorded(self) -> None:
        """Control recorded a receipt again: a later refusal deserves a new explanation."""
        self.explained = False

    async def explain(self) -> bool:
        """Find and say, once, why control refused receipts as ``signature_invalid``; True when
        the receipts should stay in the outbox (this worker's key is unknown at control, or
        control could not be asked), False when the refusals are permanent."""
        # One inquiry at a time: two forwarding passes must not both ask, and both say it.
        async with self._asking:
            if not self.explained:
                self._keep = await self._explain()
            return self._keep

    async def _explain(self) -> bool:
        try:
            entry = await self._own_entry()
        except RewardSealError as exc:
            _log.info("could not ask control about worker key %s (%s)", self._key.key_id, exc)
            return True
        key_id = self._key.key_id
        if entry is not None and not entry.retired:
            return False  # registered and active: the receipt's own signature is the problem
        if entry is None:
            try:
                await self._register()
            except RewardSealError as exc:
                self.explained = True
                _log.error(
                    "worker key %s is not registered at control, which refuses every receipt "
                    "it signs (signature_invalid); they wait in the outbox. Registering it "
                    "again failed (%s): run `rewardseal-control keys register --role worker "
                    "--public-key %s --reason 'worker %s'` with the admin credential",
                    key_id,
                    exc.message,
                    self._key.public_key.hex(),
                    key_id,
                )
                return True
            self.registrations += 1
            _log.warning(
                "worker key %s was not registered at control (was its database reset?): "
                "registered it again; the refused receipts will be resent",
                key_id,
            )
            return True
        self.explained = True
        _log.error(
            "worker key %s is retired at control, which refuses every receipt it signs "
            "(signature_invalid); they go to the dead letter (`rewardseal-worker outbox "
            "dead-letter list`). Give the worker a new key: stop it, move keys/worker.ed25519 "
            "out of its data directory and start it again (it registers the new key)",
            key_id,
        )
        return False

    async def _own_entry(self) -> IssuerKey | None:
        """Control's registry entry for this worker's key (retired or not), or None."""
        async for entry in self._control.issuer_keys(role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER):
            if entry.key_id == self._key.key_id:
                return entry
        return None
