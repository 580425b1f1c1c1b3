"""The gRPC face of the control plane: ``ControlPlaneService`` over one :class:`ControlPlane`.

docs/spec.md §9 (R-C-1..5), R-MSG-5, R-CAL-4; errors per section 8. Handlers only translate:
a request in, a call of the domain layer (:mod:`rewardseal_control.domain`: the issuing, key,
revocation and receipt rules) or a plain read of the store (in a worker thread: the store is
synchronous and must not stall the event loop), an answer out. Every domain error reaches the
wire through ``rewardseal.rpc.status`` (one mapping). Roles are enforced by the auth
interceptor (``server.py``, the table in :mod:`rewardseal_control.roles`), which records the
caller's role once per call; the servicer names that role in the audit log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import grpc

from rewardseal.core.clock import utc_now
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.status import maps_errors, to_episode_error
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1 import control_service_pb2_grpc as pb_grpc
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.domain import ControlPlane
from rewardseal_control.domain.attestation import AttestationOrder
from rewardseal_control.domain.issuing import CertificateOrder
from rewardseal_control.roles import caller_actor
from rewardseal_control.store import ControlStore, ReceiptFilter, RecordResult
from rewardseal_control.store.key_admission import Admission

__all__ = ["ControlPlaneServicer"]

Context = grpc.aio.ServicerContext[Any, Any]


def _admission(admission: Admission) -> pb.KeyAdmission:
    return pb.KeyAdmission(
        admitted=admission.admitted, reward_contract_digests=admission.contract_digests
    )


def _record_result(outcome: RecordResult) -> pb.RecordReceiptResult:
    result = pb.RecordReceiptResult(
        receipt_id=outcome.receipt_id, recorded=outcome.recorded, duplicate=outcome.duplicate
    )
    if outcome.error is not None:
        result.error.CopyFrom(to_episode_error(outcome.error))
    return result


class ControlPlaneServicer(pb_grpc.ControlPlaneServiceServicer):
    """Implements every RPC of ``ControlPlaneService`` over :attr:`plane`.

    The arguments make the :class:`~rewardseal_control.domain.ControlPlane` (see there);
    ``server.py`` starts and closes it with the server.
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
        """``refresh_interval``: how often the revocation head is re-read (other replicas may
        publish) and re-signed when half its lifetime has passed; default
        ``min(ttl / 8, 60 s)``."""
        self.plane = ControlPlane(
            store,
            key,
            revocation_ttl=revocation_ttl,
            clock=clock,
            refresh_interval=refresh_interval,
        )
        self._store = store

    # ------------------------------------------------------------------ contracts

    @maps_errors
    async def RegisterContract(  # noqa: N802
        self, request: pb.RegisterContractRequest, context: Context
    ) -> pb.RegisterContractResponse:
        digest, created = await self.plane.contracts.register(
            request.contract if request.HasField("contract") else None,
            request.reward_contract_digest,
        )
        return pb.RegisterContractResponse(reward_contract_digest=digest, created=created)

    @maps_errors
    async def GetContract(  # noqa: N802
        self, request: pb.GetContractRequest, context: Context
    ) -> pb.GetContractResponse:
        registered = await asyncio.to_thread(
            self._store.contracts.get_contract, request.reward_contract_digest
        )
        return pb.GetContractResponse(contract=registered)

    @maps_errors
    async def ListContracts(  # noqa: N802
        self, request: pb.ListContractsRequest, context: Context
    ) -> pb.ListContractsResponse:
        page = await asyncio.to_thread(
            self._store.contracts.list_contracts, request.page_size, request.page_token
        )
        return pb.ListContractsResponse(contracts=page.items, next_page_token=page.next_page_token)

    # ------------------------------------------------------------------ issuer keys

    @maps_errors
    async def RegisterIssuerKey(  # noqa: N802
        self, request: pb.RegisterIssuerKeyRequest, context: Context
    ) -> pb.RegisterIssuerKeyResponse:
        key, admission = await self.plane.keys.register(request, caller_actor())
        return pb.RegisterIssuerKeyResponse(key=key, admission=_admission(admission))

    @maps_errors
    async def ApproveIssuerKey(  # noqa: N802
        self, request: pb.ApproveIssuerKeyRequest, context: Context
    ) -> pb.ApproveIssuerKeyResponse:
        key, admission, acceptance = await self.plane.keys.approve(
            request.key_id,
            request.reward_contract_digests,
            caller_actor(),
            request.reason,
            accept_bundle_certificate=request.accept_bundle_certificate,
        )
        return pb.ApproveIssuerKeyResponse(
            key=key, admission=_admission(admission), accepted_certificate_ids=acceptance.accepted
        )

    @maps_errors
    async def UnbindIssuerKey(  # noqa: N802
        self, request: pb.UnbindIssuerKeyRequest, context: Context
    ) -> pb.UnbindIssuerKeyResponse:
        key, admission = await self.plane.keys.unbind(
            request.key_id, request.reward_contract_digests, caller_actor(), request.reason
        )
        return pb.UnbindIssuerKeyResponse(key=key, admission=_admission(admission))

    @maps_errors
    async def CreateEnrollment(  # noqa: N802
        self, request: pb.CreateEnrollmentRequest, context: Context
    ) -> pb.CreateEnrollmentResponse:
        enrollment = await self.plane.keys.create_enrollment(
            request.reward_contract_digests,
            caller_actor(),
            request.reason,
            ttl_seconds=request.ttl_seconds,
            any_contract=request.any_contract,
            accept_bundle_certificate=request.accept_bundle_certificate,
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
            self._store.keys.list_issuer_keys, request.role, request.page_size, request.page_token
        )
        return pb.ListIssuerKeysResponse(keys=page.items, next_page_token=page.next_page_token)

    @maps_errors
    async def RetireIssuerKey(  # noqa: N802
        self, request: pb.RetireIssuerKeyRequest, context: Context
    ) -> pb.RetireIssuerKeyResponse:
        key = await self.plane.keys.retire(request.key_id, caller_actor(), request.reason)
        return pb.RetireIssuerKeyResponse(key=key)

    # ------------------------------------------------------------------ certificates

    @maps_errors
    async def IssueCertificate(  # noqa: N802
        self, request: pb.IssueCertificateRequest, context: Context
    ) -> pb.IssueCertificateResponse:
        order = CertificateOrder(
            contract_digest=request.reward_contract_digest,
            calibration=request.calibration if request.HasField("calibration") else None,
            scope=request.calibration_scope,
            issuer=request.issuer,
            issued_at_policy_update=request.issued_at_policy_update,
            expiry_policy_updates=request.expiry_policy_updates,
            certificate_id=request.certificate_id,
            issuer_key_id=request.issuer_key_id,
            delta=request.delta,
        )
        stored = await self.plane.issuing.issue(order, caller_actor(), request.reason)
        return pb.IssueCertificateResponse(
            certificate=stored.certificate, certificate_digest=stored.digest
        )

    @maps_errors
    async def GetCertificate(  # noqa: N802
        self, request: pb.GetCertificateRequest, context: Context
    ) -> pb.GetCertificateResponse:
        stored = await asyncio.to_thread(
            self._store.certificates.get_certificate, request.certificate_id
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
            self._store.certificates.list_certificates,
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
        head = await self.plane.revocations.revoke_named(
            certificate_id=request.certificate_id,
            contract_digest=request.reward_contract_digest,
            checker_digest=request.checker_configuration_digest,
            reason=request.reason,
            actor=caller_actor(),
        )
        return pb.RevokeCertificateResponse(revocation_list=head.envelope, version=head.version)

    @maps_errors
    async def GetRevocationList(  # noqa: N802
        self, request: pb.GetRevocationListRequest, context: Context
    ) -> pb.GetRevocationListResponse:
        head = await self.plane.revocations.refresh()
        return pb.GetRevocationListResponse(revocation_list=head.envelope)

    async def WatchRevocations(  # noqa: N802
        self, request: pb.WatchRevocationsRequest, context: Context
    ) -> AsyncIterator[pb.WatchRevocationsResponse]:
        """Send the head if newer than ``known_version``, then every newer head as it is made
        (re-signed ones too: they keep a follower's list from expiring)."""
        async for head in self.plane.revocations.watch(request.known_version):
            yield pb.WatchRevocationsResponse(revocation_list=head.envelope)

    # ------------------------------------------------------------------ receipts

    @maps_errors
    async def RecordReceipts(  # noqa: N802
        self, request: pb.RecordReceiptsRequest, context: Context
    ) -> pb.RecordReceiptsResponse:
        outcomes = await self.plane.receipts.record(request.receipts)
        return pb.RecordReceiptsResponse(results=[_record_result(o) for o in outcomes])

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
            self._store.receipts.list_receipts, filters, request.page_size, request.page_token
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
            self._store.receipts.receipt_summary, request.reward_contract_digest
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

    @maps_errors
    async def AttestCheckpoint(  # noqa: N802
        self, request: pb.AttestCheckpointRequest, context: Context
    ) -> pb.AttestCheckpointResponse:
        order = AttestationOrder(
            contract_digests=list(request.reward_contract_digests),
            checkpoint_ids=list(request.policy_checkpoint_ids),
            policy_update_first=request.policy_update_first,
            policy_update_last=request.policy_update_last,
            subjects=[(subject.name, subject.sha256) for subject in request.subjects],
            integrity_run_id=request.integrity_run_id,
        )
        issued = await self.plane.attesting.attest(order)
        answer = pb.AttestCheckpointResponse(
            attestation_json=issued.document_bytes(),
            merkle_root=issued.predicate.merkle.root,
            receipt_count=len(issued.receipts),
        )
        if request.include_receipts:
            answer.receipts.extend(SignedEnvelope.FromString(r.envelope) for r in issued.receipts)
        return answer

    # ------------------------------------------------------------------ audit log

    @maps_errors
    async def ListAuditLog(  # noqa: N802
        self, request: pb.ListAuditLogRequest, context: Context
    ) -> pb.ListAuditLogResponse:
        page = await asyncio.to_thread(
            self._store.audit_log.list_entries,
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
