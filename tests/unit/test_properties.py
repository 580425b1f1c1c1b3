"""Property tests over the shared rules (hypothesis).

(a) R-MSG-1/R-DIG-1: the contract digest is unchanged under any permutation of components and
    identity keys.
(b) R-MSG-7/R-MSG-8/R-VAL-*: a receipt built by build_receipt for any outcome, tier, policy update,
    certificate (or none) and revocation always re-validates and survives seal/open.
(c) R-SCORE-5: receipt_refusals re-derives exactly the receipt's own refusals, and
    receipt.certified == (not refusals) == score(...).certified.
(d) R-SCORE-2: score().scalar is None exactly for RECONCILIATION_REQUIRED and FAILED_PLATFORM,
    and never 0.0 for them, whatever the scoring policy says.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.core.certificates import MAX_POLICY_UPDATE, certificate_state
from rewardseal.core.contract import SCORING_DEFAULTS, UNSCORED_OUTCOMES, contract_digest
from rewardseal.core.receipts import build_receipt, is_unscored, open_receipt, seal_receipt
from rewardseal.core.scoring import receipt_refusals, score
from rewardseal.core.signing import TrustSet
from rewardseal.core.validation import validate_contract, validate_receipt
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardComponent, RewardContract, ScoringPolicy
from rewardseal.v1.enums_pb2 import CertificateState, RewardOutcome, Uncertainty
from rewardseal_kit.mockmed import mockmed_contract

Outcome = RewardOutcome
TRUST = TrustSet([TEST_KEY.public_key])
PROPERTY_SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

ALL_OUTCOMES = [o for o in Outcome.values() if o != Outcome.REWARD_OUTCOME_UNSPECIFIED]
UNCERTAINTY_BY_OUTCOME = {
    Outcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED: [
        Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN,
        Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN,
    ],
    Outcome.REWARD_OUTCOME_FAILED_PLATFORM: [Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE],
}
"""R-VAL-4: what each outcome may carry; every other outcome carries NONE."""

names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
weights = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
policy_updates = st.one_of(
    st.integers(min_value=0, max_value=MAX_POLICY_UPDATE),
    st.integers(min_value=0, max_value=300),  # around the builder's certificate window
    st.sampled_from([0, MAX_POLICY_UPDATE, MAX_POLICY_UPDATE - 1]),
)


# ---------------------------------------------------------------------------------------------
# (a) digest under permutation
# ---------------------------------------------------------------------------------------------


def contract_with(keys: list[str], components: list[tuple[str, float]]) -> RewardContract:
    contract = mockmed_contract()
    del contract.oracle.identity_keys[:]
    contract.oracle.identity_keys.extend(keys)
    del contract.components[:]
    contract.components.extend(RewardComponent(name=n, weight=w) for n, w in components)
    return contract


@st.composite
def permuted_contracts(draw: st.DrawFn) -> tuple[RewardContract, RewardContract]:
    keys = draw(st.lists(names, min_size=1, max_size=32, unique=True))
    component_names = draw(st.lists(names, min_size=1, max_size=64, unique=True))
    components = [(n, draw(weights)) for n in component_names]
    shuffled_keys = draw(st.permutations(keys))
    shuffled_components = draw(st.permutations(components))
    return contract_with(keys, components), contract_with(shuffled_keys, shuffled_components)


@PROPERTY_SETTINGS
@given(permuted_contracts())
def test_contract_digest_is_invariant_under_permutation(pair):
    original, permuted = pair
    validate_contract(original)
    validate_contract(permuted)
    assert contract_digest(original) == contract_digest(permuted)


@PROPERTY_SETTINGS
@given(permuted_contracts(), st.data())
def test_contract_digest_sees_a_changed_weight_in_any_order(pair, data):
    # The permutation invariance is not blindness: moving a weight to another name changes it.
    original, _ = pair
    index = data.draw(st.integers(min_value=0, max_value=len(original.components) - 1))
    changed = RewardContract()
    changed.CopyFrom(original)
    changed.components[index].weight = original.components[index].weight * 2
    assert contract_digest(changed) != contract_digest(original)


# ---------------------------------------------------------------------------------------------
# Receipts for every combination
# ---------------------------------------------------------------------------------------------


def scoring_policies() -> st.SearchStrategy[ScoringPolicy]:
    """A scoring policy with every field either unset or set to a value R-MSG-2 allows."""
    positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)
    non_positive = st.one_of(
        st.just(0.0), st.floats(min_value=-1e6, max_value=0.0, allow_nan=False)
    )
    fields = {
        name: st.one_of(st.none(), positive if name == "verified_reward" else non_positive)
        for name in SCORING_DEFAULTS
    }
    return st.fixed_dictionaries(fields).map(
        lambda values: ScoringPolicy(**{k: v for k, v in values.items() if v is not None})
    )


@dataclass(frozen=True)
class Case:
    contract: RewardContract
    certificate: RewardCertificate | None
    outcome: RewardOutcome.ValueType
    uncertainty: Uncertainty.ValueType
    tier: int
    policy_update: int
    revoked: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    contract = mockmed_contract()
    if draw(st.booleans()):
        contract.scoring_policy.CopyFrom(draw(scoring_policies()))
    if draw(st.booleans()):
        component_names = draw(st.lists(names, min_size=1, max_size=8, unique=True))
        del contract.components[:]
        contract.components.extend(
            RewardComponent(name=n, weight=draw(weights)) for n in component_names
        )
    certificate = None
    if draw(st.booleans()):
        overrides: dict[str, object] = {
            "issued_at_policy_update": draw(
                st.one_of(st.just(100), st.integers(0, MAX_POLICY_UPDATE))
            ),
            "expiry_policy_updates": draw(st.sampled_from([1, 50, 1000, 1001])),
        }
        if draw(st.booleans()):  # a certificate that falls short of the policy somewhere
            overrides.update(
                draw(
                    st.sampled_from(
                        [
                            {"epsilon": 0.2},
                            {"delta": 0.1},
                            {"threshold": 0.6},
                            {"calibration_corpus_digest": "sha256:" + "1" * 64},
                            {"reward_contract_digest": "sha256:" + "0" * 64},
                        ]
                    )
                )
            )
        certificate = make_certificate(contract, **overrides)
    outcome = draw(st.sampled_from(ALL_OUTCOMES))
    uncertainty = draw(
        st.sampled_from(UNCERTAINTY_BY_OUTCOME.get(outcome, [Uncertainty.UNCERTAINTY_NONE]))
    )
    return Case(
        contract=contract,
        certificate=certificate,
        outcome=outcome,
        uncertainty=uncertainty,
        tier=draw(st.integers(min_value=0, max_value=3)),
        policy_update=draw(policy_updates),
        revoked=draw(st.booleans()),
    )


def receipt_for(case: Case):
    facts = make_facts(
        case.outcome,
        tier=case.tier,
        policy_update=case.policy_update,
        uncertainty=case.uncertainty,
    )
    return build_receipt(
        facts,
        contract=case.contract,
        certificate=case.certificate,
        issuer_key_id=TEST_KEY.key_id,
        revoked=case.revoked,
    )


def score_for(case: Case):
    return score(
        case.outcome,
        tier=case.tier,
        certificate=case.certificate,
        policy_update=case.policy_update,
        contract=case.contract,
        revoked=case.revoked,
    )


@PROPERTY_SETTINGS
@given(cases())
def test_built_receipt_revalidates_and_survives_seal_and_open(case):
    receipt = receipt_for(case)
    validate_receipt(receipt)
    envelope = seal_receipt(receipt, TEST_KEY)
    assert envelope.unscored is is_unscored(receipt)
    opened = open_receipt(envelope, TRUST).receipt
    assert opened == receipt
    validate_receipt(opened)
    assert receipt.certificate_state == certificate_state(
        case.certificate, case.policy_update, revoked=case.revoked
    )
    assert receipt.development_only is (case.tier < 2)


@PROPERTY_SETTINGS
@given(cases())
def test_receipt_refusals_rederive_the_receipt(case):
    receipt = receipt_for(case)
    refusals = receipt_refusals(receipt, case.contract, case.certificate)
    assert refusals == list(receipt.certification_refusals)
    assert refusals == list(score_for(case).refusals)
    assert receipt.certified is (not refusals)
    assert receipt.certified is score_for(case).certified
    if receipt.certified:
        assert receipt.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
        assert case.tier >= 2


@PROPERTY_SETTINGS
@given(cases())
def test_scalar_is_none_exactly_for_unscored_outcomes(case):
    result = score_for(case)
    receipt = receipt_for(case)
    if case.outcome in UNSCORED_OUTCOMES:
        assert result.scalar is None
        assert result.scalar != 0.0
        assert not receipt.HasField("scalar_reward")
        assert len(receipt.reward_components) == 0
    else:
        assert isinstance(result.scalar, float)
        assert receipt.HasField("scalar_reward")
        assert receipt.scalar_reward == result.scalar
        if case.outcome == Outcome.REWARD_OUTCOME_VERIFIED:
            assert result.scalar > 0
        else:
            assert result.scalar <= 0


@PROPERTY_SETTINGS
@given(
    st.sampled_from(sorted(UNSCORED_OUTCOMES)),
    scoring_policies(),
    st.integers(min_value=0, max_value=3),
    policy_updates,
)
def test_unscored_outcome_has_no_scalar_under_any_policy(outcome, policy, tier, update):
    contract = mockmed_contract()
    contract.scoring_policy.CopyFrom(policy)
    result = score(outcome, tier=tier, certificate=None, policy_update=update, contract=contract)
    assert result.scalar is None
