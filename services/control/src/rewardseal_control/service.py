"""The gRPC face of the control plane: ``ControlPlaneService`` over one ``ControlStore``.

docs/spec.md §9 (R-C-1..5), R-MSG-5, R-CAL-4; errors per section 8. Handlers validate requests,
apply the issuing and receipt rules, call the store (in a worker thread: the store is
synchronous and must not stall the event loop), and answer. Every domain error reaches the
wire through ``rewardseal.rpc.status`` (one mapping). Roles are enforced by the auth
interceptor (``server.py``); the servicer only asks it which role to write into the audit log.

The servicer also keeps the signed revocation list alive: it publishes the first list on start,
re-signs the head under a new version when half its lifetime has passed (so a follower never
holds a frozen list while the control plane is up), and pushes every new head to watchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc

from rewardseal.core.calibration import delta_from_summary
from rewardseal.core.clock import utc_now
from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import (
    CertificationRefused,
    ContractMismatch,
    NotFound,
    PermissionDenied,
    RewardSealError,
    ValidationError,
)
from rewardseal.core.issuing import check_summary_for, issue_certificate
from rewardseal.core.key_possession import verify_registration
from rewardseal.core.receipts import OpenedReceipt, open_receipt
from rewardseal.core.revocation import CHECKER, CONTRACT, sign_revocation_list
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.core.validation import (
    check_policy_update_field,
    validate_calibration_summary,
    validate_contract,
    validate_digest,
    validate_id,
    validate_key_id,
)
from rewardseal.rpc.status import maps_errors, to_episode_error
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1 import control_service_pb2_grpc as pb_grpc
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, IssuerKeyRole
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import (
    ControlStore,
    ReceiptFilter,
    RecordResult,
    RevocationHead,
)
from rewardseal_control.store.audit_log import (
    ACTION_ACCEPT_CERTIFICATE,
    ACTION_ISSUE_CERTIFICATE,
    ACTION_REGISTER_KEY,
    ACTION_RETIRE_KEY,
    ACTION_REVOKE_CERTIFICATE,
    ACTION_REVOKE_CHECKER,
    ACTION_REVOKE_CONTRACT,
)
from rewardseal_control.store.key_bindings import (
    ACTION_APPROVE_KEY,
    ACTION_CREATE_ENROLLMENT,
    ACTION_UNBIND_KEY,
    DEFAULT_ENROLLMENT_TTL,
    MAX_ENROLLMENT_TTL,
)

__all__ = [
    "ADMIN_ROLE",
    "MAX_RECEIPT_BATCH",
    "TRAINER_ROLE",
    "WORKER_ROLE",
    "ControlPlaneServicer",
]

_log = logging.getLogger(__name__)

ADMIN_ROLE = "admin"
"""The role of the admin token: keys, issuing and revocation."""
TRAINER_ROLE = "trainer"
"""The role of the client token that trainers present."""
WORKER_ROLE = "worker"
"""The role of the worker token: register its contract and its own WORKER key (proving it holds
it), forward receipts, read certificates, keys and revocations. Never issue, revoke, retire,
admit or bind a key, or add an ORGANIZATION key."""
UNKNOWN_ACTOR = "unknown"

MAX_RECEIPT_BATCH = 1024
"""The most receipts one RecordReceipts call may carry."""
DELTA_TOLERANCE = 1e-12
"""How far a stated delta may sit from ``1 - confidence`` (float noise, not a second opinion)."""
MAX_REFRESH_INTERVAL = timedelta(seconds=60)

Context = grpc.aio.ServicerContext[Any, Any]
Clock = Callable[[], datetime]


def _enum_name(enum: Any, value: int) -> str:
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


class ControlPlaneServicer(pb_grpc.ControlPlaneServiceServicer):
    """Implements every RPC of ``ControlPlaneService``.

    ``key`` is the organization key this control plane signs certificates and revocation lists
    with; it must be registered (role ORGANIZATION) for IssueCertificate to succeed. Call
    :meth:`start` before serving and :meth:`close` when stopping (``server.py`` does both).
    """

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        *,
        revocation_ttl: timedelta = timedelta(hours=24),
        clock: Clock = utc_now,
        refresh_interval: timedelta | None = None,
    ) -> None:
        """``refresh_interval``: how often the head is re-read (other replicas may publish)
        and re-signed when half its lifetime has passed; default ``min(ttl / 8, 60 s)``."""
        if revocation_ttl <= timedelta(0):
            raise ValueError("revocation_ttl must be positive")
        self.store = store
        self.key = key
        self.revocation_ttl = revocation_ttl
        self.clock = clock
        self.refresh_interval = refresh_interval or min(revocation_ttl / 8, MAX_REFRESH_INTERVAL)
        self.role_for: Callable[[str], str | None] | None = None
        """Set by ``start_control_server``: the auth interceptor's token -> role lookup."""
        self.on_recorded: Callable[[Sequence[OpenedReceipt]], None] | None = None
        """Told the receipts each RecordReceipts call stored now (the metrics count them)."""
        self.on_admin_action: Callable[[str], None] | None = None
        """Told the audit-log action of each admin action done (the metrics count them)."""
        self._head: RevocationHead | None = None
        self._changed = asyncio.Condition()
        self._refreshing = asyncio.Lock()
        self._closing = False
        self._refresher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Make sure a fresh signed revocation list exists, then keep it fresh."""
        await self.refresh_revocation_head()
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_loop(), name="revocation-refresh")

    async def close(self) -> None:
        """Stop the refresher and end every watch stream."""
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
                await self.refresh_revocation_head()
            except RewardSealError as exc:
                # The database may be down for a while; followers keep their list until it
                # expires, and the next round tries again.
                _log.warning("could not refresh the revocation list: %s", exc.message)
            except Exception:
                # Never let one bug end the loop: a dead refresher means frozen lists tomorrow.
                _log.exception("unexpected error while refreshing the revocation list")

    # ------------------------------------------------------------------ revocation head

    def _sign_list(self, revocation_list: RevocationList) -> SignedEnvelope:
        """The store's signer: name our key as issuer and sign the list's exact bytes."""
        revocation_list.issuer_key_id = self.key.key_id
        return sign_revocation_list(revocation_list, self.key)

    def _needs_resign(self, head: RevocationHead | None, now: datetime) -> bool:
        if head is None:
            return True
        # Re-sign at half-life: a follower polling or watching always holds a list with at
        # least half its lifetime left while this control plane is up.
        if now >= head.issued_at + self.revocation_ttl / 2:
            return True
        # Also when the organization key changed (a follower trusts the new key only), or the
        # head was made with a longer lifetime than now configured.
        issuer = RevocationList.FromString(head.envelope.payload).issuer_key_id
        return issuer != self.key.key_id or head.expires_at > now + self.revocation_ttl

    async def refresh_revocation_head(self) -> RevocationHead:
        """Read the stored head, re-sign it if due, tell watchers about anything newer."""
        # One refresh at a time in this process: the refresher and a GetRevocationList that
        # both find the head due would otherwise publish two versions for one renewal.
        async with self._refreshing:
            now = self.clock()
            head = await asyncio.to_thread(self.store.revocations.revocation_head)
            if self._needs_resign(head, now):
                head = await asyncio.to_thread(
                    self.store.revocations.publish_revocation_list,
                    sign=self._sign_list,
                    ttl=self.revocation_ttl,
                    at=now,
                )
                _log.info("published revocation list version %d", head.version)
        assert head is not None
        await self._advance(head)
        return head

    @property
    def revocation_head(self) -> RevocationHead | None:
        """The signed revocation list this servicer serves now (None before :meth:`start`)."""
        return self._head

    def _audited(self, action: str) -> None:
        if self.on_admin_action is not None:
            self.on_admin_action(action)

    async def _advance(self, head: RevocationHead) -> None:
        async with self._changed:
            if self._head is None or head.version > self._head.version:
                self._head = head
                self._changed.notify_all()

    # ------------------------------------------------------------------ helpers

    def _actor(self, context: Context) -> str:
        """The caller's role for the audit log (never the token itself)."""
        metadata = context.invocation_metadata() or ()
        header = next((str(value) for key, value in metadata if key == "authorization"), "")
        role = self.role_for(header) if self.role_for is not None else None
        return role or UNKNOWN_ACTOR

    # ------------------------------------------------------------------ contracts

    @maps_errors
    async def RegisterContract(  # noqa: N802
        self, request: pb.RegisterContractRequest, context: Context
    ) -> pb.RegisterContractResponse:
        if not request.HasField("contract"):
            raise ValidationError("contract is required")
        if not request.reward_contract_digest:
            # The caller states what it believes it registers; the server recomputes (R-C-1).
            raise ValidationError("reward_contract_digest is required")
        validate_digest(request.reward_contract_digest, "reward_contract_digest")
        validate_contract(request.contract)
        digest = contract_digest(request.contract)
        if digest != request.reward_contract_digest:
            raise ContractMismatch(
                f"reward_contract_digest {request.reward_contract_digest} does not match the "
                f"contract: the server computes {digest}",
                metadata={"reward_contract_digest": digest},
            )
        stored_digest, created = await asyncio.to_thread(
            self.store.contracts.register_contract,
            request.contract,
            request.reward_contract_digest,
            at=self.clock(),
        )
        return pb.RegisterContractResponse(reward_contract_digest=stored_digest, created=created)

    @maps_errors
    async def GetContract(  # noqa: N802
        self, request: pb.GetContractRequest, context: Context
    ) -> pb.GetContractResponse:
        registered = await asyncio.to_thread(
            self.store.contracts.get_contract, request.reward_contract_digest
        )
        return pb.GetContractResponse(contract=registered)

    @maps_errors
    async def ListContracts(  # noqa: N802
        self, request: pb.ListContractsRequest, context: Context
    ) -> pb.ListContractsResponse:
        page = await asyncio.to_thread(
            self.store.contracts.list_contracts, request.page_size, request.page_token
        )
        return pb.ListContractsResponse(contracts=page.items, next_page_token=page.next_page_token)

    # ------------------------------------------------------------------ issuer keys

    @maps_errors
    async def RegisterIssuerKey(  # noqa: N802
        self, request: pb.RegisterIssuerKeyRequest, context: Context
    ) -> pb.RegisterIssuerKeyResponse:
        if not request.HasField("key"):
            raise ValidationError("key is required")
        actor = self._actor(context)
        admin = actor == ADMIN_ROLE
        # The interceptor lets the worker role in; only here is the key's role visible. A worker
        # credential that could add an ORGANIZATION key could make control trust any signer, so
        # anything but the admin (fail closed, also for an unknown caller) adds WORKER keys only.
        if not admin and request.key.role != IssuerKeyRole.ISSUER_KEY_ROLE_WORKER:
            raise PermissionDenied(
                f"the {actor} credential registers WORKER keys only, not "
                f"{_enum_name(IssuerKeyRole, request.key.role)}"
            )
        now = self.clock()
        # Proof of possession (R-C-10): a shared worker credential registers only a key its
        # caller holds. The admin may register a public key it was handed.
        if not admin or request.HasField("possession"):
            verify_registration(request, now)
        contracts = list(request.reward_contract_digests)
        # Contracts are bound at once from the admin; from anyone else only through an
        # enrollment credential (which then checks them against what it names).
        bind = contracts if admin or request.enrollment_credential else []
        key, created = await asyncio.to_thread(
            self.store.keys.register_issuer_key,
            request.key,
            actor,
            request.reason,
            at=now,
            bind=bind,
            enrollment_credential=request.enrollment_credential,
            bundle_certificate=(
                request.bundle_certificate if request.HasField("bundle_certificate") else None
            ),
        )
        self._audited(ACTION_REGISTER_KEY)
        if created:
            # One line per new key (a repeat is a no-op and says nothing): who, what, which.
            _log.info(
                "registered %s key %s (by the %s credential)",
                _enum_name(IssuerKeyRole, key.role).removeprefix("ISSUER_KEY_ROLE_"),
                key.key_id,
                actor,
            )
        admission = await self._admission(key)
        if key.role == IssuerKeyRole.ISSUER_KEY_ROLE_WORKER:
            waiting = sorted(set(contracts) - set(admission.reward_contract_digests))
            if waiting and created:
                _log.info(
                    "worker key %s waits for an admin to admit it: rewardseal-control keys "
                    "approve %s %s",
                    key.key_id,
                    key.key_id,
                    " ".join(f"--contract {digest}" for digest in waiting),
                )
        return pb.RegisterIssuerKeyResponse(key=key, admission=admission)

    async def _admission(self, key: IssuerKey) -> pb.KeyAdmission:
        admission = await asyncio.to_thread(self.store.bindings.admission, key.key_id)
        return pb.KeyAdmission(
            admitted=admission.admitted, reward_contract_digests=admission.contract_digests
        )

    @maps_errors
    async def ApproveIssuerKey(  # noqa: N802
        self, request: pb.ApproveIssuerKeyRequest, context: Context
    ) -> pb.ApproveIssuerKeyResponse:
        _, acceptance = await asyncio.to_thread(
            self.store.bindings.approve,
            request.key_id,
            list(request.reward_contract_digests),
            self._actor(context),
            request.reason,
            accept_bundle_certificate=request.accept_bundle_certificate,
            at=self.clock(),
        )
        self._audited(ACTION_APPROVE_KEY)
        if acceptance.accepted:
            self._audited(ACTION_ACCEPT_CERTIFICATE)
        key = await asyncio.to_thread(self.store.keys.get_issuer_key, request.key_id)
        admission = await self._admission(key)
        _log.info(
            "admitted worker key %s for %s%s",
            key.key_id,
            ", ".join(admission.reward_contract_digests),
            f"; accepted its bundle certificate {', '.join(acceptance.accepted)} (listed, "
            "revocable like any certificate)"
            if acceptance.accepted
            else "",
        )
        return pb.ApproveIssuerKeyResponse(
            key=key, admission=admission, accepted_certificate_ids=acceptance.accepted
        )

    @maps_errors
    async def UnbindIssuerKey(  # noqa: N802
        self, request: pb.UnbindIssuerKeyRequest, context: Context
    ) -> pb.UnbindIssuerKeyResponse:
        await asyncio.to_thread(
            self.store.bindings.unbind,
            request.key_id,
            list(request.reward_contract_digests),
            self._actor(context),
            request.reason,
            at=self.clock(),
        )
        self._audited(ACTION_UNBIND_KEY)
        key = await asyncio.to_thread(self.store.keys.get_issuer_key, request.key_id)
        _log.info(
            "unbound worker key %s from %s",
            key.key_id,
            ", ".join(sorted(set(request.reward_contract_digests))),
        )
        return pb.UnbindIssuerKeyResponse(key=key, admission=await self._admission(key))

    @maps_errors
    async def CreateEnrollment(  # noqa: N802
        self, request: pb.CreateEnrollmentRequest, context: Context
    ) -> pb.CreateEnrollmentResponse:
        if request.ttl_seconds < 0:
            raise ValidationError("ttl_seconds must not be negative (0: one day)")
        ttl = (
            timedelta(seconds=request.ttl_seconds)
            if request.ttl_seconds
            else DEFAULT_ENROLLMENT_TTL
        )
        if ttl > MAX_ENROLLMENT_TTL:
            raise ValidationError("ttl_seconds must be at most 365 days")
        enrollment = await asyncio.to_thread(
            self.store.bindings.create_enrollment,
            list(request.reward_contract_digests),
            self._actor(context),
            request.reason,
            ttl=ttl,
            any_contract=request.any_contract,
            accept_bundle_certificate=request.accept_bundle_certificate,
            at=self.clock(),
        )
        self._audited(ACTION_CREATE_ENROLLMENT)
        # Never the credential itself: it is answered once and kept nowhere but as a hash.
        _log.info(
            "created enrollment %s for %s (expires %s%s)",
            enrollment.enrollment_id,
            ", ".join(enrollment.contract_digests) or "the contracts the worker names",
            enrollment.expires_at.isoformat(),
            "; accepts the key's bundle certificate"
            if enrollment.accepts_bundle_certificate
            else "",
        )
        answer = pb.CreateEnrollmentResponse(
            enrollment_id=enrollment.enrollment_id,
            enrollment_credential=enrollment.credential,
        )
        answer.expires_at.FromDatetime(enrollment.expires_at)
        return answer

    @maps_errors
    async def ListIssuerKeys(  # noqa: N802
        self, request: pb.ListIssuerKeysRequest, context: Context
    ) -> pb.ListIssuerKeysResponse:
        page = await asyncio.to_thread(
            self.store.keys.list_issuer_keys, request.role, request.page_size, request.page_token
        )
        return pb.ListIssuerKeysResponse(keys=page.items, next_page_token=page.next_page_token)

    @maps_errors
    async def RetireIssuerKey(  # noqa: N802
        self, request: pb.RetireIssuerKeyRequest, context: Context
    ) -> pb.RetireIssuerKeyResponse:
        key = await asyncio.to_thread(
            self.store.keys.retire_issuer_key,
            request.key_id,
            self._actor(context),
            request.reason,
            at=self.clock(),
        )
        self._audited(ACTION_RETIRE_KEY)
        _log.info("retired issuer key %s", key.key_id)
        if key.key_id == self.key.key_id:
            _log.warning(
                "the control plane's own organization key %s is retired: it can no longer issue "
                "certificates; revocation lists stay signed by it until the key file is replaced",
                key.key_id,
            )
        return pb.RetireIssuerKeyResponse(key=key)

    # ------------------------------------------------------------------ certificates

    @maps_errors
    async def IssueCertificate(  # noqa: N802
        self, request: pb.IssueCertificateRequest, context: Context
    ) -> pb.IssueCertificateResponse:
        now = self.clock()
        certificate = await self._build_certificate(request, now)
        revoked = await asyncio.to_thread(
            self.store.revocations.revoked_scope,
            certificate.reward_contract_digest,
            certificate.checker_configuration_digest,
        )
        if revoked is not None:
            kind, digest = revoked
            # It would be revoked at birth: say so rather than issue it (R-C-13).
            raise CertificationRefused(
                f"every certificate of {kind} {digest} is revoked; certify a new contract "
                "digest or a new checker configuration",
                metadata={"rule": "R-C-13", "revoked": kind, "digest": digest},
            )
        stored, created = await asyncio.to_thread(
            self.store.certificates.record_certificate,
            certificate,
            self._actor(context),
            request.reason,
            at=now,
        )
        self._audited(ACTION_ISSUE_CERTIFICATE)
        if created:
            _log.info(
                "issued certificate %s for contract %s (epsilon %.6g, from policy update %d "
                "for %d updates)",
                stored.certificate.certificate_id,
                stored.certificate.reward_contract_digest,
                stored.certificate.epsilon,
                stored.certificate.issued_at_policy_update,
                stored.certificate.expiry_policy_updates,
            )
        return pb.IssueCertificateResponse(
            certificate=stored.certificate, certificate_digest=stored.digest
        )

    async def _build_certificate(
        self, request: pb.IssueCertificateRequest, now: datetime
    ) -> RewardCertificate:
        """Apply every issuing rule (R-C-3, R-MSG-5, R-CAL-4) and sign; refuse on the first
        broken one."""
        digest = validate_digest(request.reward_contract_digest, "reward_contract_digest")
        if not request.HasField("calibration"):
            raise ValidationError("calibration (the calibration summary) is required")
        summary = request.calibration
        validate_calibration_summary(summary)
        scope = request.calibration_scope
        issuer = request.issuer
        if scope not in (
            CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
            CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
        ):
            raise ValidationError("calibration_scope must be SYNTHETIC or PRODUCTION")
        if issuer not in (
            CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
            CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
        ):
            raise ValidationError("issuer must be SELF_SIGNED or ORGANIZATION")
        check_policy_update_field(request.issued_at_policy_update, "issued_at_policy_update")
        certificate_id = request.certificate_id or f"cert.{secrets.token_hex(8)}"
        validate_id(certificate_id, "certificate_id")
        key_id = request.issuer_key_id or self.key.key_id
        validate_key_id(key_id)

        registered = await asyncio.to_thread(self.store.contracts.get_contract, digest)
        contract = registered.contract
        # R-C-3 and R-MSG-5 before the key: who signs, for what scope, on what data.
        check_summary_for(
            summary,
            contract.certificate_policy,
            contract_digest=digest,
            scope=scope,
            issuer=issuer,
        )
        production = scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
        await self._check_signing_key(key_id, now, production=production)

        # A stated delta must be the summary's own (R-CAL-4); the certificate's is recomputed.
        delta = delta_from_summary(summary)
        if request.delta and not (
            math.isfinite(request.delta) and abs(request.delta - delta) <= DELTA_TOLERANCE
        ):
            raise ValidationError(
                f"delta {request.delta!r} does not match the summary's confidence "
                f"{summary.confidence!r} (delta is 1 - confidence = {delta!r})"
            )
        return issue_certificate(
            summary,
            contract,
            self.key,
            contract_digest=digest,
            certificate_id=certificate_id,
            issued_at=now,
            scope=scope,
            issuer=issuer,
            issued_at_policy_update=request.issued_at_policy_update,
            expiry_policy_updates=request.expiry_policy_updates,
        )

    async def _check_signing_key(self, key_id: str, now: datetime, *, production: bool) -> None:
        """The named key must be this control plane's own key, registered as an active
        ORGANIZATION key: a retired or unregistered key issues nothing."""
        organization = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
        active = await asyncio.to_thread(self.store.keys.active_key, key_id, organization, now)
        if active is None:
            state = await self._key_state(key_id, now)
            needs = (
                "PRODUCTION scope needs an ORGANIZATION issuer whose key is registered in the "
                "control plane's issuer key registry; "
                if production
                else ""
            )
            raise CertificationRefused(
                f"{needs}issuer key {key_id} {state}",
                metadata={"rule": "R-MSG-5", "issuer_key_id": key_id},
            )
        if key_id != self.key.key_id:
            raise CertificationRefused(
                f"issuer key {key_id} is registered, but this control plane signs only with its "
                f"own organization key {self.key.key_id}",
                metadata={"issuer_key_id": key_id},
            )

    async def _key_state(self, key_id: str, now: datetime) -> str:
        """Why ``key_id`` is not an active organization key, as the end of a sentence."""
        try:
            key: IssuerKey = await asyncio.to_thread(self.store.keys.get_issuer_key, key_id)
        except NotFound:
            return "is not registered"
        if key.retired:
            return "is retired and cannot issue"
        if key.role != IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION:
            return f"is registered as {_enum_name(IssuerKeyRole, key.role)}, not ORGANIZATION"
        return "is outside its validity window"

    @maps_errors
    async def GetCertificate(  # noqa: N802
        self, request: pb.GetCertificateRequest, context: Context
    ) -> pb.GetCertificateResponse:
        stored = await asyncio.to_thread(
            self.store.certificates.get_certificate, request.certificate_id
        )
        return pb.GetCertificateResponse(
            certificate=stored.certificate,
            certificate_digest=stored.digest,
            revoked=stored.revoked,
        )

    @maps_errors
    async def ListCertificates(  # noqa: N802
        self, request: pb.ListCertificatesRequest, context: Context
    ) -> pb.ListCertificatesResponse:
        page = await asyncio.to_thread(
            self.store.certificates.list_certificates,
            request.reward_contract_digest or None,
            request.page_size,
            request.page_token,
        )
        return pb.ListCertificatesResponse(
            certificates=[stored.certificate for stored in page.items],
            next_page_token=page.next_page_token,
        )

    # ------------------------------------------------------------------ revocation

    @maps_errors
    async def RevokeCertificate(  # noqa: N802
        self, request: pb.RevokeCertificateRequest, context: Context
    ) -> pb.RevokeCertificateResponse:
        targets = [
            (kind, value)
            for kind, value in (
                ("certificate", request.certificate_id),
                (CONTRACT, request.reward_contract_digest),
                (CHECKER, request.checker_configuration_digest),
            )
            if value
        ]
        if len(targets) != 1:
            raise ValidationError(
                "name exactly one of certificate_id, reward_contract_digest and "
                "checker_configuration_digest"
            )
        kind, value = targets[0]
        actor = self._actor(context)
        if kind == "certificate":
            head = await self.revoke(value, request.reason, actor)
        else:
            head = await self.revoke_scope(kind, value, request.reason, actor)
        return pb.RevokeCertificateResponse(revocation_list=head.envelope, version=head.version)

    async def revoke_scope(self, kind: str, digest: str, reason: str, actor: str) -> RevocationHead:
        """Revoke every certificate of a contract (``kind`` ``"contract"``) or of a checker
        configuration (``"checker"``), issued before or after, in one entry (R-C-13), for
        ``actor`` (audited), and publish the next signed list to watchers.

        Raises:
            ValidationError: malformed digest or actor, or no reason.
            NotFound: an unregistered contract.
        """
        return await self._revoked(
            functools.partial(self.store.revocations.revoke_scope, kind, digest, reason, actor),
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
            functools.partial(self.store.revocations.revoke, certificate_id, reason, actor),
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
            revoke, sign=self._sign_list, ttl=self.revocation_ttl, at=self.clock()
        )
        self._audited(action)
        if created:
            _log.info("revoked %s; revocation list version %d", what, head.version)
        await self._advance(head)
        return head

    @maps_errors
    async def GetRevocationList(  # noqa: N802
        self, request: pb.GetRevocationListRequest, context: Context
    ) -> pb.GetRevocationListResponse:
        # Read the store, not the cache: another replica may have published since.
        head = await self.refresh_revocation_head()
        return pb.GetRevocationListResponse(revocation_list=head.envelope)

    async def WatchRevocations(  # noqa: N802
        self, request: pb.WatchRevocationsRequest, context: Context
    ) -> AsyncIterator[pb.WatchRevocationsResponse]:
        """Send the head if newer than ``known_version``, then every newer head as it is made.

        Re-signed heads (same entries, new version) are sent too: they are what keeps a
        follower's list from expiring.
        """
        last = request.known_version
        while not self._closing:
            async with self._changed:
                await self._changed.wait_for(functools.partial(self._newer_than, last))
                head = self._head
            if self._closing or head is None:
                return
            last = head.version
            yield pb.WatchRevocationsResponse(revocation_list=head.envelope)

    def _newer_than(self, version: int) -> bool:
        """Wake a watcher: closing, or a head newer than ``version`` exists."""
        return self._closing or (self._head is not None and self._head.version > version)

    # ------------------------------------------------------------------ receipts

    @maps_errors
    async def RecordReceipts(  # noqa: N802
        self, request: pb.RecordReceiptsRequest, context: Context
    ) -> pb.RecordReceiptsResponse:
        envelopes: Sequence[SignedEnvelope] = request.receipts
        if len(envelopes) > MAX_RECEIPT_BATCH:
            raise ValidationError(f"at most {MAX_RECEIPT_BATCH} receipts per call")
        if not envelopes:
            return pb.RecordReceiptsResponse()
        now = self.clock()
        trust: TrustSet = await asyncio.to_thread(self.store.keys.worker_trust, now)
        results: list[pb.RecordReceiptResult | None] = [None] * len(envelopes)
        verified: list[tuple[int, OpenedReceipt]] = []
        for index, envelope in enumerate(envelopes):
            # Verify over the exact bytes against the registered, active worker keys before
            # anything is parsed or stored (R-C-5); one bad item never fails the batch. The
            # opened receipt goes to the index as it is: this is the one parse and validation.
            try:
                opened = open_receipt(envelope, trust)
            except RewardSealError as exc:
                # No receipt_id: an unverified payload is never parsed, not even for its id.
                results[index] = pb.RecordReceiptResult(error=to_episode_error(exc))
                continue
            verified.append((index, opened))
        if verified:
            stored: list[RecordResult] = await asyncio.to_thread(
                self.store.receipts.record_receipts, [opened for _, opened in verified], at=now
            )
            for (index, _), outcome in zip(verified, stored, strict=True):
                results[index] = _record_result(outcome)
            if self.on_recorded is not None:
                self.on_recorded(
                    [
                        opened
                        for (_, opened), outcome in zip(verified, stored, strict=True)
                        if outcome.recorded and not outcome.duplicate
                    ]
                )
        return pb.RecordReceiptsResponse(results=[r for r in results if r is not None])

    @maps_errors
    async def ListReceipts(  # noqa: N802
        self, request: pb.ListReceiptsRequest, context: Context
    ) -> pb.ListReceiptsResponse:
        filters = ReceiptFilter(
            contract_digest=request.reward_contract_digest or None,
            reward_outcome=request.reward_outcome or None,
            certified=request.certified if request.HasField("certified") else None,
            min_policy_update=(
                request.min_policy_update if request.HasField("min_policy_update") else None
            ),
            max_policy_update=(
                request.max_policy_update if request.HasField("max_policy_update") else None
            ),
        )
        page = await asyncio.to_thread(
            self.store.receipts.list_receipts, filters, request.page_size, request.page_token
        )
        return pb.ListReceiptsResponse(
            receipts=[stored.receipt for stored in page.items],
            next_page_token=page.next_page_token,
        )

    @maps_errors
    async def GetReceiptSummary(  # noqa: N802
        self, request: pb.GetReceiptSummaryRequest, context: Context
    ) -> pb.GetReceiptSummaryResponse:
        summary = await asyncio.to_thread(
            self.store.receipts.receipt_summary, request.reward_contract_digest
        )
        return pb.GetReceiptSummaryResponse(
            reward_contract_digest=summary.contract_digest,
            total=summary.total,
            counts=[
                pb.OutcomeCount(reward_outcome=outcome, count=count)  # type: ignore[arg-type]
                for outcome, count in summary.counts.items()
            ],
            certified_share=summary.certified_share,
            unscored_share=summary.unscored_share,
            highest_policy_update=summary.highest_policy_update,
        )

    # ------------------------------------------------------------------ audit log

    @maps_errors
    async def ListAuditLog(  # noqa: N802
        self, request: pb.ListAuditLogRequest, context: Context
    ) -> pb.ListAuditLogResponse:
        page = await asyncio.to_thread(
            self.store.audit_log.list_entries,
            request.action,
            request.page_size,
            request.page_token,
        )
        entries = []
        for entry in page.items:
            message = pb.AuditLogEntry(
                id=entry.id,
                actor=entry.actor,
                action=entry.action,
                target=entry.target,
                reason=entry.reason,
                details_json=entry.details,
            )
            message.at.FromDatetime(entry.at)
            entries.append(message)
        return pb.ListAuditLogResponse(entries=entries, next_page_token=page.next_page_token)


def _record_result(outcome: RecordResult) -> pb.RecordReceiptResult:
    result = pb.RecordReceiptResult(
        receipt_id=outcome.receipt_id, recorded=outcome.recorded, duplicate=outcome.duplicate
    )
    if outcome.error is not None:
        result.error.CopyFrom(to_episode_error(outcome.error))
    return result
