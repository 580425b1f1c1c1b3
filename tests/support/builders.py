"""Builders for valid messages that tests mutate one field at a time."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from rewardseal.core.calibration import clopper_pearson_upper
from rewardseal.core.contract import contract_digest
from rewardseal.core.receipts import EpisodeFacts
from rewardseal.core.signing import SigningKey, sign_certificate
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    RewardOutcome,
    Uncertainty,
)
from rewardseal_kit.mockmed import CORPUS_DIGEST, THRESHOLD, mockmed_contract

FIXED_TIME = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
ISSUED_AT_UPDATE = 100
EXPIRY_UPDATES = 50
TEST_KEY = SigningKey.from_seed(bytes(range(32)))


def make_certificate(
    contract: RewardContract | None = None,
    *,
    key: SigningKey = TEST_KEY,
    **overrides: object,
) -> RewardCertificate:
    """A self-signed synthetic certificate that satisfies the MockMed contract's policy."""
    contract = contract or mockmed_contract()
    stamp = Timestamp()
    stamp.FromDatetime(FIXED_TIME)
    fields: dict[str, object] = {
        "certificate_id": "cert.mockmed.0001",
        "reward_contract_digest": contract_digest(contract),
        "checker_configuration_digest": "sha256:" + "c" * 64,
        "epsilon": clopper_pearson_upper(0, 300, 0.05),
        "delta": 0.05,
        "threshold": THRESHOLD,
        "calibration_corpus_digest": CORPUS_DIGEST,
        "calibration_scope": CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
        "issued_at_policy_update": ISSUED_AT_UPDATE,
        "expiry_policy_updates": EXPIRY_UPDATES,
        "issued_at": stamp,
        "issuer": CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
    }
    fields.update(overrides)
    return sign_certificate(RewardCertificate(**fields), key)  # type: ignore[arg-type]


def make_facts(
    outcome: RewardOutcome.ValueType = RewardOutcome.REWARD_OUTCOME_VERIFIED,
    *,
    tier: int = 2,
    policy_update: int = ISSUED_AT_UPDATE,
    uncertainty: Uncertainty.ValueType | None = None,
    episode_id: str = "episode.0001",
) -> EpisodeFacts:
    """Facts for one judged episode, with the uncertainty R-VAL-4 expects for the outcome."""
    if uncertainty is None:
        uncertainty = {
            RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED: (
                Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN
            ),
            RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM: (
                Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE
            ),
        }.get(outcome, Uncertainty.UNCERTAINTY_NONE)
    return EpisodeFacts(
        receipt_id=f"rcpt.{episode_id}",
        episode_id=episode_id,
        policy_checkpoint_id="policy.checkpoint.0001",
        policy_update=policy_update,
        outcome=outcome,
        uncertainty=uncertainty,
        tier=tier,
        evidence_digest="sha256:" + "e" * 64,
        nonce="00112233445566778899aabbccddeeff",
        issued_at=FIXED_TIME,
    )
