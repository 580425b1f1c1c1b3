"""What the control plane's clients share (:mod:`rewardseal.rpc.control_client`,
:mod:`rewardseal.rpc.integrity_client`).

The retry rule, the paging rule, request building and answer checking live here once, so the
blocking and the asyncio client cannot drift apart; each client only moves messages.
:class:`CallRules` is what every service's clients share; :class:`ControlProtocol` adds
``ControlPlaneService``'s requests and its idempotent RPCs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import grpc

from rewardseal.core.errors import ReceiptMismatch, ValidationError
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_client import retry_backoff
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import CalibrationSummary, IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope

_log = logging.getLogger(__name__)

_Item = TypeVar("_Item")


@dataclass
class Listing(Generic[_Item]):
    """One paginated listing being read: the request for its next page and how to read one.

    ``max_pages`` bounds a page-token loop that never ends (a broken or hostile control
    plane): after that many pages the listing stops with a warning and what was read stands.
    """

    rpc: str
    """The stub attribute that serves the listing (``ListContracts``, ...)."""
    request: Any
    """The request for the next page; its ``page_token`` moves as pages arrive."""
    items: Callable[[Any], Iterable[_Item]]
    max_pages: int | None
    pages: int = 0

    def after(self, page: Any) -> Any | None:
        """The request for the page after ``page``; None when ``page`` was the last one."""
        self.pages += 1
        token = page.next_page_token
        if not token:
            return None
        if self.max_pages is not None and self.pages >= self.max_pages:
            _log.warning(
                "control's %s listing did not end after %d pages; using what was read",
                self.rpc,
                self.pages,
            )
            return None
        self.request.page_token = token
        return self.request


class CallRules:
    """Credentials, deadlines, the retry rule and the paging rule of one service's clients."""

    IDEMPOTENT: ClassVar[frozenset[str]] = frozenset()
    """The RPCs a resend on UNAVAILABLE cannot do twice (each service names its own)."""

    def __init__(
        self,
        token: str,
        timeout: float,
        retries: int,
        page_size: int,
        max_pages: int | None,
        channel: object,
        tls: ClientTls | None,
    ) -> None:
        """Raises ValidationError for an empty token, or a ready channel given with TLS."""
        if not token:
            raise ValidationError("a bearer token is required")
        if channel is not None and tls is not None:
            # The ready channel would silently win over the TLS settings.
            raise ValidationError("give a channel or tls settings, not both")
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.timeout = timeout
        self.retries = retries
        self.page_size = page_size
        self.max_pages = max_pages

    def retry_delay(self, rpc: str, error: grpc.RpcError, attempt: int) -> float | None:
        """Seconds to wait before sending ``rpc`` again after ``error``; None: do not retry."""
        code = getattr(error, "code", lambda: None)()
        if code != grpc.StatusCode.UNAVAILABLE or rpc not in self.IDEMPOTENT:
            return None
        if attempt >= self.retries:
            return None
        return retry_backoff(attempt)

    def listing(
        self,
        rpc: str,
        request: Any,
        items: Callable[[Any], Iterable[_Item]],
        page_size: int | None,
    ) -> Listing[_Item]:
        """A listing of ``rpc`` from its first page (``page_size`` None: the client's)."""
        request.page_size = self.page_size if page_size is None else page_size
        return Listing(rpc, request, items, self.max_pages)


class ControlProtocol(CallRules):
    """``ControlPlaneService``'s requests, idempotent RPCs and answer checks for both clients."""

    IDEMPOTENT = frozenset(
        {
            "RegisterContract",
            "GetContract",
            "ListContracts",
            "ListIssuerKeys",
            "GetCertificate",
            "ListCertificates",
            "GetRevocationList",
            "RecordReceipts",
            "ListReceipts",
            "GetReceiptSummary",
            "ListAuditLog",
        }
    )
    """The RPCs a resend cannot do twice: the reads, ``RegisterContract`` (a repeat answers
    ``created=False``) and ``RecordReceipts`` (idempotent by receipt id). A resent
    ``IssueCertificate`` could mint a second certificate, a resent ``RevokeCertificate`` a
    second revocation-list version; key registration and retirement write the audit log."""

    def contracts(self, page_size: int | None) -> Listing[pb.RegisteredContract]:
        """Every registered contract."""
        request = pb.ListContractsRequest()
        return self.listing("ListContracts", request, lambda page: page.contracts, page_size)

    def issuer_keys(
        self, role: IssuerKeyRole.ValueType, page_size: int | None
    ) -> Listing[IssuerKey]:
        """Every issuer key of ``role`` (UNSPECIFIED: every role)."""
        request = pb.ListIssuerKeysRequest(role=role)
        return self.listing("ListIssuerKeys", request, lambda page: page.keys, page_size)

    def certificates(
        self, reward_contract_digest: str, page_size: int | None
    ) -> Listing[RewardCertificate]:
        """Every certificate (of one contract when a digest is given)."""
        request = pb.ListCertificatesRequest(reward_contract_digest=reward_contract_digest)
        return self.listing("ListCertificates", request, lambda page: page.certificates, page_size)

    def receipts(
        self, query: ReceiptQuery | None, page_size: int | None
    ) -> Listing[RewardEvidenceReceipt]:
        """Every receipt ``query`` picks (None: all)."""
        request = (query or ReceiptQuery()).request()
        return self.listing("ListReceipts", request, lambda page: page.receipts, page_size)

    @staticmethod
    def record_request(envelopes: Iterable[SignedEnvelope]) -> pb.RecordReceiptsRequest:
        """The RecordReceipts request forwarding ``envelopes`` in order."""
        return pb.RecordReceiptsRequest(receipts=list(envelopes))

    @staticmethod
    def recorded(
        answer: pb.RecordReceiptsResponse, request: pb.RecordReceiptsRequest
    ) -> list[pb.RecordReceiptResult]:
        """One result per receipt sent, in order; another count pairs nothing with its receipt.

        Raises:
            ReceiptMismatch: control answered another number of results than receipts sent.
        """
        if len(answer.results) != len(request.receipts):
            raise ReceiptMismatch(
                f"control answered {len(answer.results)} results for "
                f"{len(request.receipts)} receipts sent",
                metadata={"field": "result count"},
            )
        return list(answer.results)


@dataclass(frozen=True)
class ReceiptQuery:
    """Which receipts of the index to list; None leaves an optional filter unset."""

    reward_contract_digest: str = ""
    """Empty: every contract."""
    reward_outcome: RewardOutcome.ValueType = RewardOutcome.REWARD_OUTCOME_UNSPECIFIED
    """UNSPECIFIED: every outcome."""
    certified: bool | None = None
    min_policy_update: int | None = None
    max_policy_update: int | None = None

    def request(self) -> pb.ListReceiptsRequest:
        """The ListReceipts request for these filters (paging fields unset)."""
        request = pb.ListReceiptsRequest(
            reward_contract_digest=self.reward_contract_digest, reward_outcome=self.reward_outcome
        )
        if self.certified is not None:
            request.certified = self.certified
        if self.min_policy_update is not None:
            request.min_policy_update = self.min_policy_update
        if self.max_policy_update is not None:
            request.max_policy_update = self.max_policy_update
        return request


def issue_certificate_request(
    reward_contract_digest: str,
    calibration: CalibrationSummary,
    *,
    calibration_scope: CalibrationScope.ValueType = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
    issuer: CertificateIssuer.ValueType = CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
    issuer_key_id: str = "",
    issued_at_policy_update: int = 0,
    expiry_policy_updates: int = 0,
    delta: float = 0.0,
    certificate_id: str = "",
    reason: str = "",
) -> pb.IssueCertificateRequest:
    """An IssueCertificate request. Empty or zero fields take control's defaults: its own
    organization key, the longest expiry the contract allows, a minted certificate id. There is
    no epsilon to give: control recomputes it from the counts (R-CAL-4)."""
    return pb.IssueCertificateRequest(
        reward_contract_digest=reward_contract_digest,
        calibration=calibration,
        calibration_scope=calibration_scope,
        issuer=issuer,
        issuer_key_id=issuer_key_id,
        issued_at_policy_update=issued_at_policy_update,
        expiry_policy_updates=expiry_policy_updates,
        delta=delta,
        certificate_id=certificate_id,
        reason=reason,
    )


def revoke_scope_request(
    *, reason: str, contract: str = "", checker: str = ""
) -> pb.RevokeCertificateRequest:
    """A RevokeCertificate request for every certificate of a contract digest or of a checker
    configuration digest (R-C-13).

    Raises:
        ValidationError: neither or both of ``contract`` and ``checker`` are given.
    """
    if bool(contract) == bool(checker):
        raise ValidationError("give exactly one of a contract digest and a checker digest")
    return pb.RevokeCertificateRequest(
        reward_contract_digest=contract, checker_configuration_digest=checker, reason=reason
    )
