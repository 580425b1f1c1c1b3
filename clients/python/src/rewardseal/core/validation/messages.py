"""Validators for contracts, certificates, receipts and calibration summaries (docs/spec.md §5,
R-MSG-*)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rewardseal.core.contract import CERTIFIABLE_TIER, SCORING_DEFAULTS, UNSCORED_OUTCOMES
from rewardseal.core.errors import CertificationRefused, ValidationError, preview
from rewardseal.core.judging.receipt_findings import validate_findings
from rewardseal.core.task_parameters import check_declarations
from rewardseal.core.validation.fields import (
    MAX_COMPONENTS,
    MAX_IDENTITY_KEYS,
    NAME_PATTERN,
    SIGNATURE_LENGTH,
    check_enum,
    check_float,
    check_names,
    check_policy_update_field,
    is_bounded_float,
    validate_digest,
    validate_id,
    validate_key_id,
)
from rewardseal.v1.certificate_pb2 import CalibrationSummary, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    CertificateState,
    OracleChannel,
    RewardOutcome,
    Uncertainty,
)
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt


def validate_contract(contract: RewardContract) -> None:
    """R-MSG-1..3, R-MSG-10: ids, digests, oracle, components, scoring and certificate policy."""
    validate_id(contract.contract_id, "contract_id")
    if not contract.contract_version:
        raise ValidationError("contract_version is required")
    validate_id(contract.task_id, "task_id")
    validate_id(contract.environment_id, "environment_id")
    for field in (
        "task_digest",
        "environment_digest",
        "required_effects_digest",
        "forbidden_effects_digest",
    ):
        validate_digest(getattr(contract, field), field)
    if not contract.HasField("oracle"):
        raise ValidationError("oracle is required")
    check_enum(contract.oracle.channel, OracleChannel, "oracle.channel", ValidationError)
    check_names(
        contract.oracle.identity_keys, "oracle.identity_keys", low=1, high=MAX_IDENTITY_KEYS
    )
    validate_digest(contract.oracle.oracle_recipe_digest, "oracle.oracle_recipe_digest")
    check_names((c.name for c in contract.components), "components", low=1, high=MAX_COMPONENTS)
    check_declarations(contract.task_parameters, NAME_PATTERN.match)  # R-MSG-11
    for component in contract.components:
        # Names were checked above (NAME_PATTERN: at most 64 characters), so quoting is safe.
        check_float(component.weight, f"component {component.name} weight")
        if component.weight <= 0:
            raise ValidationError(f"component {component.name} weight must be > 0")
    policy = contract.scoring_policy
    for name in SCORING_DEFAULTS:
        if not policy.HasField(name):
            continue
        value = getattr(policy, name)
        check_float(value, f"scoring_policy.{name}")
        if name == "verified_reward" and value <= 0:
            raise ValidationError("scoring_policy.verified_reward must be > 0")
        if name != "verified_reward" and value > 0:
            raise ValidationError(f"scoring_policy.{name} must be <= 0")
    if not contract.HasField("certificate_policy"):
        raise ValidationError("certificate_policy is required")
    cert_policy = contract.certificate_policy
    for bound in ("max_epsilon", "max_delta"):
        value = getattr(cert_policy, bound)
        if not (math.isfinite(value) and 0 < value < 1):
            raise ValidationError(f"certificate_policy.{bound} must be in (0, 1), got {value!r}")
    check_float(cert_policy.threshold, "certificate_policy.threshold")
    validate_digest(
        cert_policy.calibration_corpus_digest, "certificate_policy.calibration_corpus_digest"
    )
    if cert_policy.max_expiry_policy_updates < 1:
        raise ValidationError("certificate_policy.max_expiry_policy_updates must be >= 1")


def validate_certificate(certificate: RewardCertificate) -> None:
    """R-MSG-4/5, R-VAL-6: fields, ranges, issuer/scope combination, signature shape.

    Signature *verification* is kept apart, in ``rewardseal.core.signing``.
    """
    validate_id(certificate.certificate_id, "certificate_id")
    validate_digest(certificate.reward_contract_digest, "reward_contract_digest")
    validate_digest(certificate.checker_configuration_digest, "checker_configuration_digest")
    if not (math.isfinite(certificate.epsilon) and 0 <= certificate.epsilon <= 1):
        raise ValidationError(f"epsilon must be in [0, 1], got {certificate.epsilon!r}")
    if not (math.isfinite(certificate.delta) and 0 < certificate.delta < 1):
        raise ValidationError(f"delta must be in (0, 1), got {certificate.delta!r}")
    check_float(certificate.threshold, "threshold")
    validate_digest(certificate.calibration_corpus_digest, "calibration_corpus_digest")
    check_enum(
        certificate.calibration_scope, CalibrationScope, "calibration_scope", ValidationError
    )
    check_policy_update_field(certificate.issued_at_policy_update, "issued_at_policy_update")
    if certificate.expiry_policy_updates < 1:
        raise ValidationError("expiry_policy_updates must be >= 1")
    if not certificate.HasField("issued_at"):
        raise ValidationError("issued_at is required")
    check_enum(certificate.issuer, CertificateIssuer, "issuer", ValidationError)
    if (
        certificate.issuer == CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
        and certificate.calibration_scope != CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    ):
        raise CertificationRefused("a SELF_SIGNED certificate may only carry SYNTHETIC scope")
    validate_key_id(certificate.issuer_key_id)
    if len(certificate.signature) != SIGNATURE_LENGTH:
        raise ValidationError(
            f"signature must be {SIGNATURE_LENGTH} bytes, got {len(certificate.signature)}"
        )


_UNCERTAINTY_BY_OUTCOME: Mapping[int, frozenset[int]] = {
    RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED: frozenset(
        {Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN, Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN}
    ),
    RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM: frozenset(
        {
            Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE,
            Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN,
            Uncertainty.UNCERTAINTY_NONE,
        }
    ),
}
"""R-VAL-4; every scored outcome carries NONE."""


def validate_receipt(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-VAL-1..6: the receipt is internally consistent.

    :func:`validate_receipt_facts` and then :func:`validate_receipt_claims`."""
    validate_receipt_facts(receipt)
    validate_receipt_claims(receipt)


def validate_receipt_facts(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-MSG-10, R-MSG-12: the fields that name one episode's receipt (its ids,
    evidence digest, nonce, issue time and findings), each well formed.

    The fields no rule relates to any other claim: a receipt that passed
    :func:`validate_receipt_claims` still does with other values in them. An issuer that
    stamps many receipts from one validated template checks only these per receipt
    (:class:`rewardseal.core.receipts.ReceiptIssuer`). The findings' one tie to a claim (a
    VERIFIED receipt has none) is checked here, so it holds for stamped receipts too.
    """
    validate_id(receipt.receipt_id, "receipt_id")
    validate_id(receipt.policy_checkpoint_id, "policy_checkpoint_id")
    validate_id(receipt.episode_id, "episode_id")
    validate_digest(receipt.evidence_digest, "evidence_digest")
    if receipt.task_parameters_digest:  # "" when the contract declares no parameters (R-W-18)
        validate_digest(receipt.task_parameters_digest, "task_parameters_digest")
    if not receipt.nonce:
        raise ValidationError("nonce is required")
    if not receipt.HasField("issued_at"):
        raise ValidationError("issued_at is required")
    validate_findings(receipt)


# Enum members read once here: the wrappers look each name up in Python on every access, and
# every reader of a receipt (each trainer's client, control) runs these checks.
_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
_STATE_ABSENT = CertificateState.CERTIFICATE_STATE_ABSENT
_STATE_CURRENT = CertificateState.CERTIFICATE_STATE_CURRENT
_UNCERTAINTY_NONE_ONLY = frozenset({Uncertainty.UNCERTAINTY_NONE})


def validate_receipt_claims(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-VAL-1..6: everything but :func:`validate_receipt_facts`: contract, update,
    tier, outcome, scalar, certificate and issuer, alone and together."""
    # Each field is read from the message once (a protobuf read is not free) and the rules run
    # in the order below, so a receipt that breaks several is told the first.
    validate_digest(receipt.reward_contract_digest, "reward_contract_digest")
    check_policy_update_field(receipt.policy_update, "policy_update")
    tier = receipt.oracle_tier
    if tier > 3:
        raise ValidationError(f"oracle_tier {tier} is not one of 0, 1, 2, 3")
    outcome, uncertainty = receipt.reward_outcome, receipt.uncertainty
    state = receipt.certificate_state
    check_enum(outcome, RewardOutcome, "reward_outcome", ValidationError)
    check_enum(uncertainty, Uncertainty, "uncertainty", ValidationError)
    check_enum(state, CertificateState, "certificate_state", ValidationError)
    validate_key_id(receipt.issuer_key_id)

    # R-VAL-1
    if receipt.development_only != (tier < CERTIFIABLE_TIER):
        raise ValidationError("development_only must be true exactly at oracle tier 0 or 1")

    # R-VAL-3 and R-VAL-6
    components = receipt.reward_components
    has_scalar = receipt.HasField("scalar_reward")
    if outcome in UNSCORED_OUTCOMES:
        if has_scalar or components:
            raise ValidationError("an unscored outcome carries no scalar and no components")
    else:
        if not has_scalar or not components:
            raise ValidationError("a scored outcome requires a scalar and components")
        scalar = receipt.scalar_reward
        check_float(scalar, "scalar_reward")
        verified = outcome == _VERIFIED
        if verified and scalar <= 0:
            raise ValidationError("a VERIFIED scalar must be > 0")
        if not verified and scalar > 0:
            raise ValidationError("a scored outcome other than VERIFIED must be <= 0")
    if len(components) > MAX_COMPONENTS:
        raise ValidationError(f"at most {MAX_COMPONENTS} reward components")
    for name, value in components.items():
        if not is_bounded_float(value):  # the field's name is only formatted for the error
            check_float(value, f"reward component {preview(name, quoted=False)}")

    # R-VAL-4
    if uncertainty not in _UNCERTAINTY_BY_OUTCOME.get(outcome, _UNCERTAINTY_NONE_ONLY):
        raise ValidationError(
            f"{RewardOutcome.Name(outcome)} cannot carry uncertainty "
            f"{Uncertainty.Name(uncertainty)}"
        )

    # R-VAL-5
    if state == _STATE_ABSENT:
        if (
            receipt.certificate_id
            or receipt.certificate_digest
            or receipt.calibration_corpus_digest
            or receipt.calibration_scope
        ):
            raise ValidationError("an ABSENT certificate state carries no certificate reference")
    else:
        validate_id(receipt.certificate_id, "certificate_id")
        validate_digest(receipt.certificate_digest, "certificate_digest")
        validate_digest(receipt.calibration_corpus_digest, "calibration_corpus_digest")
        check_enum(
            receipt.calibration_scope, CalibrationScope, "calibration_scope", ValidationError
        )

    # R-VAL-2 and R-SCORE-4: certified is exactly "no refusals".
    refusals = receipt.certification_refusals
    if receipt.certified:
        if tier < CERTIFIABLE_TIER:
            raise CertificationRefused(f"a receipt at oracle tier {tier} cannot be certified")
        if state != _STATE_CURRENT:
            raise CertificationRefused("a certified receipt needs a CURRENT certificate")
        if refusals:
            raise CertificationRefused("a certified receipt carries no certification refusals")
    elif not refusals:
        raise ValidationError("an uncertified receipt must say why (certification_refusals)")


def validate_calibration_summary(summary: CalibrationSummary) -> None:
    """R-CAL-2, R-CAL-7: counts that make sense and the digests that name contract and corpus."""
    validate_digest(summary.reward_contract_digest, "reward_contract_digest")
    validate_digest(summary.calibration_corpus_digest, "calibration_corpus_digest")
    validate_digest(summary.checker_configuration_digest, "checker_configuration_digest")
    if summary.trials < 1:
        raise ValidationError("calibration needs at least one trial")
    if summary.false_accepts > summary.trials:
        raise ValidationError("false_accepts cannot exceed trials")
    if summary.fault_classes:
        for fault_class in summary.fault_classes:
            if fault_class.false_accepts > fault_class.trials:
                raise ValidationError(
                    f"fault class {preview(fault_class.name)} false_accepts cannot exceed "
                    "its trials"
                )
        if sum(c.trials for c in summary.fault_classes) != summary.trials:
            raise ValidationError("fault class trials must add up to trials")
        if sum(c.false_accepts for c in summary.fault_classes) != summary.false_accepts:
            raise ValidationError("fault class false accepts must add up to false_accepts")
        # R-CAL-7: draws that were no effective fault, counted apart, add up like the trials.
        if sum(c.benign for c in summary.fault_classes) != summary.benign_trials:
            raise ValidationError("fault class benign draws must add up to benign_trials")
        if sum(c.rejected for c in summary.fault_classes) != summary.rejected_trials:
            raise ValidationError("fault class rejected draws must add up to rejected_trials")
    if not (math.isfinite(summary.confidence) and 0 < summary.confidence < 1):
        raise ValidationError(f"confidence must be in (0, 1), got {summary.confidence!r}")
    check_float(summary.threshold, "threshold")
    if summary.gold_trials < 1:
        raise ValidationError("calibration needs at least one gold control trial (R-CAL-3)")
    if summary.gold_refused:
        raise ValidationError("a gold control trial was not judged VERIFIED (R-CAL-3)")
