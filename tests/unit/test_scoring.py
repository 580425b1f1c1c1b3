"""score() and receipt_refusals(): outcome->scalar table and refusal sentences (R-SCORE-*)."""

from __future__ import annotations

import pytest
from support.builders import EXPIRY_UPDATES, ISSUED_AT_UPDATE, make_certificate, make_facts

from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.receipts import build_receipt
from rewardseal.core.scoring import (
    RECEIPT_CERTIFICATE_DIFFERS,
    RECEIPT_CERTIFICATE_MISSING,
    RECEIPT_CONTRACT_MISMATCH,
    receipt_refusals,
    revocation_unknown_sentence,
    score,
)
from rewardseal.v1.contract_pb2 import ScoringPolicy
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.mockmed import mockmed_contract

Outcome = RewardOutcome

DEFAULT_TABLE = [
    (Outcome.REWARD_OUTCOME_VERIFIED, 1.0),
    (Outcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, 0.0),
    (Outcome.REWARD_OUTCOME_REFUSED, 0.0),
    (Outcome.REWARD_OUTCOME_REJECTED_POLICY, 0.0),
    (Outcome.REWARD_OUTCOME_WRONG_EFFECT, -1.0),
    (Outcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED, None),
    (Outcome.REWARD_OUTCOME_FAILED_PLATFORM, None),
]


def default_policy_contract():
    contract = mockmed_contract()
    contract.ClearField("scoring_policy")
    return contract


@pytest.mark.parametrize(
    ("outcome", "expected"), DEFAULT_TABLE, ids=[Outcome.Name(o) for o, _ in DEFAULT_TABLE]
)
def test_outcome_to_scalar_under_default_policy(outcome, expected):
    result = score(
        outcome, tier=2, certificate=None, policy_update=0, contract=default_policy_contract()
    )
    if expected is None:
        assert result.scalar is None  # R-SCORE-2: never 0.0
    else:
        assert result.scalar == expected
        assert isinstance(result.scalar, float)


DECLARED = ScoringPolicy(
    verified_reward=2.5,
    halted_before_effect_reward=-0.1,
    refused_reward=-0.2,
    rejected_policy_reward=-0.3,
    wrong_effect_reward=-4.0,
)
DECLARED_TABLE = [
    (Outcome.REWARD_OUTCOME_VERIFIED, 2.5),
    (Outcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, -0.1),
    (Outcome.REWARD_OUTCOME_REFUSED, -0.2),
    (Outcome.REWARD_OUTCOME_REJECTED_POLICY, -0.3),
    (Outcome.REWARD_OUTCOME_WRONG_EFFECT, -4.0),
    (Outcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED, None),
    (Outcome.REWARD_OUTCOME_FAILED_PLATFORM, None),
]


@pytest.mark.parametrize(
    ("outcome", "expected"), DECLARED_TABLE, ids=[Outcome.Name(o) for o, _ in DECLARED_TABLE]
)
def test_outcome_to_scalar_under_declared_policy(outcome, expected):
    contract = mockmed_contract()
    contract.scoring_policy.CopyFrom(DECLARED)
    result = score(outcome, tier=2, certificate=None, policy_update=0, contract=contract)
    assert result.scalar == expected


def test_seeded_mockmed_contract_declares_zero_wrong_effect():
    result = score(
        Outcome.REWARD_OUTCOME_WRONG_EFFECT,
        tier=2,
        certificate=None,
        policy_update=0,
        contract=mockmed_contract(),
    )
    assert result.scalar == 0.0


@pytest.mark.parametrize(("tier", "dev"), [(0, True), (1, True), (2, False), (3, False)])
def test_development_only_exactly_below_tier_two(tier, dev):
    contract = mockmed_contract()
    result = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=tier,
        certificate=make_certificate(contract),
        policy_update=ISSUED_AT_UPDATE,
        contract=contract,
    )
    assert result.development_only is dev
    assert result.certified is (not dev)


def test_certified_with_current_matching_certificate():
    contract = mockmed_contract()
    result = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=2,
        certificate=make_certificate(contract),
        policy_update=ISSUED_AT_UPDATE,
        contract=contract,
    )
    assert result == (1.0, True, False, ())


@pytest.mark.parametrize("outcome", [o for o, _ in DEFAULT_TABLE], ids=Outcome.Name)
def test_outcome_never_enters_certified(outcome):
    contract = mockmed_contract()
    result = score(
        outcome,
        tier=2,
        certificate=make_certificate(contract),
        policy_update=ISSUED_AT_UPDATE,
        contract=contract,
    )
    assert result.certified is True


def test_negative_policy_update_raises():
    with pytest.raises(ValidationError, match="negative"):
        score(
            Outcome.REWARD_OUTCOME_VERIFIED,
            tier=2,
            certificate=None,
            policy_update=-1,
            contract=mockmed_contract(),
        )


@pytest.mark.parametrize("outcome", [Outcome.REWARD_OUTCOME_UNSPECIFIED, 99])
def test_unknown_outcome_raises(outcome):
    with pytest.raises(ValidationError):
        score(outcome, tier=2, certificate=None, policy_update=0, contract=mockmed_contract())


def test_unknown_tier_raises():
    with pytest.raises(ValidationError, match="tier"):
        score(
            Outcome.REWARD_OUTCOME_VERIFIED,
            tier=4,
            certificate=None,
            policy_update=0,
            contract=mockmed_contract(),
        )


TIER_SENTENCE = "oracle tier 0 is development only; certification needs tier 2 or above"


def refusals_for(*, tier=2, update=ISSUED_AT_UPDATE, revoked=False, certificate=None, **cert):
    contract = mockmed_contract()
    if certificate is None and cert is not None:
        certificate = make_certificate(contract, **cert)
    return score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=tier,
        certificate=certificate,
        policy_update=update,
        contract=contract,
        revoked=revoked,
    ).refusals


REFUSAL_CASES = [
    pytest.param({"tier": 0}, [TIER_SENTENCE], id="tier-0-development-only"),
    pytest.param(
        {"tier": 1},
        ["oracle tier 1 is development only; certification needs tier 2 or above"],
        id="tier-1-development-only",
    ),
    pytest.param({"revoked": True}, ["certificate cert.mockmed.0001 is revoked"], id="revoked"),
    pytest.param(
        {"update": ISSUED_AT_UPDATE - 1},
        ["certificate cert.mockmed.0001 is not current at policy update 99 (state NOT_YET_VALID)"],
        id="not-yet-valid",
    ),
    pytest.param(
        {"update": ISSUED_AT_UPDATE + EXPIRY_UPDATES},
        ["certificate cert.mockmed.0001 is not current at policy update 150 (state EXPIRED)"],
        id="expired",
    ),
    pytest.param(
        {"reward_contract_digest": "sha256:" + "0" * 64},
        ["certificate cert.mockmed.0001 names another reward contract"],
        id="another-contract",
    ),
    pytest.param(
        {"epsilon": 0.248885},
        ["certificate epsilon 0.248885 is above the contract's maximum 0.05"],
        id="epsilon-above",
    ),
    pytest.param(
        {"delta": 0.1},
        ["certificate delta 0.1 is above the contract's maximum 0.05"],
        id="delta-above",
    ),
    pytest.param(
        {"threshold": 0.7},
        ["certificate threshold 0.7 differs from the contract's threshold 0.5"],
        id="threshold-differs",
    ),
    pytest.param(
        {"calibration_corpus_digest": "sha256:" + "1" * 64},
        ["certificate calibration corpus differs from the contract's calibration corpus"],
        id="corpus-differs",
    ),
    pytest.param(
        {"expiry_policy_updates": 1001},
        ["certificate expiry of 1001 policy updates is longer than the contract's maximum of 1000"],
        id="expiry-longer",
    ),
]


@pytest.mark.parametrize(("kwargs", "expected"), REFUSAL_CASES)
def test_each_refusal_sentence(kwargs, expected):
    assert list(refusals_for(**kwargs)) == expected


def test_no_certificate_sentence():
    contract = mockmed_contract()
    result = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=2,
        certificate=None,
        policy_update=0,
        contract=contract,
    )
    assert result.refusals == ("no certificate was given for this reward contract",)
    assert result.certified is False


def test_all_refusals_in_the_stated_order():
    refusals = refusals_for(
        tier=0,
        revoked=True,
        update=ISSUED_AT_UPDATE - 1,
        reward_contract_digest="sha256:" + "0" * 64,
        epsilon=0.3,
        delta=0.2,
        threshold=0.9,
        calibration_corpus_digest="sha256:" + "1" * 64,
        expiry_policy_updates=5000,
    )
    prefixes = [
        "oracle tier 0",
        "certificate cert.mockmed.0001 is revoked",
        "certificate cert.mockmed.0001 is not current",
        "certificate cert.mockmed.0001 names another",
        "certificate epsilon",
        "certificate delta",
        "certificate threshold",
        "certificate calibration corpus",
        "certificate expiry",
    ]
    assert len(refusals) == len(prefixes)
    for sentence, prefix in zip(refusals, prefixes, strict=True):
        assert sentence.startswith(prefix)


def test_tier_sentence_precedes_no_certificate():
    result = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=0,
        certificate=None,
        policy_update=0,
        contract=mockmed_contract(),
    )
    assert result.refusals == (
        TIER_SENTENCE,
        "no certificate was given for this reward contract",
    )


# --- receipt_refusals (R-SCORE-5) ---


def issued_receipt(*, tier=2, update=ISSUED_AT_UPDATE, with_certificate=True, revoked=False):
    contract = mockmed_contract()
    certificate = make_certificate(contract) if with_certificate else None
    receipt = build_receipt(
        make_facts(tier=tier, policy_update=update),
        contract=contract,
        certificate=certificate,
        issuer_key_id="ed25519:sha256:" + "a" * 64,
        revoked=revoked,
    )
    return receipt, contract, certificate


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"tier": 0},
        {"update": ISSUED_AT_UPDATE + EXPIRY_UPDATES},
        {"with_certificate": False},
        {"revoked": True},
    ],
    ids=["certified", "tier0", "expired", "absent", "revoked"],
)
def test_receipt_refusals_agree_with_issue_time(kwargs):
    receipt, contract, certificate = issued_receipt(**kwargs)
    assert receipt_refusals(receipt, contract, certificate) == list(receipt.certification_refusals)
    assert receipt.certified is (not receipt.certification_refusals)


def test_receipt_refusals_other_contract_first():
    receipt, _, certificate = issued_receipt()
    other = mockmed_contract(tier=0)
    refusals = receipt_refusals(receipt, other, certificate)
    assert refusals[0] == RECEIPT_CONTRACT_MISMATCH
    # The certificate names the tier-2 contract, so score() adds its own sentence too.
    assert "certificate cert.mockmed.0001 names another reward contract" in refusals


def test_receipt_refusals_certificate_not_given():
    receipt, contract, _ = issued_receipt()
    refusals = receipt_refusals(receipt, contract, None)
    assert refusals == [
        RECEIPT_CERTIFICATE_MISSING,
        "no certificate was given for this reward contract",
    ]


def test_receipt_refusals_different_certificate():
    receipt, contract, _ = issued_receipt()
    other = make_certificate(contract, certificate_id="cert.mockmed.0002")
    refusals = receipt_refusals(receipt, contract, other)
    assert refusals[0] == RECEIPT_CERTIFICATE_DIFFERS
    assert certificate_digest(other) != receipt.certificate_digest


def test_receipt_refusals_are_deduplicated_in_order():
    receipt, _, _ = issued_receipt(with_certificate=False)
    refusals = receipt_refusals(receipt, mockmed_contract(tier=0), None)
    assert refusals == [
        RECEIPT_CONTRACT_MISMATCH,
        "no certificate was given for this reward contract",
    ]
    assert len(refusals) == len(set(refusals))


# --- A reader that follows revocations but holds no fresh list (R-C-4) ---


def test_revocation_unknown_refuses_certification_with_its_own_sentence():
    contract = mockmed_contract()
    result = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=2,
        certificate=make_certificate(contract),
        policy_update=ISSUED_AT_UPDATE,
        contract=contract,
        revocation_unknown=True,
    )
    assert result.scalar == 1.0
    assert result.certified is False
    assert result.refusals == (revocation_unknown_sentence("cert.mockmed.0001"),)


def test_known_revocation_wins_over_unknown_status():
    refusals = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=2,
        certificate=make_certificate(mockmed_contract()),
        policy_update=ISSUED_AT_UPDATE,
        contract=mockmed_contract(),
        revoked=True,
        revocation_unknown=True,
    ).refusals
    assert refusals == ("certificate cert.mockmed.0001 is revoked",)


def test_revocation_unknown_sentence_sits_where_revoked_would():
    contract = mockmed_contract()
    refusals = score(
        Outcome.REWARD_OUTCOME_VERIFIED,
        tier=0,
        certificate=make_certificate(contract),
        policy_update=ISSUED_AT_UPDATE - 1,
        contract=contract,
        revocation_unknown=True,
    ).refusals
    assert refusals[0].startswith("oracle tier 0")
    assert refusals[1] == revocation_unknown_sentence("cert.mockmed.0001")
    assert refusals[2].startswith("certificate cert.mockmed.0001 is not current")


def test_receipt_refusals_agree_when_revocation_status_was_unknown():
    contract = mockmed_contract()
    certificate = make_certificate(contract)
    receipt = build_receipt(
        make_facts(),
        contract=contract,
        certificate=certificate,
        issuer_key_id="ed25519:sha256:" + "a" * 64,
        revocation_unknown=True,
    )
    assert receipt.certified is False
    assert receipt_refusals(receipt, contract, certificate) == list(receipt.certification_refusals)
