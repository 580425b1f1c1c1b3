"""Accepting a certificate to score under: the checks a worker runs before trusting one.

A certificate from a bundle file or from the control plane counts only when it is well formed,
signed by a trusted key, names the worker's contract and (for control's certificates) meets
that contract's certificate policy. What passes becomes a :class:`CertificateInUse`: the
certificate and its digest, swapped into the scorer as one value.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardseal.core.certificates import unmet
from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import CertificationRefused, ContractMismatch
from rewardseal.core.signing import TrustSet, verify_certificate
from rewardseal.core.validation import validate_certificate
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract

__all__ = ["CertificateInUse", "accept_certificate"]


@dataclass(frozen=True)
class CertificateInUse:
    """The certificate receipts are issued under and its digest, swapped as one value so that a
    scoring thread never pairs one certificate with another's digest."""

    certificate: RewardCertificate | None = None
    digest: str | None = None


def accept_certificate(
    certificate: RewardCertificate,
    *,
    trust: TrustSet | None,
    contract: RewardContract,
    contract_digest: str,
    check_policy: bool = True,
) -> CertificateInUse:
    """``certificate`` and its digest, once it passes every check, in this order.

    It validates; it names ``contract_digest``; its signature verifies under ``trust`` (None:
    not checked here, for a bundle loaded without a trust set); it satisfies ``contract``'s
    certificate policy unless ``check_policy`` is False. A bundle's own certificate has always
    loaded without the policy check (a trainer refuses receipts under one that falls short and
    names the shortfall, R-SCORE-4); the flag keeps that.

    Raises:
        ValidationError: it does not validate.
        ContractMismatch: it is for another contract.
        SignatureError: no key in ``trust`` signed it.
        CertificationRefused: it falls short of the contract's certificate policy.
    """
    validate_certificate(certificate)
    if certificate.reward_contract_digest != contract_digest:
        raise ContractMismatch(
            f"the certificate is for another contract ({certificate.reward_contract_digest}, "
            f"not {contract_digest})"
        )
    if trust is not None:
        verify_certificate(certificate, trust)
    if check_policy:
        shortfalls = unmet(certificate, contract.certificate_policy)
        if shortfalls:
            raise CertificationRefused(
                "the certificate falls short of the contract's policy: " + "; ".join(shortfalls)
            )
    return CertificateInUse(certificate, certificate_digest(certificate))
