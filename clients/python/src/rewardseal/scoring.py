"""The pure scoring rules shared by worker, control and trainers (docs/spec.md §4).

``score()`` turns an outcome into a scalar and decides, separately, whether the read is
certified. ``receipt_refusals()`` lets a reader who holds the contract and the certificate
re-derive the certified column of a receipt and check it against what the issuer said.
"""

from __future__ import annotations

from typing import NamedTuple

from rewardseal.core.certificates import check_policy_update, schedule_state, state_name, unmet
from rewardseal.core.contract import (
    CERTIFIABLE_TIER,
    certificate_digest,
    contract_digest,
    scalar_for,
)
from rewardseal.core.errors import ValidationError
from rewardseal.core.revocation import revoking_entry
from rewardseal.v1.certificate_pb2 import RevocationList, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import CertificateState, RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt


class Score(NamedTuple):
    """What ``score()`` decides for one episode (R-SCORE-1)."""

    scalar: float | None
    """None for an unscored outcome: never 0.0 (R-SCORE-2)."""
    certified: bool
    """True exactly when ``refusals`` is empty."""
    development_only: bool
    """True at tier 0 or 1 (R-SCORE-3)."""
    refusals: tuple[str, ...]
    """Why the read is not certified, in R-SCORE-4 order; empty when certified."""


def _tier_sentence(tier: int) -> str:
    return (
        f"oracle tier {tier} is development only; certification needs tier "
        f"{CERTIFIABLE_TIER} or above"
    )


def score(
    outcome: RewardOutcome.ValueType,
    *,
    tier: int,
    certificate: RewardCertificate | None,
    policy_update: int,
    contract: RewardContract,
    revoked: bool = False,
    revocation_unknown: bool = False,
    revocation_list: RevocationList | None = None,
) -> Score:
    """Score one outcome against ``contract`` (R-SCORE-1..4). Pure: no I/O, no clock.

    ``revocation_list``: a verified list the reader holds (a follower's ``held``); a
    certificate it revokes, by id, contract or checker configuration (R-C-13), is refused as
    revoked, as with ``revoked=True``.

    Raises ValidationError for a negative policy update, an unknown outcome or tier.
    """
    check_policy_update(policy_update)
    if tier not in (0, 1, 2, 3):
        raise ValidationError(f"oracle tier {tier} is not one of 0, 1, 2, 3")
    scalar = scalar_for(outcome, contract)
    refusals = certificate_refusals(
        tier=tier,
        certificate=certificate,
        policy_update=policy_update,
        contract=contract,
        revoked=revoked,
        revocation_unknown=revocation_unknown,
        revocation_list=revocation_list,
    )
    return Score(
        scalar=scalar,
        certified=not refusals,
        development_only=tier < CERTIFIABLE_TIER,
        refusals=tuple(refusals),
    )


def certificate_refusals(
    *,
    tier: int,
    certificate: RewardCertificate | None,
    policy_update: int,
    contract: RewardContract,
    revoked: bool = False,
    revocation_unknown: bool = False,
    revocation_list: RevocationList | None = None,
) -> list[str]:
    """The R-SCORE-4 refusal sentences, in order. The outcome never enters them.

    ``revocation_unknown`` is for a reader that follows a revocation list but holds no fresh
    one (rolled back, frozen or never received, R-C-4): it cannot vouch the certificate is
    not revoked, so it does not certify. ``revocation_list``: see :func:`score`.
    """
    refusals: list[str] = []
    if tier < CERTIFIABLE_TIER:
        refusals.append(_tier_sentence(tier))
    if certificate is None:
        refusals.append("no certificate was given for this reward contract")
        return refusals
    if not revoked and revocation_list is not None:
        revoked = revoking_entry(revocation_list, certificate) is not None
    if revoked:
        refusals.append(f"certificate {certificate.certificate_id} is revoked")
    elif revocation_unknown:
        refusals.append(revocation_unknown_sentence(certificate.certificate_id))
    state = schedule_state(certificate, policy_update)
    if state != CertificateState.CERTIFICATE_STATE_CURRENT:
        refusals.append(
            f"certificate {certificate.certificate_id} is not current at policy update "
            f"{policy_update} (state {state_name(state)})"
        )
    if certificate.reward_contract_digest != contract_digest(contract):
        refusals.append(f"certificate {certificate.certificate_id} names another reward contract")
    refusals.extend(unmet(certificate, contract.certificate_policy))
    return refusals


def revocation_unknown_sentence(certificate_id: str) -> str:
    """The refusal given when no fresh revocation list vouches for ``certificate_id``."""
    return (
        f"the revocation status of certificate {certificate_id} is unknown: "
        "no fresh revocation list is held"
    )


RECEIPT_CONTRACT_MISMATCH = "the receipt names a different reward contract"
RECEIPT_CERTIFICATE_MISSING = "the receipt references a certificate that was not given"
RECEIPT_CERTIFICATE_DIFFERS = "the receipt references a different certificate"


def receipt_refusals(
    receipt: RewardEvidenceReceipt,
    contract: RewardContract,
    certificate: RewardCertificate | None,
) -> list[str]:
    """Re-derive a receipt's certification refusals from the contract and certificate (R-SCORE-5).

    For a receipt whose contract and certificate match the ones given, the answer equals the
    receipt's own ``certification_refusals`` (what ``score()`` gave at issue time).
    """
    refusals: list[str] = []
    if receipt.reward_contract_digest != contract_digest(contract):
        refusals.append(RECEIPT_CONTRACT_MISMATCH)
    references = bool(receipt.certificate_id or receipt.certificate_digest)
    scored_with: RewardCertificate | None = None
    if references and certificate is None:
        refusals.append(RECEIPT_CERTIFICATE_MISSING)
    elif certificate is not None:
        matches = (
            references
            and receipt.certificate_id == certificate.certificate_id
            and receipt.certificate_digest == certificate_digest(certificate)
        )
        if matches:
            scored_with = certificate
        else:
            refusals.append(RECEIPT_CERTIFICATE_DIFFERS)
    refusals.extend(
        certificate_refusals(
            tier=receipt.oracle_tier,
            certificate=scored_with,
            policy_update=receipt.policy_update,
            contract=contract,
            revoked=receipt.certificate_state == CertificateState.CERTIFICATE_STATE_REVOKED,
            # Whether the issuer held a fresh list is a fact of issue time that only the
            # receipt's own sentence records.
            revocation_unknown=scored_with is not None
            and revocation_unknown_sentence(scored_with.certificate_id)
            in receipt.certification_refusals,
        )
    )
    # De-duplicate, keeping the first occurrence's position.
    return list(dict.fromkeys(refusals))
