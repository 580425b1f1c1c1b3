"""Issuing a certificate from a calibration summary (R-CAL-4, R-MSG-5, R-C-3).

One function for every issuer: the worker's self-signed SYNTHETIC certificate and the control
plane's IssueCertificate both come through :func:`issue_certificate`, so the same summary,
contract, key and inputs give the same certificate bytes wherever it is issued. What differs
between issuers stays with them: which key may sign (control checks its registry), the default
certificate id, and how the issue time is rounded.
"""

from __future__ import annotations

from datetime import datetime

from rewardseal.core.calibration import delta_from_summary, epsilon_from_summary
from rewardseal.core.certificates import unmet
from rewardseal.core.clock import timestamp
from rewardseal.core.errors import CertificationRefused, ContractMismatch
from rewardseal.core.signing import SigningKey, sign_certificate
from rewardseal.core.validation import validate_calibration_summary, validate_certificate
from rewardseal.v1.certificate_pb2 import CalibrationSummary, RewardCertificate
from rewardseal.v1.contract_pb2 import CertificatePolicy, RewardContract
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer

__all__ = ["check_summary_for", "issue_certificate"]


def check_summary_for(
    summary: CalibrationSummary,
    policy: CertificatePolicy,
    *,
    contract_digest: str,
    scope: CalibrationScope.ValueType,
    issuer: CertificateIssuer.ValueType,
) -> None:
    """Refuse a summary that cannot back a certificate for this contract, scope and issuer.

    In the order a reader would ask: is it a summary, for this contract, on the contract's
    corpus (R-C-3); then R-MSG-5: PRODUCTION scope needs an ORGANIZATION issuer and a held-out
    summary. The key that signs is the issuer's own check.

    Raises:
        ValidationError: the summary breaks R-CAL-2/3.
        ContractMismatch: the summary is for another contract.
        CertificationRefused: another corpus, or an R-MSG-5 rule (``metadata["rule"]``).
    """
    validate_calibration_summary(summary)
    if summary.reward_contract_digest != contract_digest:
        raise ContractMismatch(
            f"the calibration summary is for another contract ({summary.reward_contract_digest}, "
            f"not {contract_digest})"
        )
    if summary.calibration_corpus_digest != policy.calibration_corpus_digest:
        raise CertificationRefused(
            "the calibration summary's corpus differs from the contract's calibration corpus "
            f"({summary.calibration_corpus_digest}, the contract names "
            f"{policy.calibration_corpus_digest})",
            metadata={"rule": "R-C-3"},
        )
    production = scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
    if production and issuer != CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION:
        raise CertificationRefused(
            "a SELF_SIGNED certificate may only carry SYNTHETIC scope; PRODUCTION needs an "
            "ORGANIZATION issuer",
            metadata={"rule": "R-MSG-5"},
        )
    if production and not summary.held_out:
        raise CertificationRefused(
            "PRODUCTION scope needs a calibration summary marked held-out",
            metadata={"rule": "R-MSG-5"},
        )


def issue_certificate(
    summary: CalibrationSummary,
    contract: RewardContract,
    key: SigningKey,
    *,
    contract_digest: str,
    certificate_id: str,
    issued_at: datetime,
    scope: CalibrationScope.ValueType = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
    issuer: CertificateIssuer.ValueType = CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
    issued_at_policy_update: int = 0,
    expiry_policy_updates: int = 0,
) -> RewardCertificate:
    """A certificate for ``contract`` from ``summary``, signed by ``key``.

    Epsilon is recomputed from the summary's counts and delta from its confidence (R-CAL-4),
    never taken from anyone's say-so; threshold, corpus and checker come from the summary.
    ``expiry_policy_updates`` 0 means as long as the contract's policy allows. The caller has
    decided that ``key`` may sign for ``issuer`` and names the digest it computed for
    ``contract`` (``contract_digest``).

    Raises:
        ValidationError, ContractMismatch, CertificationRefused: see :func:`check_summary_for`;
            CertificationRefused also when the certificate would fall short of the contract's
            certificate policy (``metadata["shortfalls"]`` counts the ways).
    """
    policy = contract.certificate_policy
    check_summary_for(summary, policy, contract_digest=contract_digest, scope=scope, issuer=issuer)
    certificate = RewardCertificate(
        certificate_id=certificate_id,
        reward_contract_digest=contract_digest,
        checker_configuration_digest=summary.checker_configuration_digest,
        epsilon=epsilon_from_summary(summary),
        delta=delta_from_summary(summary),
        threshold=summary.threshold,
        calibration_corpus_digest=summary.calibration_corpus_digest,
        calibration_scope=scope,
        issued_at_policy_update=issued_at_policy_update,
        expiry_policy_updates=expiry_policy_updates or policy.max_expiry_policy_updates,
        issued_at=timestamp(issued_at, "issued_at"),
        issuer=issuer,
    )
    shortfalls = unmet(certificate, policy)
    if shortfalls:
        raise CertificationRefused(
            "the certificate would not satisfy the contract's certificate policy: "
            + "; ".join(shortfalls),
            metadata={"rule": "R-C-3", "shortfalls": str(len(shortfalls))},
        )
    signed = sign_certificate(certificate, key)
    validate_certificate(signed)
    return signed
