"""Certificate state at a policy update, and how a certificate measures up to a contract's policy.

R-MSG-3/4, R-SCORE-4. The reference point (the policy update) is always an argument: a
certificate expires on a schedule of updates, never of wall-clock time, because on-policy
training breaks the exchangeability the bound assumes.
"""

from __future__ import annotations

from rewardseal.core.errors import ValidationError
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import CertificatePolicy
from rewardseal.v1.enums_pb2 import CertificateState

MAX_POLICY_UPDATE = 2**53 - 1
"""Largest policy update any message may carry (R-VAL-6): it must survive a JSON double."""


def check_policy_update(policy_update: int) -> int:
    """Return ``policy_update`` or raise ValidationError when it is negative or too large."""
    if isinstance(policy_update, bool) or not isinstance(policy_update, int):
        raise ValidationError(f"policy update must be an integer, got {policy_update!r}")
    if policy_update < 0:
        raise ValidationError(f"policy update {policy_update} is negative")
    if policy_update > MAX_POLICY_UPDATE:
        raise ValidationError(f"policy update {policy_update} is above 2^53-1")
    return policy_update


def certificate_state(
    certificate: RewardCertificate | None, policy_update: int, *, revoked: bool = False
) -> CertificateState.ValueType:
    """The certificate's state at ``policy_update``.

    ABSENT without a certificate; REVOKED when told so; otherwise NOT_YET_VALID below
    ``issued``, CURRENT for ``issued .. issued+expiry-1``, EXPIRED at ``issued+expiry`` and above.
    """
    check_policy_update(policy_update)
    if certificate is None:
        return CertificateState.CERTIFICATE_STATE_ABSENT
    if revoked:
        return CertificateState.CERTIFICATE_STATE_REVOKED
    return schedule_state(certificate, policy_update)


def schedule_state(
    certificate: RewardCertificate, policy_update: int
) -> CertificateState.ValueType:
    """NOT_YET_VALID, CURRENT or EXPIRED at ``policy_update``, ignoring revocation."""
    check_policy_update(policy_update)
    issued = certificate.issued_at_policy_update
    if policy_update < issued:
        return CertificateState.CERTIFICATE_STATE_NOT_YET_VALID
    if policy_update >= issued + certificate.expiry_policy_updates:
        return CertificateState.CERTIFICATE_STATE_EXPIRED
    return CertificateState.CERTIFICATE_STATE_CURRENT


def is_current(certificate: RewardCertificate, policy_update: int) -> bool:
    """True when the certificate's schedule covers ``policy_update``."""
    return schedule_state(certificate, policy_update) == CertificateState.CERTIFICATE_STATE_CURRENT


def unmet(certificate: RewardCertificate, policy: CertificatePolicy) -> list[str]:
    """Every way ``certificate`` falls short of ``policy``: one sentence each, R-SCORE-4 order."""
    shortfalls: list[str] = []
    if certificate.epsilon > policy.max_epsilon:
        shortfalls.append(
            f"certificate epsilon {certificate.epsilon:g} is above the contract's maximum "
            f"{policy.max_epsilon:g}"
        )
    if certificate.delta > policy.max_delta:
        shortfalls.append(
            f"certificate delta {certificate.delta:g} is above the contract's maximum "
            f"{policy.max_delta:g}"
        )
    if certificate.threshold != policy.threshold:
        shortfalls.append(
            f"certificate threshold {certificate.threshold:g} differs from the contract's "
            f"threshold {policy.threshold:g}"
        )
    if certificate.calibration_corpus_digest != policy.calibration_corpus_digest:
        shortfalls.append(
            "certificate calibration corpus differs from the contract's calibration corpus"
        )
    if certificate.expiry_policy_updates > policy.max_expiry_policy_updates:
        shortfalls.append(
            f"certificate expiry of {certificate.expiry_policy_updates} policy updates is longer "
            f"than the contract's maximum of {policy.max_expiry_policy_updates}"
        )
    return shortfalls


def satisfies(certificate: RewardCertificate, policy: CertificatePolicy) -> bool:
    """True when the certificate meets every demand of the contract's certificate policy."""
    return not unmet(certificate, policy)


def state_name(state: CertificateState.ValueType) -> str:
    """The short state name used in sentences, e.g. ``EXPIRED``."""
    return CertificateState.Name(state).removeprefix("CERTIFICATE_STATE_")
