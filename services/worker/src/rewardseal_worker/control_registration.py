"""The worker's registration at control (R-C-10, R-C-11): its contract and its own WORKER key,
signed by that key, until control answers; then a warning where the pinned organization keys
and control's registry disagree.

Part of the worker's control link (:mod:`rewardseal_worker.control_link`). Registration runs
in the primary process only, and the receipt forwarder waits for it
(:attr:`Registration.registered`): a receipt sent before control knows the contract would be
refused for good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from rewardseal.core.errors import RewardSealError
from rewardseal.core.key_possession import sign_registration
from rewardseal.core.signing import SigningKey, TrustSet, key_id_for
from rewardseal.rpc.control_client import AsyncControlClient
from rewardseal.v1 import control_service_pb2 as control_pb
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.control_calls import LINK_LOGGER, backoff
from rewardseal_worker.settings import ENROLLMENT_ENV

__all__ = ["Registration"]

_log = logging.getLogger(LINK_LOGGER)


class Registration:
    """Registers one worker's contract and key at control, and says what control answered."""

    def __init__(
        self,
        *,
        control: AsyncControlClient,
        key: SigningKey,
        bundle: ContractBundle,
        trust: TrustSet,
        clock: Callable[[], datetime],
        enrollment: str = "",
    ) -> None:
        """``trust``: the pinned organization keys (checked against control's registry, for a
        warning only); ``enrollment``: a one-time enrollment credential from the admin
        (``rewardseal-control keys enroll``), presented at registration (R-C-11)."""
        self._control = control
        self._key = key
        self._bundle = bundle
        self._trust = trust
        self._clock = clock
        self._enrollment = enrollment
        self._told_not_admitted = False
        self.admitted = False
        """Whether control's last answer to registration admitted this key for the contract."""
        self.registered = asyncio.Event()
        """Set once control took the registration."""

    async def until_done(self) -> None:
        """Register, with backoff, until control takes it; then check the pinned keys."""
        attempt = 0
        while True:
            try:
                await self.register()
                break
            except RewardSealError as exc:
                _log.warning(
                    "could not register with control (%s: %s); retrying", exc.reason, exc.message
                )
                await asyncio.sleep(backoff(attempt))
                attempt += 1
        self.registered.set()
        await self._warn_about_pinned_keys()

    async def register(self) -> None:
        """Register the contract and this worker's own WORKER key (the worker credential may
        do exactly that; an ORGANIZATION key it could not register).

        The registration is signed by the key itself (proof of possession, R-C-10), names the
        contract the key signs receipts for, carries the one-time enrollment credential when
        the operator gave one (the key is then admitted at once) and the bundle's own
        certificate (so control knows the certificate id its receipts may name, R-C-5).
        """
        bundle = self._bundle
        await self._control.register_contract(bundle.contract, bundle.contract_digest)
        request = control_pb.RegisterIssuerKeyRequest(
            key=IssuerKey(
                key_id=self._key.key_id,
                public_key=self._key.public_key,
                role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
                display_name=f"worker for {bundle.contract.contract_id}",
            ),
            reason="worker start",
            reward_contract_digests=[bundle.contract_digest],
            enrollment_credential=self._enrollment,
        )
        if bundle.certificate is not None:
            request.bundle_certificate.CopyFrom(bundle.certificate)
        sign_registration(request, self._key, self._clock())
        answer = await self._control.register_key(request)
        self._say_admission(answer.admission)

    def _say_admission(self, admission: control_pb.KeyAdmission) -> None:
        """One line, once, when control does not yet let this key's receipts into the index:
        what the operator runs. Scoring goes on; the receipts wait in the outbox."""
        digest = self._bundle.contract_digest
        self.admitted = admission.admitted and digest in admission.reward_contract_digests
        if self.admitted or self._told_not_admitted:
            return
        self._told_not_admitted = True
        _log.warning(
            "control has not admitted this worker's key for contract %s: receipts wait in the "
            "outbox (scoring goes on) until an admin runs: rewardseal-control keys approve %s "
            "--contract %s (or give the worker a credential from rewardseal-control keys enroll "
            "in %s)",
            digest,
            self._key.key_id,
            digest,
            ENROLLMENT_ENV,
        )

    async def _warn_about_pinned_keys(self) -> None:
        """Say when a pinned key is retired or unknown at control: the operator's pin and
        control's registry disagree. Informational only: trust stays with the pin."""
        try:
            listed = await self._organization_keys()
        except RewardSealError as exc:
            _log.info("could not list control's organization keys (%s)", exc.reason)
            return
        for key_id in sorted(self._trust.key_ids):
            entry = listed.get(key_id)
            if entry is None:
                _log.warning("pinned organization key %s is not registered at control", key_id)
            elif entry.retired:
                _log.warning("pinned organization key %s is retired at control", key_id)

    async def _organization_keys(self) -> dict[str, IssuerKey]:
        keys: dict[str, IssuerKey] = {}
        async for entry in self._control.issuer_keys(
            role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
        ):
            keys[key_id_for(bytes(entry.public_key))] = entry
        return keys
