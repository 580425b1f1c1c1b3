"""``make demo``: the core rules on the MockMed contract, end to end, with nothing mocked.

Builds the MockMed contract, self-signs a synthetic certificate with a fresh Ed25519 key,
scores every outcome at tier 0 and tier 2 under a current, an expired and a mismatched
certificate, then signs one receipt and verifies it from its exact bytes. Prints one table.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TextIO

from google.protobuf.timestamp_pb2 import Timestamp

from rewardseal.core.calibration import clopper_pearson_upper
from rewardseal.core.certificates import certificate_state, state_name
from rewardseal.core.contract import contract_digest
from rewardseal.core.receipts import EpisodeFacts, build_receipt, open_receipt, seal_receipt
from rewardseal.core.scoring import score
from rewardseal.core.signing import SigningKey, TrustSet, sign_certificate
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    RewardOutcome,
    Uncertainty,
)
from rewardseal_kit.mockmed import CORPUS_DIGEST, THRESHOLD, mockmed_contract

ISSUED_AT = 0
EXPIRY = 100
CURRENT_UPDATE = 42
EXPIRED_UPDATE = ISSUED_AT + EXPIRY


def synthetic_certificate(
    contract: RewardContract, key: SigningKey, *, for_digest: str | None = None
) -> RewardCertificate:
    """A self-signed SYNTHETIC certificate from a 0-of-300 calibration (epsilon 0.0099361)."""
    stamp = Timestamp()
    stamp.FromDatetime(datetime.now(UTC))
    body = RewardCertificate(
        certificate_id="cert.mockmed.demo" + ("" if for_digest is None else ".other"),
        reward_contract_digest=for_digest or contract_digest(contract),
        checker_configuration_digest=contract.oracle.oracle_recipe_digest,
        epsilon=clopper_pearson_upper(0, 300, 0.05),
        delta=0.05,
        threshold=THRESHOLD,
        calibration_corpus_digest=CORPUS_DIGEST,
        calibration_scope=CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
        issued_at_policy_update=ISSUED_AT,
        expiry_policy_updates=EXPIRY,
        issued_at=stamp,
        issuer=CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
    )
    return sign_certificate(body, key)


def _scalar(value: float | None) -> str:
    return "unscored" if value is None else f"{value:+.1f}"


def run(out: TextIO = sys.stdout) -> int:
    """Print the demonstration table; return 0 when every rule held."""
    key = SigningKey.generate()
    tier2 = mockmed_contract(tier=2)
    current = synthetic_certificate(tier2, key)
    mismatched = synthetic_certificate(
        tier2, key, for_digest=contract_digest(mockmed_contract(tier=0))
    )
    conditions = [
        ("tier 0, current cert", 0, current, CURRENT_UPDATE),
        ("tier 2, current cert", 2, current, CURRENT_UPDATE),
        ("tier 2, expired cert", 2, current, EXPIRED_UPDATE),
        ("tier 2, other contract", 2, mismatched, CURRENT_UPDATE),
    ]
    out.write(f"MockMed contract (tier 2) digest {contract_digest(tier2)}\n")
    out.write(f"worker key {key.key_id}\n\n")
    header = (
        f"{'outcome':<24} {'condition':<24} {'state':<9} {'scalar':>9} {'certified':>9} "
        f"{'dev':>5}  first refusal\n"
    )
    out.write(header + "-" * (len(header) + 20) + "\n")
    for outcome in RewardOutcome.values():
        if outcome == RewardOutcome.REWARD_OUTCOME_UNSPECIFIED:
            continue
        for label, tier, certificate, update in conditions:
            result = score(
                outcome, tier=tier, certificate=certificate, policy_update=update, contract=tier2
            )
            state = state_name(certificate_state(certificate, update))
            first_refusal = result.refusals[0] if result.refusals else "-"
            out.write(
                f"{RewardOutcome.Name(outcome).removeprefix('REWARD_OUTCOME_'):<24} {label:<24} "
                f"{state:<9} {_scalar(result.scalar):>9} {result.certified!s:>9} "
                f"{result.development_only!s:>5}  {first_refusal}\n"
            )
    receipt = build_receipt(
        EpisodeFacts(
            receipt_id="rcpt.demo.0001",
            episode_id="episode_honest_01",
            policy_checkpoint_id="policy_checkpoint_mockmed_0",
            policy_update=CURRENT_UPDATE,
            outcome=RewardOutcome.REWARD_OUTCOME_VERIFIED,
            uncertainty=Uncertainty.UNCERTAINTY_NONE,
            tier=2,
            evidence_digest=contract_digest(tier2),
            nonce="demo-nonce-0001",
            issued_at=datetime.now(UTC),
        ),
        contract=tier2,
        certificate=current,
        issuer_key_id=key.key_id,
    )
    envelope = seal_receipt(receipt, key)
    verified = open_receipt(envelope, TrustSet([key.public_key])).receipt
    ok = verified == receipt and verified.certified
    scope = CalibrationScope.Name(verified.calibration_scope).removeprefix("CALIBRATION_SCOPE_")
    out.write(
        f"\nsigned receipt {receipt.receipt_id}: {len(envelope.payload)} payload bytes, "
        f"verified from exact bytes: {ok}, certified: {verified.certified}, scope: {scope}\n"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(run())
