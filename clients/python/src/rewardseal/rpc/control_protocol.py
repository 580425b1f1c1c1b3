"""What the control plane's client is built on (:mod:`rewardseal.rpc.control_client`).

Request building and answer checking live here once; the call rules (deadline, retry and paging
rule) in :mod:`rewardseal.rpc.call_rules`. :class:`ControlProtocol` adds
``ControlPlaneService``'s requests and its idempotent RPCs to
:class:`~rewardseal.rpc.call_rules.PagedRules`; the client only moves messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewardseal.core.errors import ReceiptMismatch, ValidationError
from rewardseal.rpc.call_rules import Listing, PagedRules
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import CalibrationSummary, IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope


class ControlProtocol(PagedRules):
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
            "AttestCheckpoint",
        }
    )
    """The RPCs a resend cannot do twice: the reads, ``RegisterContract`` (a repeat answers
    ``created=False``) and ``RecordReceipts`` (idempotent by receipt id). A resent
    ``IssueCertificate`` could mint a second certificate (``AttestCheckpoint`` stores nothing: a
    resend signs the same reading again), a resent ``RevokeCertificate`` a
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
class AttestationScope:
    """Which receipts trained a checkpoint (R-C-15): those of ``contracts`` under
    ``checkpoint_ids`` (any id when empty) with a policy update in ``first..last``
    (inclusive); ``integrity_run_id``: the integrity run whose decisions in force over the range
    the attestation names (none when empty)."""

    contracts: Sequence[str]
    first: int
    last: int
    checkpoint_ids: Sequence[str] = ()
    integrity_run_id: str = ""

    def request(
        self,
        subjects: Iterable[Mapping[str, Any]],
        *,
        include_receipts: bool = False,
    ) -> pb.AttestCheckpointRequest:
        """The AttestCheckpoint request for the checkpoint whose in-toto ``subjects``
        (``{"name": ..., "digest": {"sha256": ...}}``, as
        :func:`rewardseal.core.attestation.checkpoint_subjects` makes them) are given.

        Raises:
            ValidationError: a subject without a name or a sha256 digest.
        """
        listed = []
        for subject in subjects:
            name, digest = subject.get("name"), subject.get("digest")
            sha256 = digest.get("sha256") if isinstance(digest, Mapping) else None
            if not isinstance(name, str) or not isinstance(sha256, str):
                raise ValidationError(
                    "each subject needs a name and a digest {'sha256': hex}, got "
                    f"{dict(subject)!r:.120}"
                )
            listed.append(pb.CheckpointSubject(name=name, sha256=sha256))
        return pb.AttestCheckpointRequest(
            reward_contract_digests=list(self.contracts),
            policy_checkpoint_ids=list(self.checkpoint_ids),
            policy_update_first=self.first,
            policy_update_last=self.last,
            subjects=listed,
            integrity_run_id=self.integrity_run_id,
            include_receipts=include_receipts,
        )


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
