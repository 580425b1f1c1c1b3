"""The revocation publisher: revoking (R-C-4, R-C-13) and keeping the signed list alive.

It publishes the first list on start, re-signs the head under a new version when half its
lifetime has passed (so a follower never holds a frozen list while the control plane is up),
and pushes every new head to watchers. Every revocation, by the RPC or the console, goes
through :meth:`RevocationPublisher._revoked`: the store's revocation and the next signed list in
one transaction, the count, one log line, the head to watchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.revocation import CHECKER, CONTRACT, sign_revocation_list
from rewardseal.core.signing import SigningKey
from rewardseal.v1.certificate_pb2 import RevocationList
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.domain.parts import DomainPart
from rewardseal_control.store import ControlStore, RevocationHead
from rewardseal_control.store.audit_log import (
    ACTION_REVOKE_CERTIFICATE,
    ACTION_REVOKE_CHECKER,
    ACTION_REVOKE_CONTRACT,
)

__all__ = ["CERTIFICATE", "MAX_REFRESH_INTERVAL", "RevocationPublisher"]

# One logger for the domain layer: an operator follows one name.
_log = logging.getLogger("rewardseal_control.domain")

CERTIFICATE = "certificate"
"""The kind of a revocation that names one certificate (beside core's CONTRACT and CHECKER)."""
MAX_REFRESH_INTERVAL = timedelta(seconds=60)


class RevocationPublisher(DomainPart):
    """Revokes, and keeps the signed revocation list fresh, for one control plane.

    ``key`` signs the lists; ``ttl`` is each list's lifetime; ``refresh_interval`` how often the
    head is re-read (other replicas may publish) and re-signed when half its lifetime has
    passed (default ``min(ttl / 8, 60 s)``); ``audited`` is told each revocation's action.
    Call :meth:`start` before serving and :meth:`close` when stopping.
    """

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        clock: Callable[[], datetime],
        audited: Callable[[str], None],
        *,
        ttl: timedelta,
        refresh_interval: timedelta | None = None,
    ) -> None:
        """Raises ValueError when ``ttl`` is not positive."""
        if ttl <= timedelta(0):
            raise ValueError("revocation_ttl must be positive")
        super().__init__(store, key, clock, audited)
        self.ttl = ttl
        self.refresh_interval = refresh_interval or min(ttl / 8, MAX_REFRESH_INTERVAL)
        self._head: RevocationHead | None = None
        self._changed = asyncio.Condition()
        self._refreshing = asyncio.Lock()
        self._closing = False
        self._refresher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Make sure a fresh signed revocation list exists, then keep it fresh."""
        await self.refresh()
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="revocation-refresh")

    async def close(self) -> None:
        """Stop the refresher and end every watch."""
        self._closing = True
        async with self._changed:
            self._changed.notify_all()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None

    async def _refresh_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.refresh_interval.total_seconds())
            try:
                await self.refresh()
            except RewardSealError as exc:
                # The database may be down for a while; followers keep their list until it
                # expires, and the next round tries again.
                _log.warning("could not refresh the revocation list: %s", exc.message)
            except Exception:
                # Never let one bug end the loop: a dead refresher means frozen lists tomorrow.
                _log.exception("unexpected error while refreshing the revocation list")

    # ------------------------------------------------------------------ the head

    @property
    def head(self) -> RevocationHead | None:
        """The signed revocation list served now (None before :meth:`start`)."""
        return self._head

    def _sign_list(self, revocation_list: RevocationList) -> SignedEnvelope:
        """The store's signer: name our key as issuer and sign the list's exact bytes."""
        revocation_list.issuer_key_id = self._key.key_id
        return sign_revocation_list(revocation_list, self._key)

    def _needs_resign(self, head: RevocationHead | None, now: datetime) -> bool:
        if head is None:
            return True
        # Re-sign at half-life: a follower polling or watching always holds a list with at
        # least half its lifetime left while this control plane is up.
        if now >= head.issued_at + self.ttl / 2:
            return True
        # Also when the organization key changed (a follower trusts the new key only), or the
        # head was made with a longer lifetime than now configured.
        issuer = RevocationList.FromString(head.envelope.payload).issuer_key_id
        return issuer != self._key.key_id or head.expires_at > now + self.ttl

    async def refresh(self) -> RevocationHead:
        """Read the stored head, re-sign it if due, tell watchers about anything newer.
        Read the store, not the cache: another replica may have published since."""
        # One refresh at a time in this process: the refresher and a GetRevocationList that
        # both find the head due would otherwise publish two versions for one renewal.
        async with self._refreshing:
            now = self._clock()
            head = await asyncio.to_thread(self._store.revocations.revocation_head)
            if self._needs_resign(head, now):
                head = await asyncio.to_thread(
                    self._store.revocations.publish_revocation_list,
                    sign=self._sign_list,
                    ttl=self.ttl,
                    at=now,
                )
                _log.info("published revocation list version %d", head.version)
        assert head is not None
        await self._advance(head)
        return head

    async def _advance(self, head: RevocationHead) -> None:
        async with self._changed:
            if self._head is None or head.version > self._head.version:
                self._head = head
                self._changed.notify_all()

    async def watch(self, known_version: int) -> AsyncIterator[RevocationHead]:
        """The head if newer than ``known_version``, then every newer head as it is made,
        until :meth:`close`. Re-signed heads (same entries, new version) come too: they are
        what keeps a follower's list from expiring."""
        last = known_version
        while not self._closing:
            async with self._changed:
                await self._changed.wait_for(functools.partial(self._newer_than, last))
                head = self._head
            if self._closing or head is None:
                return
            last = head.version
            yield head

    def _newer_than(self, version: int) -> bool:
        """Wake a watcher: closing, or a head newer than ``version`` exists."""
        return self._closing or (self._head is not None and self._head.version > version)

    # ------------------------------------------------------------------ revoking

    async def revoke_named(
        self,
        *,
        certificate_id: str = "",
        contract_digest: str = "",
        checker_digest: str = "",
        reason: str,
        actor: str,
    ) -> RevocationHead:
        """Revoke what exactly one of ``certificate_id``, ``contract_digest`` and
        ``checker_digest`` names (the RPC's form); see :meth:`revoke` and :meth:`revoke_scope`.

        Raises:
            ValidationError: none or more than one named, or as :meth:`revoke`.
            NotFound: as :meth:`revoke` and :meth:`revoke_scope`.
        """
        targets = [
            (kind, value)
            for kind, value in (
                (CERTIFICATE, certificate_id),
                (CONTRACT, contract_digest),
                (CHECKER, checker_digest),
            )
            if value
        ]
        if len(targets) != 1:
            raise ValidationError(
                "name exactly one of certificate_id, reward_contract_digest and "
                "checker_configuration_digest"
            )
        kind, value = targets[0]
        if kind == CERTIFICATE:
            return await self.revoke(value, reason, actor)
        return await self.revoke_scope(kind, value, reason, actor)

    async def revoke_scope(self, kind: str, digest: str, reason: str, actor: str) -> RevocationHead:
        """Revoke every certificate of a contract (``kind`` ``"contract"``) or of a checker
        configuration (``"checker"``), issued before or after, in one entry (R-C-13), for
        ``actor`` (audited), and publish the next signed list to watchers.

        Raises:
            ValidationError: malformed digest or actor, or no reason.
            NotFound: an unregistered contract.
        """
        return await self._revoked(
            functools.partial(self._store.revocations.revoke_scope, kind, digest, reason, actor),
            ACTION_REVOKE_CONTRACT if kind == CONTRACT else ACTION_REVOKE_CHECKER,
            f"every certificate of {kind} {digest}",
        )

    async def revoke(self, certificate_id: str, reason: str, actor: str) -> RevocationHead:
        """Revoke ``certificate_id`` for ``actor`` (a role name, audited) and publish the next
        signed list to watchers; the head that holds the revocation. The one revocation path of
        the RPC and the operator console.

        Raises:
            ValidationError: malformed id or actor, or no reason.
            NotFound: no such certificate.
        """
        return await self._revoked(
            functools.partial(self._store.revocations.revoke, certificate_id, reason, actor),
            ACTION_REVOKE_CERTIFICATE,
            f"certificate {certificate_id}",
        )

    async def _revoked(
        self,
        revoke: Callable[..., tuple[RevocationHead, bool]],
        action: str,
        what: str,
    ) -> RevocationHead:
        """Run one of the store's revocations (``revoke``, given everything but the signer, the
        list's lifetime and the time), count ``action``, say what a new list revoked, and
        publish the head to watchers."""
        head, created = await asyncio.to_thread(
            revoke, sign=self._sign_list, ttl=self.ttl, at=self._clock()
        )
        self._audited(action)
        if created:
            _log.info("revoked %s; revocation list version %d", what, head.version)
        await self._advance(head)
        return head
