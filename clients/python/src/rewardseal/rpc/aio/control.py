"""The client for the control plane's ``ControlPlaneService``, written once for asyncio:
``AsyncControlClient`` here, ``ControlClient`` in its generated blocking twin
(:mod:`rewardseal.rpc.aio`); :mod:`rewardseal.rpc.control_client` documents both.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

from rewardseal.rpc.aio.transport import AsyncTransport
from rewardseal.rpc.control_protocol import (
    AttestationScope,
    ControlProtocol,
    ReceiptQuery,
    revoke_scope_request,
)
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2_grpc import ControlPlaneServiceStub
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope

__all__ = ["AsyncControlClient"]

_ANY_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED


class AsyncControlClient(AsyncTransport[ControlProtocol]):
    """asyncio client for ``ControlPlaneService``.

    Listings are async iterators that fetch page after page as they are read (``contracts``,
    ``issuer_keys``, ``certificates``, ``receipts``); ``list_*`` collects one into a list.
    """

    STUB = ControlPlaneServiceStub
    RULES = ControlProtocol

    # --- Contracts ---

    async def register_contract(
        self, contract: RewardContract, reward_contract_digest: str
    ) -> pb.RegisterContractResponse:
        """Register ``contract`` under the digest the caller computed (control recomputes it
        and refuses a mismatch, R-C-1); ``created`` is False when it was registered before."""
        request = pb.RegisterContractRequest(
            contract=contract, reward_contract_digest=reward_contract_digest
        )
        answer: pb.RegisterContractResponse = await self._call("RegisterContract", request)
        return answer

    async def get_contract(self, reward_contract_digest: str) -> pb.RegisteredContract:
        """One registered contract (NotFound when control does not know the digest)."""
        request = pb.GetContractRequest(reward_contract_digest=reward_contract_digest)
        answer: pb.GetContractResponse = await self._call("GetContract", request)
        return answer.contract

    def contracts(self, *, page_size: int | None = None) -> AsyncIterator[pb.RegisteredContract]:
        """Every registered contract, oldest first, page after page."""
        return self._read(self._protocol.contracts(page_size))

    async def list_contracts(self, *, page_size: int | None = None) -> list[pb.RegisteredContract]:
        """Every registered contract, collected."""
        return [item async for item in self.contracts(page_size=page_size)]

    # --- Issuer keys ---

    async def register_issuer_key(
        self, key: IssuerKey, *, reason: str = "", contracts: Iterable[str] = ()
    ) -> IssuerKey:
        """Register a public key with the admin credential (admitted and bound to
        ``contracts`` when given, R-C-10); the key as control stored it. A worker registers
        its own key with :meth:`register_key` (a signed request, see
        :func:`rewardseal.core.key_possession.sign_registration`)."""
        request = pb.RegisterIssuerKeyRequest(
            key=key, reason=reason, reward_contract_digests=list(contracts)
        )
        return (await self.register_key(request)).key

    async def register_key(
        self, request: pb.RegisterIssuerKeyRequest
    ) -> pb.RegisterIssuerKeyResponse:
        """Send a full registration (proof of possession, enrollment credential, bundle
        certificate); the key and its admission as control holds them."""
        answer: pb.RegisterIssuerKeyResponse = await self._call("RegisterIssuerKey", request)
        return answer

    async def approve_issuer_key(
        self,
        key_id: str,
        contracts: Iterable[str],
        *,
        reason: str = "",
        accept_bundle_certificate: bool = False,
    ) -> pb.ApproveIssuerKeyResponse:
        """Admit a WORKER key and bind it to ``contracts`` (admin, R-C-10);
        ``accept_bundle_certificate``: also accept its bundle certificates for them (R-C-11)."""
        request = pb.ApproveIssuerKeyRequest(
            key_id=key_id,
            reward_contract_digests=list(contracts),
            reason=reason,
            accept_bundle_certificate=accept_bundle_certificate,
        )
        answer: pb.ApproveIssuerKeyResponse = await self._call("ApproveIssuerKey", request)
        return answer

    async def unbind_issuer_key(
        self, key_id: str, contracts: Iterable[str], *, reason: str
    ) -> pb.UnbindIssuerKeyResponse:
        """Take ``contracts`` out of a key's bindings (admin, R-C-10)."""
        request = pb.UnbindIssuerKeyRequest(
            key_id=key_id, reward_contract_digests=list(contracts), reason=reason
        )
        answer: pb.UnbindIssuerKeyResponse = await self._call("UnbindIssuerKey", request)
        return answer

    async def create_enrollment(
        self,
        contracts: Iterable[str],
        *,
        ttl_seconds: int = 0,
        reason: str = "",
        any_contract: bool = False,
        accept_bundle_certificate: bool = False,
    ) -> pb.CreateEnrollmentResponse:
        """A one-time enrollment credential for one worker (admin, R-C-11); never retried (a
        resend would make a second credential). ``any_contract`` (no ``contracts``): the key
        is bound to the contracts the worker names when it registers.
        ``accept_bundle_certificate``: the bundle certificate the key registers with is accepted
        (control lists it, R-C-11)."""
        request = pb.CreateEnrollmentRequest(
            reward_contract_digests=list(contracts),
            ttl_seconds=ttl_seconds,
            reason=reason,
            any_contract=any_contract,
            accept_bundle_certificate=accept_bundle_certificate,
        )
        answer: pb.CreateEnrollmentResponse = await self._call("CreateEnrollment", request)
        return answer

    def issuer_keys(
        self, *, role: IssuerKeyRole.ValueType = _ANY_ROLE, page_size: int | None = None
    ) -> AsyncIterator[IssuerKey]:
        """Every issuer key of ``role`` (UNSPECIFIED: every role), page after page."""
        return self._read(self._protocol.issuer_keys(role, page_size))

    async def list_issuer_keys(
        self, *, role: IssuerKeyRole.ValueType = _ANY_ROLE, page_size: int | None = None
    ) -> list[IssuerKey]:
        """Every issuer key of ``role``, collected."""
        return [item async for item in self.issuer_keys(role=role, page_size=page_size)]

    async def retire_issuer_key(self, key_id: str, *, reason: str) -> IssuerKey:
        """Retire a key (admin); the key as control now holds it."""
        request = pb.RetireIssuerKeyRequest(key_id=key_id, reason=reason)
        answer: pb.RetireIssuerKeyResponse = await self._call("RetireIssuerKey", request)
        return answer.key

    # --- Certificates and revocation ---

    async def issue_certificate(
        self, request: pb.IssueCertificateRequest
    ) -> pb.IssueCertificateResponse:
        """Issue a certificate (admin); build ``request`` with :func:`issue_certificate_request`.
        Never retried: a resend could mint a second certificate."""
        answer: pb.IssueCertificateResponse = await self._call("IssueCertificate", request)
        return answer

    async def get_certificate(self, certificate_id: str) -> pb.GetCertificateResponse:
        """One certificate, its digest and whether it is revoked."""
        request = pb.GetCertificateRequest(certificate_id=certificate_id)
        answer: pb.GetCertificateResponse = await self._call("GetCertificate", request)
        return answer

    def certificates(
        self, *, reward_contract_digest: str = "", page_size: int | None = None
    ) -> AsyncIterator[RewardCertificate]:
        """Every certificate (of one contract when a digest is given), oldest first."""
        return self._read(self._protocol.certificates(reward_contract_digest, page_size))

    async def list_certificates(
        self, *, reward_contract_digest: str = "", page_size: int | None = None
    ) -> list[RewardCertificate]:
        """Every certificate (of one contract when a digest is given), collected."""
        listing = self.certificates(
            reward_contract_digest=reward_contract_digest, page_size=page_size
        )
        return [certificate async for certificate in listing]

    async def revoke_certificate(
        self, certificate_id: str, *, reason: str
    ) -> pb.RevokeCertificateResponse:
        """Revoke a certificate (admin); the new signed revocation list and its version."""
        request = pb.RevokeCertificateRequest(certificate_id=certificate_id, reason=reason)
        answer: pb.RevokeCertificateResponse = await self._call("RevokeCertificate", request)
        return answer

    async def revoke_every_certificate(
        self, *, reason: str, contract: str = "", checker: str = ""
    ) -> pb.RevokeCertificateResponse:
        """Revoke every certificate of a contract digest or of a checker configuration digest
        (exactly one; admin; R-C-13), issued before or after; the new signed list and version."""
        request = revoke_scope_request(reason=reason, contract=contract, checker=checker)
        answer: pb.RevokeCertificateResponse = await self._call("RevokeCertificate", request)
        return answer

    async def get_revocation_list(self) -> SignedEnvelope:
        """The current signed revocation list, as control signed it (verify it with
        :class:`rewardseal.core.revocation.RevocationFollower` before acting on it)."""
        answer: pb.GetRevocationListResponse = await self._call(
            "GetRevocationList", pb.GetRevocationListRequest()
        )
        return answer.revocation_list

    async def watch_revocations(
        self, known_version: int = 0
    ) -> AsyncGenerator[SignedEnvelope, None]:
        """Each signed revocation list newer than ``known_version``, as control publishes it.

        The one call without the client's deadline: the stream is meant to stay open until
        the caller stops reading. It is not retried; reopen it with the version held.
        """
        request = pb.WatchRevocationsRequest(known_version=known_version)
        async for message in self._stream("WatchRevocations", request):
            yield message.revocation_list

    # --- The receipt index (R-C-5) ---

    async def record_receipts(
        self, envelopes: Iterable[SignedEnvelope]
    ) -> list[pb.RecordReceiptResult]:
        """Forward signed receipts; one result per receipt, in order (idempotent by receipt
        id, so a resend reports ``duplicate`` and ``recorded``)."""
        request = self._protocol.record_request(envelopes)
        answer: pb.RecordReceiptsResponse = await self._call("RecordReceipts", request)
        return self._protocol.recorded(answer, request)

    def receipts(
        self, query: ReceiptQuery | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[RewardEvidenceReceipt]:
        """Every privacy-safe receipt in the index that ``query`` picks (None: all), page after
        page."""
        return self._read(self._protocol.receipts(query, page_size))

    async def list_receipts(
        self, query: ReceiptQuery | None = None, *, page_size: int | None = None
    ) -> list[RewardEvidenceReceipt]:
        """Every receipt ``query`` picks, collected."""
        return [item async for item in self.receipts(query, page_size=page_size)]

    async def receipt_summary(self, reward_contract_digest: str) -> pb.GetReceiptSummaryResponse:
        """Per-outcome counts and the certified and unscored shares of one contract."""
        request = pb.GetReceiptSummaryRequest(reward_contract_digest=reward_contract_digest)
        answer: pb.GetReceiptSummaryResponse = await self._call("GetReceiptSummary", request)
        return answer

    async def attest_checkpoint(
        self,
        scope: AttestationScope,
        subjects: Iterable[Mapping[str, Any]],
        *,
        include_receipts: bool = False,
    ) -> pb.AttestCheckpointResponse:
        """A reward attestation for the checkpoint whose in-toto ``subjects`` are given
        (:func:`rewardseal.core.attestation.checkpoint_subjects`), over the receipts ``scope``
        picks, signed by control's organization key (R-C-15); ``attestation_json`` is the
        DSSE JSON to write beside the checkpoint. ``include_receipts``: also the receipts in
        scope, in Merkle leaf order."""
        request = scope.request(subjects, include_receipts=include_receipts)
        answer: pb.AttestCheckpointResponse = await self._call("AttestCheckpoint", request)
        return answer

    # --- The audit log (admin) ---

    async def audit_log_page(
        self, *, action: str = "", page_size: int = 0, page_token: str = ""
    ) -> pb.ListAuditLogResponse:
        """One page of the audit log, oldest first (only ``action``'s entries when given);
        pass its ``next_page_token`` back for the next page ("" on the last)."""
        request = pb.ListAuditLogRequest(action=action, page_size=page_size, page_token=page_token)
        answer: pb.ListAuditLogResponse = await self._call("ListAuditLog", request)
        return answer
