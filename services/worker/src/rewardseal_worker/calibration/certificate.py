"""The SELF_SIGNED, SYNTHETIC certificate a worker issues itself from its calibration summary."""

from __future__ import annotations

from datetime import datetime

from rewardseal.core.clock import utc_now
from rewardseal.core.errors import ValidationError
from rewardseal.core.issuing import check_summary_for, issue_certificate
from rewardseal.core.signing import SigningKey
from rewardseal.v1.certificate_pb2 import CalibrationSummary, RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.calibration.checker import checker_configuration_digest

__all__ = ["self_signed_certificate"]


def self_signed_certificate(
    bundle: ContractBundle,
    summary: CalibrationSummary,
    key: SigningKey,
    *,
    issued_at: datetime | None = None,
    issued_at_policy_update: int = 0,
    certificate_id: str | None = None,
) -> RewardCertificate:
    """A SELF_SIGNED, SYNTHETIC certificate for ``bundle`` from a calibration summary.

    Issued by :func:`rewardseal.core.issuing.issue_certificate`, as the control plane issues:
    epsilon recomputed from the summary's counts (R-CAL-4), delta ``1 - confidence`` (rounded to
    12 decimals, so 0.95 gives exactly 0.05), the expiry the contract's longest allowed. The
    summary must also come from this bundle's checker. The id defaults to ``cert.<contract id
    stem>.<first 12 hex of the contract digest>``.

    Raises:
        ValidationError: the summary is for another contract (ContractMismatch), corpus
            (CertificationRefused) or checker, or the certificate would not satisfy the
            contract's certificate policy (CertificationRefused).
    """
    contract = bundle.contract
    scope = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    issuer = CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
    check_summary_for(
        summary,
        contract.certificate_policy,
        contract_digest=bundle.contract_digest,
        scope=scope,
        issuer=issuer,
    )
    if summary.checker_configuration_digest != checker_configuration_digest(bundle):
        raise ValidationError("the calibration summary was made with another checker")
    stem = contract.contract_id.split(".", 1)[0] or "contract"
    return issue_certificate(
        summary,
        contract,
        key,
        contract_digest=bundle.contract_digest,
        certificate_id=certificate_id
        or f"cert.{stem}.{bundle.contract_digest.removeprefix('sha256:')[:12]}",
        # Whole seconds, as the worker has always stamped them (same inputs, same bytes).
        issued_at=(issued_at or utc_now()).replace(microsecond=0),
        scope=scope,
        issuer=issuer,
        issued_at_policy_update=issued_at_policy_update,
    )
