"""The one binding rule (R-T-5): check_receipt_answers, its error, and the grader score.

A receipt answers a request when it names the receipt id asked for, the episode, the policy
update, the checkpoint and the contract of the descriptor sent; fields the caller does not know
are not checked. The attacks themselves run through a real man in the middle in
tests/worker/test_receipt_binding.py; this file pins the pure rule.
"""

from __future__ import annotations

import pytest
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import ReceiptMismatch, SignatureError, Unscored
from rewardseal.core.receipts import (
    ExpectedReceipt,
    build_receipt,
    check_receipt_answers,
    grader_score,
)
from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt
from rewardseal_mockmed.contract import mockmed_contract


def receipt(
    outcome: RewardOutcome.ValueType = RewardOutcome.REWARD_OUTCOME_VERIFIED,
) -> RewardEvidenceReceipt:
    contract = mockmed_contract()
    return build_receipt(
        make_facts(outcome),
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )


def answered(got: RewardEvidenceReceipt) -> ExpectedReceipt:
    """What a request this receipt honestly answers expects."""
    return ExpectedReceipt.for_descriptor(
        make_descriptor(
            episode_id=got.episode_id,
            policy_checkpoint_id=got.policy_checkpoint_id,
            policy_update=got.policy_update,
            reward_contract_digest=got.reward_contract_digest,
        ),
        receipt_id=got.receipt_id,
    )


def test_a_receipt_answers_its_own_request_and_unknown_fields_are_not_checked() -> None:
    got = receipt()
    check_receipt_answers(got, answered(got))
    check_receipt_answers(got, ExpectedReceipt(episode_id=got.episode_id))
    check_receipt_answers(got, ExpectedReceipt())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("receipt_id", "rcpt.episode.other"),
        ("episode_id", "episode.other"),
        ("policy_update", 50),
        ("policy_checkpoint_id", "policy.checkpoint.other"),
        ("reward_contract_digest", "sha256:" + "1" * 64),
        ("task_parameters_digest", "sha256:" + "2" * 64),  # R-W-18: other task parameters
    ],
)
def test_each_bound_field_refuses_another_value(field: str, value: object) -> None:
    got = receipt()
    expected = answered(got)
    wrong = ExpectedReceipt(**{**expected.__dict__, field: value})
    with pytest.raises(ReceiptMismatch) as caught:
        check_receipt_answers(got, wrong)
    assert isinstance(caught.value, SignatureError)
    assert caught.value.reason == "receipt_mismatch"
    assert caught.value.metadata == {"field": field}
    assert field in caught.value.message
    assert str(value)[:40] in caught.value.message
    assert str(getattr(got, field))[:40] in caught.value.message


def test_long_values_are_quoted_short() -> None:
    got = receipt()
    hostile = "episode." + "x" * 5000
    with pytest.raises(ReceiptMismatch) as caught:
        check_receipt_answers(got, ExpectedReceipt(episode_id=hostile))
    assert len(caught.value.message) < 300
    assert f"({len(hostile)} characters)" in caught.value.message


def test_the_contract_digest_is_the_digest_of_the_contract() -> None:
    # The expectation a trainer builds from its own contract matches the worker's receipts.
    got = receipt()
    check_receipt_answers(
        got, ExpectedReceipt(reward_contract_digest=contract_digest(mockmed_contract()))
    )


def test_grader_score_pays_verified_only_and_never_scores_unscored() -> None:
    assert grader_score(receipt()) == 1.0
    assert grader_score(receipt(RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT)) == 0.0
    with pytest.raises(Unscored):
        grader_score(receipt(RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM))
