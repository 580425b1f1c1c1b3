"""The worker's link to the control plane (R-C-4, R-C-5): registration, certificate, revocations,
and forwarding of privacy-safe receipts through the durable outbox.

Nothing here sits on the scoring path. Scoring writes each receipt and its outbox row in one
transaction and answers; a background task forwards the outbox and deletes what control has
recorded (control is idempotent by receipt id, so a resend after a crash is harmless and every
receipt arrives exactly once). A second task follows the signed revocation list; while the
worker holds no fresh list it cannot vouch for its certificate, so receipts are not certified.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

import grpc

from rewardseal.certificates import satisfies
from rewardseal.contract import certificate_digest
from rewardseal.errors import RewardSealError, SignatureError, ValidationError
from rewardseal.revocation import RevocationFollower
from rewardseal.rpc_status import from_rpc_error
from rewardseal.signing import SigningKey, TrustSet, verify_certificate
from rewardseal.v1 import control_service_pb2 as cpb
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.control_service_pb2_grpc import ControlPlaneServiceStub
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal.validation import validate_certificate
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.engine import Revocation, Scorer, utc_now
from rewardseal_worker.store import WorkerStore

_log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 10.0
FORWARD_BATCH = 256
MAX_BACKOFF_SECONDS = 30.0


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (exponential, capped)."""
    return float(min(0.25 * 2 ** min(attempt, 10), MAX_BACKOFF_SECONDS))


class ControlLink:
    """Keeps one worker in step with the control plane, without ever blocking scoring."""

    def __init__(
        self,
        *,
        target: str,
        token: str,
        key: SigningKey,
        bundle: ContractBundle,
        store: WorkerStore,
        scorer: Scorer,
        admin_token: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        forward_interval: float = 0.5,
    ) -> None:
        self._channel = grpc.aio.insecure_channel(target)
        self._stub = ControlPlaneServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._admin_metadata = (
            (("authorization", f"Bearer {admin_token}"),) if admin_token else None
        )
        self._key = key
        self._bundle = bundle
        self._store = store
        self._scorer = scorer
        self._clock = clock
        self._forward_interval = forward_interval
        self._follower: RevocationFollower | None = None
        self._distrusted = False
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.registered = asyncio.Event()
        self.forwarded = 0

    # --- What scoring asks (R-C-4) ---

    def revocation(self, certificate_id: str) -> Revocation:
        """Revoked when a verified list says so; unknown while no fresh, trusted list is held."""
        follower = self._follower
        if follower is None:
            return Revocation.UNKNOWN
        if follower.is_revoked(certificate_id):
            return Revocation.REVOKED
        if self._distrusted or not follower.fresh(self._clock()):
            return Revocation.UNKNOWN
        return Revocation.NOT_REVOKED

    # --- Life cycle ---

    def start(self) -> None:
        """Start the background tasks; returns at once (control may well be down)."""
        self._loop = asyncio.get_running_loop()
        self._spawn(self._bootstrap())
        self._spawn(self._forward_forever())

    def notify(self) -> None:
        """Tell the forwarder that new receipts wait in the outbox (safe from any thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        """Cancel the background tasks and close the channel."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channel.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, method: Any, request: Any, *, admin: bool = False) -> Any:
        metadata = self._admin_metadata if admin else self._metadata
        try:
            return await method(request, metadata=metadata, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    # --- Registration, certificate, revocations ---

    async def _bootstrap(self) -> None:
        attempt = 0
        while True:
            try:
                await self._register()
                trust = await self._organization_trust()
                await self._adopt_certificate(trust)
                self._follower = RevocationFollower(trust)
                self.registered.set()
                break
            except RewardSealError as exc:
                _log.warning("control plane not ready (%s: %s); retrying", exc.reason, exc.message)
                await asyncio.sleep(backoff(attempt))
                attempt += 1
        await self._follow_revocations()

    async def _register(self) -> None:
        bundle = self._bundle
        await self._call(
            self._stub.RegisterContract,
            cpb.RegisterContractRequest(
                contract=bundle.contract, reward_contract_digest=bundle.contract_digest
            ),
        )
        if self._admin_metadata is None:
            return  # an operator registers the worker key (`rewardseal-control keys ...`)
        key = IssuerKey(
            key_id=self._key.key_id,
            public_key=self._key.public_key,
            role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
            display_name=f"worker for {bundle.contract.contract_id}",
        )
        await self._call(
            self._stub.RegisterIssuerKey,
            cpb.RegisterIssuerKeyRequest(key=key, reason="worker start"),
            admin=True,
        )

    async def _organization_trust(self) -> TrustSet:
        keys: list[bytes] = []
        token = ""
        while True:
            page = await self._call(
                self._stub.ListIssuerKeys,
                cpb.ListIssuerKeysRequest(
                    role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION, page_token=token
                ),
            )
            keys.extend(k.public_key for k in page.keys if not k.retired)
            token = page.next_page_token
            if not token:
                return TrustSet(keys)

    async def _adopt_certificate(self, trust: TrustSet) -> None:
        """Score under the newest control-issued certificate that verifies and satisfies."""
        page = await self._call(
            self._stub.ListCertificates,
            cpb.ListCertificatesRequest(reward_contract_digest=self._bundle.contract_digest),
        )
        candidates = sorted(
            page.certificates, key=lambda c: c.issued_at_policy_update, reverse=True
        )
        for certificate in candidates:
            if self._acceptable(certificate, trust):
                self._scorer.use_certificate(certificate, certificate_digest(certificate))
                _log.info("scoring under certificate %s", certificate.certificate_id)
                return

    def _acceptable(self, certificate: RewardCertificate, trust: TrustSet) -> bool:
        try:
            validate_certificate(certificate)
            verify_certificate(certificate, trust)
        except (ValidationError, SignatureError) as exc:
            _log.warning("ignoring certificate %s: %s", certificate.certificate_id, exc)
            return False
        return certificate.reward_contract_digest == self._bundle.contract_digest and satisfies(
            certificate, self._bundle.contract.certificate_policy
        )

    async def _follow_revocations(self) -> None:
        attempt = 0
        while True:
            follower = self._follower
            assert follower is not None
            try:
                call = self._stub.WatchRevocations(
                    cpb.WatchRevocationsRequest(known_version=follower.version),
                    metadata=self._metadata,
                )
                async for message in call:
                    self._accept(message.revocation_list)
                    attempt = 0
            except grpc.RpcError as exc:
                _log.warning("revocation stream ended (%s); reconnecting", exc.code())
            await asyncio.sleep(backoff(attempt))
            attempt += 1

    def _accept(self, envelope: Any) -> None:
        follower = self._follower
        assert follower is not None
        try:
            accepted = follower.accept(envelope, self._clock())
        except (SignatureError, ValidationError) as exc:
            # A rolled-back, frozen or forged list: refuse it, and vouch for nothing until a
            # fresh one arrives (R-C-4).
            self._distrusted = True
            _log.warning("refused a revocation list: %s", exc.message)
            return
        self._distrusted = False
        _log.info("revocation list version %d accepted", accepted.version)

    # --- Receipt forwarding (R-C-5) ---

    async def _forward_forever(self) -> None:
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
                    await asyncio.wait_for(self._wake.wait(), self._forward_interval)

    async def forward_once(self) -> int:
        """Send one batch of due outbox rows; return how many control recorded."""
        due = await asyncio.to_thread(self._store.outbox_due, FORWARD_BATCH, self._clock())
        if not due:
            return 0
        request = cpb.RecordReceiptsRequest()
        for item in due:
            request.receipts.add().ParseFromString(item.envelope)
        try:
            answer = await self._call(self._stub.RecordReceipts, request)
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
        for item, result in zip(due, answer.results, strict=True):
            if result.recorded:
                done.append(item.receipt_id)
                continue
            # A refusal is not a transport problem: retry it much later, and say why.
            reason = result.error.reason or "refused"
            _log.warning("control refused receipt %s: %s", item.receipt_id, reason)
            await asyncio.to_thread(
                self._store.outbox_later,
                [item.receipt_id],
                error=f"control refused: {reason}",
                now=self._clock(),
                delay_seconds=backoff(item.attempts + 3),
            )
        await asyncio.to_thread(self._store.outbox_done, done)
        self.forwarded += len(done)
        return len(done)
