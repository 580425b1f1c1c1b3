"""One control plane's domain: its rules over one store, organization key and clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from rewardseal.core.clock import utc_now
from rewardseal.core.receipts import OpenedReceipt
from rewardseal.core.signing import SigningKey
from rewardseal_control.domain.attestation import CheckpointAttesting
from rewardseal_control.domain.contracts import ContractRegistry
from rewardseal_control.domain.issuing import CertificateIssuing
from rewardseal_control.domain.keys import KeyAdmissions
from rewardseal_control.domain.receipts import ReceiptIntake
from rewardseal_control.domain.revocation import RevocationPublisher
from rewardseal_control.store import ControlStore

__all__ = ["ControlPlane"]


class ControlPlane:
    """The control plane's rules, for its gRPC servicer, its console and its command line.

    ``key`` is the organization key this control plane signs certificates, revocation lists
    and reward attestations with; it must be registered (role ORGANIZATION) to issue.
    ``revocation_ttl`` and ``refresh_interval`` go to the
    :class:`~.revocation.RevocationPublisher`. Call
    :meth:`start` before serving and :meth:`close` when stopping.
    """

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        *,
        revocation_ttl: timedelta = timedelta(hours=24),
        clock: Callable[[], datetime] = utc_now,
        refresh_interval: timedelta | None = None,
    ) -> None:
        """Raises ValueError when ``revocation_ttl`` is not positive."""
        self.store = store
        self.key = key
        self.clock = clock
        self.on_recorded: Callable[[Sequence[OpenedReceipt]], None] | None = None
        """Told the receipts each RecordReceipts call stored now (the metrics count them)."""
        self.on_admin_action: Callable[[str], None] | None = None
        """Told the audit-log action of each admin action done (the metrics count them)."""
        self.revocations = RevocationPublisher(
            store,
            key,
            clock,
            self._audited,
            ttl=revocation_ttl,
            refresh_interval=refresh_interval,
        )
        self.contracts = ContractRegistry(store, clock)
        self.keys = KeyAdmissions(store, key, clock, self._audited)
        self.issuing = CertificateIssuing(store, key, clock, self._audited)
        self.receipts = ReceiptIntake(store, clock, self._recorded)
        self.attesting = CheckpointAttesting(store, key, clock, self._audited)

    async def start(self) -> None:
        """Publish a fresh signed revocation list and keep it fresh."""
        await self.revocations.start()

    async def close(self) -> None:
        """Stop refreshing the revocation list and end every watch."""
        await self.revocations.close()

    def _audited(self, action: str) -> None:
        if self.on_admin_action is not None:
            self.on_admin_action(action)

    def _recorded(self, receipts: Sequence[OpenedReceipt]) -> None:
        if self.on_recorded is not None:
            self.on_recorded(receipts)
