"""The worker's link to the control plane (R-C-4, R-C-5): registration, certificates,
revocations, and forwarding of privacy-safe receipts through the durable outbox.

Nothing here sits on the scoring path. Scoring writes each receipt and its outbox row in one
transaction and answers; a background task forwards the outbox and deletes what control has
recorded (control is idempotent by receipt id, so a resend after a crash is harmless and every
receipt arrives exactly once). A receipt control refuses for good moves to the dead letter
instead of being resent forever (R-C-12, :mod:`rewardseal_worker.record_refusals`).

Trust is pinned, never asked for. Certificates and revocation lists count only when a pinned
organization key (``--trust-org-key``) signed them; what control's issuer-key registry says is
read for a warning, never for a decision, so a man in the middle or a rogue control plane
cannot make the worker certify under a key of its choosing. The link itself may be TLS or
mutual TLS (``--control-tls-*``); the worker presents control's *worker* credential, which can
neither issue nor revoke.

Certificates follow control while the worker runs. A task polls ``ListCertificates`` (every
page) and another follows the signed revocation list; after either changes what the worker
knows, :meth:`ControlLink.reevaluate` picks the certificate to score under (R-C-9):

* candidates: control's certificates for this contract that validate, verify under a pinned
  key and satisfy the contract's certificate policy; the bundle's own certificate only when
  control's last complete listing holds it (same digest): a linked worker never falls back to
  a certificate control does not list; none that the held revocation list revokes, by id,
  contract or checker configuration (R-C-13);
* one that is current at the contract's highest policy update scored so far (where training
  is now) beats one that is not yet valid or expired there, so a certificate issued for an
  update far ahead never displaces one that certifies today's episodes; among equals the newest
  wins: highest ``issued_at_policy_update``, then ``issued_at``, then ``certificate_id`` (a
  deterministic tie-break);
* a linked worker starts under no certificate and adopts one only once it holds a verified
  revocation list and has read control's listing (so neither a restart nor the start-up
  window certifies under a certificate that was revoked, or that control does not list); a
  revoked certificate in use is dropped for the newest valid one, or for none (receipts then
  uncertified).

The highest revocation-list version accepted is kept in the worker store and seeds the
follower on start, so a restarted worker refuses a list older than one it accepted before.
While the worker holds no fresh, trusted list it cannot vouch for any certificate, so receipts
are not certified (``revocation`` answers UNKNOWN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from rewardseal.core.accepting import CertificateInUse, accept_certificate
from rewardseal.core.certificates import is_current
from rewardseal.core.clock import utc_now
from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import KeyNotAdmitted, RewardSealError, SignatureError, ValidationError
from rewardseal.core.key_possession import sign_registration
from rewardseal.core.revocation import RevocationFollower
from rewardseal.core.signing import SigningKey, TrustSet, key_id_for
from rewardseal.rpc.control_client import AsyncControlClient
from rewardseal.rpc.tls import ClientTls
from rewardseal.v1 import control_service_pb2 as control_pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.engine import Revocation, Scorer
from rewardseal_worker.key_refusals import SIGNATURE_INVALID, KeyRefusals
from rewardseal_worker.record_refusals import Refusal, classify
from rewardseal_worker.settings import ENROLLMENT_ENV
from rewardseal_worker.store import REVOCATION_VERSION, Refused, WorkerStore

_log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 10.0
FORWARD_BATCH = 256
MAX_BACKOFF_SECONDS = 30.0
CERTIFICATE_PAGE_SIZE = 50
"""Certificates asked for per ListCertificates page (control may send fewer)."""
MAX_CERTIFICATE_PAGES = 1000
"""A page-token loop longer than this (certificates or issuer keys) is a broken or hostile
control plane: the client stops reading, warns, and what was read stands."""

CertificateChange = Callable[[CertificateInUse, CertificateInUse, str], None]
"""Told ``(old, new, why)`` whenever the certificate in use changes (banner, ready file)."""


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (exponential, capped)."""
    return float(min(0.25 * 2 ** min(attempt, 10), MAX_BACKOFF_SECONDS))


def newness(certificate: RewardCertificate) -> tuple[int, int, int, str]:
    """The order "newest" follows: policy update issued at, then issue time, then id."""
    return (
        certificate.issued_at_policy_update,
        certificate.issued_at.seconds,
        certificate.issued_at.nanos,
        certificate.certificate_id,
    )


def certificate_name(in_use: CertificateInUse) -> str:
    """The certificate id of ``in_use``, or ``none``, for log lines and banners."""
    return in_use.certificate.certificate_id if in_use.certificate is not None else "none"


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
        trust: TrustSet,
        tls: ClientTls | None = None,
        clock: Callable[[], datetime] = utc_now,
        forward_interval: float = 0.5,
        poll_interval: float = 30.0,
        enrollment: str = "",
    ) -> None:
        """``trust``: the pinned organization keys (never taken from control); ``tls``: TLS or
        mutual TLS for the channel (None: plaintext); ``poll_interval``: seconds between
        certificate polls; ``enrollment``: a one-time enrollment credential from the admin
        (``rewardseal-control keys enroll``), presented at registration (R-C-11).

        Raises:
            ValidationError: ``trust`` holds no key.
        """
        if not trust.key_ids:
            raise ValidationError("a control link needs at least one pinned organization key")
        # No retries in the client: every task below has its own backoff loop.
        self._control = AsyncControlClient(
            target,
            token=token,
            timeout=CALL_TIMEOUT_SECONDS,
            retries=0,
            max_pages=MAX_CERTIFICATE_PAGES,
            tls=tls,
        )
        self._trust = trust
        self._key = key
        self._bundle = bundle
        self._store = store
        self._scorer = scorer
        self._clock = clock
        self._forward_interval = forward_interval
        self._poll_interval = poll_interval
        self._follower: RevocationFollower | None = None
        self._persisted_version = 0
        self._distrusted = False
        self._control_certificates: list[CertificateInUse] = []
        self._listed: frozenset[str] | None = None
        """Digests of every certificate control's last complete listing held (None before the
        first): the bundle's own certificate counts only when it is among them."""
        self._training_update: int | None = None
        """The contract's highest scored policy update when certificates were last chosen."""
        self._ignored: set[str] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._key_refusals = KeyRefusals(self._control, key, self._register)
        self._enrollment = enrollment
        self._told_not_admitted = False
        self.admitted = False
        """Whether control's last answer to registration admitted this key for the contract."""
        self.on_certificate_change: CertificateChange | None = None
        self.registered = asyncio.Event()
        self.forwarded = 0
        self.dead_lettered = 0
        """Receipts this link moved to the dead letter (R-C-12); tests wait on it."""
        self.polls = 0
        """Certificate polls completed (every page read); tests wait on it."""
        # Linked, the bundle's certificate counts only once control lists it (R-C-9): until
        # then (and so during the start-up window) receipts are issued under no certificate.
        # Set directly, not through use_certificate: nothing was in use yet to switch from.
        scorer.in_use = CertificateInUse()

    # --- What scoring asks (R-C-4) ---

    def revocation(self, certificate: RewardCertificate) -> Revocation:
        """Revoked when a verified list says so (by the certificate's id, its contract or its
        checker configuration); unknown while no fresh, trusted list is held."""
        follower = self._follower
        if follower is None:
            return Revocation.UNKNOWN
        if follower.revokes(certificate):
            return Revocation.REVOKED
        if self._distrusted or not follower.fresh(self._clock()):
            return Revocation.UNKNOWN
        return Revocation.NOT_REVOKED

    @property
    def revocation_list(self) -> RevocationList | None:
        """The verified revocation list held now (None before the first; the metrics read it)."""
        follower = self._follower
        return follower.held if follower is not None else None

    # --- Life cycle ---

    def start(self, *, primary: bool = True) -> None:
        """Start the background tasks; returns at once (control may well be down).

        Every process that scores follows certificates and revocations: each needs them in its
        own memory to certify, and their one write (the revocation floor) only ever rises.
        Registration and forwarding the shared outbox run in the ``primary`` process only
        (``serve --processes N``: one of N), so control is not sent every receipt N times.
        """
        self._loop = asyncio.get_running_loop()
        if primary:
            self._spawn(self._register_until_done())
        self._spawn(self._follow_revocations())
        self._spawn(self._poll_certificates())
        if primary:
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
        await self._control.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- Registration ---

    async def _register_until_done(self) -> None:
        attempt = 0
        while True:
            try:
                await self._register()
                break
            except RewardSealError as exc:
                _log.warning(
                    "could not register with control (%s: %s); retrying", exc.reason, exc.message
                )
                await asyncio.sleep(backoff(attempt))
                attempt += 1
        self.registered.set()
        await self._warn_about_pinned_keys()

    async def _register(self) -> None:
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

    # --- Certificates ---

    async def _poll_certificates(self) -> None:
        attempt = 0
        while True:
            try:
                await self.poll_certificates()
                attempt = 0
                delay = self._poll_interval
            except RewardSealError as exc:
                _log.warning("could not read control's certificates (%s); retrying", exc.reason)
                delay = min(backoff(attempt), self._poll_interval)
                attempt += 1
            await asyncio.sleep(delay)

    async def poll_certificates(self) -> None:
        """Read every page of control's certificates for this contract, keep those that verify
        under a pinned key and satisfy the contract (and note whether the bundle's own is
        listed), and choose again."""
        listed = self._control.certificates(
            reward_contract_digest=self._bundle.contract_digest, page_size=CERTIFICATE_PAGE_SIZE
        )
        bundle_digest = self._bundle.certificate_digest
        digests: set[str] = set()
        accepted: list[CertificateInUse] = []
        async for certificate in listed:
            digest = certificate_digest(certificate)
            digests.add(digest)
            if digest == bundle_digest:
                # The bundle's own: loaded and verified at start, never adopted from a listing.
                continue
            if certificate.issuer_key_id not in self._trust.key_ids:
                # Another worker's accepted bundle certificate (R-C-11, self-signed by its key)
                # or any other not under a pinned key: never usable here, and not a fault.
                _log.debug(
                    "skipping certificate %s: not under a pinned key", certificate.certificate_id
                )
                continue
            in_use = self._accept_certificate(certificate)
            if in_use is not None:
                accepted.append(in_use)
        self._control_certificates = accepted
        self._listed = frozenset(digests)
        await self._refresh_training_update()
        self.reevaluate("certificate poll")
        # Counted once the choice is made: a reader waiting for a poll sees its outcome.
        self.polls += 1

    async def _refresh_training_update(self) -> None:
        """Read where training is (the contract's highest scored update) off the event loop."""
        self._training_update = await asyncio.to_thread(
            self._store.highest_policy_update, self._bundle.contract_digest
        )

    def _accept_certificate(self, certificate: RewardCertificate) -> CertificateInUse | None:
        """Valid, for this contract, signed by a pinned key and meeting its policy; else None."""
        try:
            return accept_certificate(
                certificate,
                trust=self._trust,
                contract=self._bundle.contract,
                contract_digest=self._bundle.contract_digest,
            )
        except RewardSealError as exc:
            self._ignore(certificate.certificate_id, exc.message)
            return None

    def _ignore(self, certificate_id: str, why: str) -> None:
        # Once per certificate: a poll every few seconds must not repeat the same warning.
        if certificate_id not in self._ignored:
            self._ignored.add(certificate_id)
            _log.warning("ignoring certificate %s from control: %s", certificate_id, why)

    def reevaluate(self, trigger: str) -> None:
        """Score under the newest certificate that is valid now; tell the world if it changed.

        Nothing is adopted before a verified revocation list is held (R-C-9).
        """
        follower = self._follower
        if follower is None or follower.held is None:
            return
        chosen = self._choose(follower)
        current = self._scorer.in_use
        if chosen.digest == current.digest:
            return
        why = trigger
        if current.certificate is not None and follower.revokes(current.certificate):
            why = f"{certificate_name(current)} is revoked ({trigger})"
        self._scorer.use_certificate(chosen.certificate, chosen.digest)
        _log.info(
            "certificate in use: %s -> %s (%s)",
            certificate_name(current),
            certificate_name(chosen),
            why,
        )
        if self.on_certificate_change is not None:
            self.on_certificate_change(current, chosen, why)

    def _candidates(self) -> list[CertificateInUse]:
        """Control's accepted certificates, and the bundle's own only while control lists it:
        a linked worker's bundle certificate never stands in for one control revoked or
        stopped listing (R-C-9)."""
        candidates = list(self._control_certificates)
        bundle = self._bundle
        if (
            bundle.certificate is not None
            and self._listed is not None
            and bundle.certificate_digest in self._listed
        ):
            candidates.append(CertificateInUse(bundle.certificate, bundle.certificate_digest))
        return candidates

    def _choose(self, follower: RevocationFollower) -> CertificateInUse:
        valid = [
            c
            for c in self._candidates()
            if c.certificate is not None and not follower.revokes(c.certificate)
        ]
        at = self._training_update

        def preference(in_use: CertificateInUse) -> tuple[bool, tuple[int, int, int, str]]:
            assert in_use.certificate is not None
            current = at is None or is_current(in_use.certificate, at)
            return current, newness(in_use.certificate)

        return max(valid, key=preference, default=CertificateInUse())

    # --- Revocations ---

    async def _follow_revocations(self) -> None:
        floor = await self._stored_version()
        self._persisted_version = floor
        self._follower = RevocationFollower(self._trust, floor=floor)
        if floor:
            _log.info("refusing revocation lists older than version %d (seen before)", floor)
        attempt = 0
        while True:
            follower = self._follower
            try:
                stream = self._control.watch_revocations(follower.version)
                async with contextlib.aclosing(stream):
                    async for envelope in stream:
                        await self.accept_revocations(envelope)
                        attempt = 0
            except RewardSealError as exc:
                _log.warning("revocation stream ended (%s); reconnecting", exc.reason)
            await asyncio.sleep(backoff(attempt))
            attempt += 1

    async def _stored_version(self) -> int:
        attempt = 0
        while True:
            try:
                stored = await asyncio.to_thread(self._store.state_value, REVOCATION_VERSION)
                return stored or 0
            except RewardSealError as exc:
                # Never start following without the floor: a rollback would slip through.
                _log.warning("cannot read the revocation floor (%s); retrying", exc.reason)
                await asyncio.sleep(backoff(attempt))
                attempt += 1

    async def accept_revocations(self, envelope: SignedEnvelope) -> None:
        """Take a signed list from control: verify it, keep its version, choose again."""
        if not self._accept(envelope):
            return
        follower = self._follower
        assert follower is not None
        await self._persist_version(follower.version)
        await self._refresh_training_update()
        self.reevaluate(f"revocation list version {follower.version}")

    def _accept(self, envelope: SignedEnvelope) -> bool:
        """Hold ``envelope``'s list if it verifies and moves forward; True when it was held."""
        follower = self._follower
        if follower is None:
            return False
        try:
            accepted = follower.accept(envelope, self._clock())
        except (SignatureError, ValidationError) as exc:
            # A rolled-back, frozen or forged list: refuse it, and vouch for nothing until a
            # fresh one arrives (R-C-4).
            self._distrusted = True
            _log.warning("refused a revocation list: %s", exc.message)
            return False
        self._distrusted = False
        _log.info("revocation list version %d accepted", accepted.version)
        return True

    async def _persist_version(self, version: int) -> None:
        if version <= self._persisted_version:
            return
        try:
            self._persisted_version = await asyncio.to_thread(
                self._store.raise_state_value, REVOCATION_VERSION, version
            )
        except RewardSealError as exc:
            # The follower still refuses older lists while this process runs; the next
            # accepted list tries to store the floor again.
            _log.warning("could not store revocation list version %d (%s)", version, exc.reason)

    # --- Receipt forwarding (R-C-5, R-C-12) ---

    async def _forward_forever(self) -> None:
        # Not before registration: a receipt sent before control knows the contract would be
        # refused not_found, which is permanent (R-C-12), for a cause of our own making.
        await self.registered.wait()
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
                self._key.key_id,
                self._key.key_id,
                self._bundle.contract_digest,
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
