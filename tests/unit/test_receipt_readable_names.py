"""Readable names on the Python receipt view (issue 26 item 6): outcome, scope and certificate
state as strings, the enum name without its prefix in lower case, from real signed receipts."""

from __future__ import annotations

import pytest
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.core.receipts import (
    OpenedReceipt,
    build_receipt,
    certificate_state_word,
    open_receipt,
    outcome_word,
    scope_word,
    seal_receipt,
)
from rewardseal.core.signing import TrustSet
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    CertificateState,
    RewardOutcome,
)
from rewardseal_mockmed.contract import mockmed_contract

TRUST = TrustSet([TEST_KEY.public_key])


def opened(outcome: int, **certificate_fields: object) -> OpenedReceipt:
    contract = mockmed_contract()
    certificate = make_certificate(contract, **certificate_fields) if certificate_fields else None
    receipt = build_receipt(
        make_facts(outcome),  # type: ignore[arg-type]
        contract=contract,
        certificate=certificate,
        issuer_key_id=TEST_KEY.key_id,
    )
    return open_receipt(seal_receipt(receipt, TEST_KEY), TRUST)


@pytest.mark.parametrize("outcome", [v for v in RewardOutcome.values() if v])
def test_outcome_is_the_enum_name_without_its_prefix(outcome: int) -> None:
    receipt = opened(outcome)
    expected = RewardOutcome.Name(outcome).removeprefix("REWARD_OUTCOME_").lower()
    assert receipt.outcome == expected
    assert isinstance(receipt.outcome, str)


def test_named_outcomes_scopes_and_states() -> None:
    wrong = opened(RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT, certificate_id="cert.names.1")
    assert wrong.outcome == "wrong_effect"
    assert wrong.scope == "synthetic"
    assert wrong.certificate_state == "current"
    bare = opened(RewardOutcome.REWARD_OUTCOME_VERIFIED)
    assert (bare.outcome, bare.scope, bare.certificate_state) == (
        "verified",
        "unspecified",
        "absent",
    )
    production = opened(
        RewardOutcome.REWARD_OUTCOME_VERIFIED,
        calibration_scope=CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
        issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
    )
    assert production.scope == "production"


def test_every_word_and_an_unknown_number() -> None:
    assert [scope_word(v) for v in CalibrationScope.values()] == [
        "unspecified",
        "synthetic",
        "production",
    ]
    assert certificate_state_word(CertificateState.CERTIFICATE_STATE_NOT_YET_VALID) == (
        "not_yet_valid"
    )
    assert certificate_state_word(CertificateState.CERTIFICATE_STATE_REVOKED) == "revoked"
    assert outcome_word(RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM) == "failed_platform"
    assert outcome_word(999) == "unknown(999)"
