"""The trainer-side rules every adapter shares (rewardseal.trainers.groups, docs/spec.md §11).

Receipts here are real: built, scored and signed by the same code the worker runs, then opened
(verified) the way a client opens them, so a SampleResult reads the fields a trainer would read.
"""

from __future__ import annotations

import grpc
import pytest
from support.builders import (
    EXPIRY_UPDATES,
    ISSUED_AT_UPDATE,
    TEST_KEY,
    make_certificate,
    make_facts,
)

from rewardseal.core.errors import (
    CertificationRefused,
    ContractMismatch,
    IdentityBusy,
    PermissionDenied,
    RewardSealError,
    Unauthenticated,
    Unavailable,
    ValidationError,
)
from rewardseal.core.receipts import build_receipt, open_receipt, seal_receipt
from rewardseal.core.signing import TrustSet
from rewardseal.core.validation import ID_PATTERN
from rewardseal.rpc.status import from_parts
from rewardseal.rpc.worker_client import VerifiedReceipt
from rewardseal.trainers.groups import (
    DEVELOPMENT_ONLY,
    ERROR_OUTCOME,
    METADATA_COLUMNS,
    column,
    contiguous_groups,
    enforce_certified,
    fill_unscored,
    is_setup_error,
    is_transient,
    metadata_columns,
    mint_episode_id,
    sample_results,
)
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.mockmed import mockmed_contract

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
RECONCILIATION_REQUIRED = RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED
FAILED_PLATFORM = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
TRUST = TrustSet([TEST_KEY.public_key])


def receipt(
    outcome: RewardOutcome.ValueType,
    episode_id: str,
    *,
    update: int = ISSUED_AT_UPDATE,
    tier: int = 2,
) -> VerifiedReceipt:
    """A signed, verified receipt for ``outcome`` under the test certificate at ``update``."""
    contract = mockmed_contract()
    built = build_receipt(
        make_facts(outcome, tier=tier, policy_update=update, episode_id=episode_id),
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )
    opened = open_receipt(seal_receipt(built, TEST_KEY), TRUST)
    return VerifiedReceipt(opened.receipt, opened.envelope)


# --------------------------------------------------------------------------------------------
# fill_unscored (R-T-1)
# --------------------------------------------------------------------------------------------


def test_unscored_takes_the_mean_of_its_scored_group_mates() -> None:
    assert fill_unscored([1.0, 0.0, None, None], [0, 0, 0, 0]) == [1.0, 0.0, 0.5, 0.5]


def test_groups_are_filled_separately() -> None:
    scalars = [1.0, None, 0.0, None, None, 0.25]
    assert fill_unscored(scalars, [0, 0, 1, 1, 2, 2]) == [1.0, 1.0, 0.0, 0.0, 0.25, 0.25]


def test_all_unscored_group_stays_none_never_zero() -> None:
    filled = fill_unscored([None, None, 1.0, None], [0, 0, 1, 1])
    assert filled == [None, None, 1.0, 1.0]
    assert 0.0 not in filled[:2]


def test_group_ids_need_not_be_contiguous() -> None:
    # verl groups by uid, which need not sit next to each other in the batch.
    assert fill_unscored([None, 1.0, 0.0, None], ["a", "b", "a", "b"]) == [0.0, 1.0, 0.0, 1.0]


def test_fill_refuses_misaligned_group_ids() -> None:
    with pytest.raises(ValidationError, match="3 scalars for 2 group ids"):
        fill_unscored([1.0, None, 0.0], [0, 0])


def test_contiguous_groups() -> None:
    assert contiguous_groups(6, 3) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValidationError, match="not a whole number of groups"):
        contiguous_groups(5, 2)
    with pytest.raises(ValidationError, match="at least 1"):
        contiguous_groups(4, 0)


# --------------------------------------------------------------------------------------------
# SampleResult rows and metadata (R-T-3)
# --------------------------------------------------------------------------------------------


def test_sample_results_pair_answers_and_mark_missing_ones_as_errors() -> None:
    paid = receipt(VERIFIED, "episode.groups.0001")
    busy = IdentityBusy("identity has an open episode")
    rows = sample_results(["episode.groups.0001", "e2.groups.x", "e3.groups.x"], [paid, busy, None])
    assert [row.scalar for row in rows] == [1.0, None, None]
    assert [row.unscored for row in rows] == [False, True, True]
    assert [row.outcome for row in rows] == ["VERIFIED", ERROR_OUTCOME, ERROR_OUTCOME]
    assert rows[1].error_reason == "identity_busy"
    assert isinstance(rows[2].error, Unavailable)


def test_misaligned_batches_are_refused() -> None:
    with pytest.raises(ValidationError, match="misaligned"):
        sample_results(["episode.groups.0001", "episode.groups.0002"], [None])


def test_metadata_columns_have_one_entry_per_sample_whatever_happened() -> None:
    rows = sample_results(
        ["episode.meta.0001", "episode.meta.0002", "episode.meta.0003", "episode.meta.0004"],
        [
            receipt(VERIFIED, "episode.meta.0001"),
            receipt(RECONCILIATION_REQUIRED, "episode.meta.0002"),
            Unavailable("worker unreachable"),
            None,
        ],
    )
    columns = metadata_columns(rows, require_certified=True)
    assert tuple(columns) == METADATA_COLUMNS
    assert all(len(values) == 4 for values in columns.values())
    assert columns["reward_outcome"] == ["VERIFIED", "RECONCILIATION_REQUIRED", "ERROR", "ERROR"]
    assert columns["reward_unscored"] == [False, True, True, True]
    assert columns["reward_certified"] == [True, True, False, False]
    assert columns["reward_certificate_state"] == ["CURRENT", "CURRENT", "", ""]
    assert columns["reward_calibration_scope"] == ["synthetic", "synthetic", "", ""]
    assert columns["reward_error"] == ["", "", "unavailable", "unavailable"]
    assert columns["reward_episode_id"][2] == "episode.meta.0003"


def test_without_require_certified_every_receipt_is_development_only() -> None:
    rows = sample_results(["episode.dev.0001"], [receipt(VERIFIED, "episode.dev.0001")])
    columns = metadata_columns(rows, require_certified=False)
    assert columns["reward_calibration_scope"] == [DEVELOPMENT_ONLY]
    assert columns["reward_certified"] == [True]  # the receipt's own field, reported as is


# --------------------------------------------------------------------------------------------
# enforce_certified (R-T-2)
# --------------------------------------------------------------------------------------------


def test_expired_certificate_stops_a_certified_run_with_reasons() -> None:
    expired = receipt(VERIFIED, "episode.expired.0001", update=ISSUED_AT_UPDATE + EXPIRY_UPDATES)
    assert not expired.receipt.certified
    rows = sample_results(["episode.expired.0001"], [expired])
    with pytest.raises(CertificationRefused) as caught:
        enforce_certified(rows, require_certified=True)
    message = str(caught.value)
    assert "episode.expired.0001" in message
    assert "EXPIRED" in message
    assert "not current" in message
    enforce_certified(rows, require_certified=False)  # a development run goes on


def test_tier0_receipt_is_refused_by_a_certified_run() -> None:
    rows = sample_results(["episode.tier0.0001"], [receipt(VERIFIED, "episode.tier0.0001", tier=0)])
    with pytest.raises(CertificationRefused, match="development only"):
        enforce_certified(rows, require_certified=True)


def test_unscored_and_error_rows_carry_nothing_to_certify() -> None:
    expired_unscored = receipt(
        FAILED_PLATFORM, "episode.expired.0002", update=ISSUED_AT_UPDATE + EXPIRY_UPDATES
    )
    rows = sample_results(
        ["episode.expired.0002", "episode.error.0001"],
        [expired_unscored, Unavailable("down")],
    )
    enforce_certified(rows, require_certified=True)


# --------------------------------------------------------------------------------------------
# Episode ids (R-T-4) and columns
# --------------------------------------------------------------------------------------------


def test_minted_ids_are_unique_and_valid() -> None:
    ids = [mint_episode_id("row-0001", 3, index) for index in range(8)]
    ids += [mint_episode_id("row-0001", 3, 0) for _ in range(8)]  # same slot, fresh randomness
    assert len(set(ids)) == len(ids)
    assert all(ID_PATTERN.match(episode_id) for episode_id in ids)
    assert ids[0].startswith("row-0001.u3.c0.")


def test_mint_refuses_negative_positions() -> None:
    with pytest.raises(ValidationError):
        mint_episode_id("row-0001", -1, 0)
    with pytest.raises(ValidationError):
        mint_episode_id("row-0001", 0, -1)


def test_column_checks_length() -> None:
    assert column({"episode_id": ("a", "b")}, "episode_id", 2) == ["a", "b"]
    assert column({}, "episode_id", 2) is None
    with pytest.raises(ValidationError, match="has 1 entries for 2 samples"):
        column({"episode_id": ["a"]}, "episode_id", 2)


@pytest.mark.parametrize(
    ("error", "transient", "setup"),
    [
        pytest.param(Unavailable("worker down"), True, False, id="unavailable-is-an-outage"),
        pytest.param(
            from_parts(grpc.StatusCode.DEADLINE_EXCEEDED, "", "slow", {}),
            True,
            False,
            id="deadline-is-an-outage",
        ),
        pytest.param(Unauthenticated("bad token"), False, True, id="bad-token-is-setup"),
        pytest.param(PermissionDenied("trainer token"), False, True, id="no-permission-is-setup"),
        pytest.param(ContractMismatch("other digest"), False, True, id="wrong-contract-is-setup"),
        pytest.param(IdentityBusy("open episode"), False, False, id="busy-is-per-sample"),
    ],
)
def test_error_classes_decide_unscore_or_stop(
    error: RewardSealError, transient: bool, setup: bool
) -> None:
    assert is_transient(error) is transient
    assert is_setup_error(error) is setup
