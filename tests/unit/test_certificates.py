"""Certificate state on the policy-update schedule and the certificate-policy checks.

R-MSG-3 (certificate policy: epsilon/delta "above" fails, threshold and corpus exact match,
expiry "longer" fails), R-MSG-4 (current for ``issued .. issued+expiry-1``, NOT_YET_VALID below,
EXPIRED at and above ``issued+expiry``), R-SCORE-4 (one sentence per shortfall, in order),
R-VAL-6 (policy update in 0 .. 2^53-1).
"""

from __future__ import annotations

import pytest
from support.builders import EXPIRY_UPDATES, ISSUED_AT_UPDATE, make_certificate

from rewardseal.core.certificates import (
    MAX_POLICY_UPDATE,
    certificate_state,
    check_policy_update,
    is_current,
    satisfies,
    schedule_state,
    state_name,
    unmet,
)
from rewardseal.core.errors import ValidationError
from rewardseal.v1.enums_pb2 import CertificateState
from rewardseal_kit.mockmed import mockmed_contract

State = CertificateState
ISSUED = ISSUED_AT_UPDATE
LAST_CURRENT = ISSUED_AT_UPDATE + EXPIRY_UPDATES - 1
FIRST_EXPIRED = ISSUED_AT_UPDATE + EXPIRY_UPDATES
POLICY = mockmed_contract().certificate_policy

BOUNDARIES = [
    pytest.param(
        ISSUED - 1, State.CERTIFICATE_STATE_NOT_YET_VALID, id="R-MSG-4-issued-1-NOT_YET_VALID"
    ),
    pytest.param(0, State.CERTIFICATE_STATE_NOT_YET_VALID, id="R-MSG-4-update-0-NOT_YET_VALID"),
    pytest.param(ISSUED, State.CERTIFICATE_STATE_CURRENT, id="R-MSG-4-issued-CURRENT"),
    pytest.param(ISSUED + 1, State.CERTIFICATE_STATE_CURRENT, id="R-MSG-4-issued+1-CURRENT"),
    pytest.param(
        LAST_CURRENT, State.CERTIFICATE_STATE_CURRENT, id="R-MSG-4-issued+expiry-1-CURRENT"
    ),
    pytest.param(
        FIRST_EXPIRED, State.CERTIFICATE_STATE_EXPIRED, id="R-MSG-4-issued+expiry-EXPIRED"
    ),
    pytest.param(
        FIRST_EXPIRED + 1, State.CERTIFICATE_STATE_EXPIRED, id="R-MSG-4-issued+expiry+1-EXPIRED"
    ),
    pytest.param(
        MAX_POLICY_UPDATE, State.CERTIFICATE_STATE_EXPIRED, id="R-VAL-6-update-2^53-1-EXPIRED"
    ),
]


@pytest.mark.parametrize(("update", "expected"), BOUNDARIES)
def test_state_at_schedule_boundary(update, expected):
    certificate = make_certificate()
    assert certificate_state(certificate, update) == expected
    assert schedule_state(certificate, update) == expected
    assert is_current(certificate, update) is (expected == State.CERTIFICATE_STATE_CURRENT)


@pytest.mark.parametrize(("update", "_schedule"), BOUNDARIES)
def test_revoked_is_revoked_at_every_boundary(update, _schedule):
    certificate = make_certificate()
    assert certificate_state(certificate, update, revoked=True) == State.CERTIFICATE_STATE_REVOKED


@pytest.mark.parametrize(("update", "schedule"), BOUNDARIES)
def test_revocation_does_not_change_the_schedule(update, schedule):
    # schedule_state and is_current ignore revocation: it is a separate refusal (R-SCORE-4).
    certificate = make_certificate()
    assert schedule_state(certificate, update) == schedule
    assert is_current(certificate, update) is (schedule == State.CERTIFICATE_STATE_CURRENT)


@pytest.mark.parametrize(
    "revoked",
    [
        pytest.param(False, id="R-MSG-7-no-certificate-ABSENT"),
        pytest.param(True, id="R-MSG-7-no-certificate-revoked-flag-still-ABSENT"),
    ],
)
@pytest.mark.parametrize(
    "update", [0, ISSUED, FIRST_EXPIRED, MAX_POLICY_UPDATE], ids=lambda u: f"update-{u}"
)
def test_no_certificate_is_absent(update, revoked):
    assert certificate_state(None, update, revoked=revoked) == State.CERTIFICATE_STATE_ABSENT


def test_expiry_of_one_update_is_current_at_issue_only():
    certificate = make_certificate(expiry_policy_updates=1)
    assert certificate_state(certificate, ISSUED - 1) == State.CERTIFICATE_STATE_NOT_YET_VALID
    assert certificate_state(certificate, ISSUED) == State.CERTIFICATE_STATE_CURRENT
    assert certificate_state(certificate, ISSUED + 1) == State.CERTIFICATE_STATE_EXPIRED


def test_certificate_issued_at_update_zero_is_current_at_zero():
    certificate = make_certificate(issued_at_policy_update=0)
    assert certificate_state(certificate, 0) == State.CERTIFICATE_STATE_CURRENT
    assert certificate_state(certificate, EXPIRY_UPDATES) == State.CERTIFICATE_STATE_EXPIRED


BAD_UPDATES = [
    pytest.param(-1, "negative", id="R-SCORE-1-update-minus-1-raises"),
    pytest.param(-(2**53), "negative", id="R-SCORE-1-update-minus-2^53-raises"),
    pytest.param(2**53, "2\\^53", id="R-VAL-6-update-2^53-raises"),
    pytest.param(2**64, "2\\^53", id="R-VAL-6-update-2^64-raises"),
    pytest.param(True, "integer", id="R-VAL-6-bool-update-raises"),
    pytest.param(1.0, "integer", id="R-VAL-6-float-update-raises"),
]


@pytest.mark.parametrize(("update", "match"), BAD_UPDATES)
@pytest.mark.parametrize(
    "with_certificate",
    [pytest.param(True, id="certificate"), pytest.param(False, id="no-certificate")],
)
def test_bad_policy_update_raises(update, match, with_certificate):
    certificate = make_certificate() if with_certificate else None
    with pytest.raises(ValidationError, match=match):
        certificate_state(certificate, update)
    with pytest.raises(ValidationError, match=match):
        certificate_state(certificate, update, revoked=True)


@pytest.mark.parametrize(("update", "match"), BAD_UPDATES)
def test_bad_policy_update_raises_in_schedule_and_is_current(update, match):
    certificate = make_certificate()
    with pytest.raises(ValidationError, match=match):
        schedule_state(certificate, update)
    with pytest.raises(ValidationError, match=match):
        is_current(certificate, update)


@pytest.mark.parametrize(
    "update",
    [
        pytest.param(0, id="R-VAL-6-update-0-accepted"),
        pytest.param(MAX_POLICY_UPDATE, id="R-VAL-6-update-2^53-1-accepted"),
    ],
)
def test_policy_update_range_ends_are_accepted(update):
    assert check_policy_update(update) == update


@pytest.mark.parametrize(
    ("state", "name"),
    [
        pytest.param(state, name, id=f"R-SCORE-4-state-named-{name}")
        for state, name in [
            (State.CERTIFICATE_STATE_ABSENT, "ABSENT"),
            (State.CERTIFICATE_STATE_NOT_YET_VALID, "NOT_YET_VALID"),
            (State.CERTIFICATE_STATE_CURRENT, "CURRENT"),
            (State.CERTIFICATE_STATE_EXPIRED, "EXPIRED"),
            (State.CERTIFICATE_STATE_REVOKED, "REVOKED"),
        ]
    ],
)
def test_state_name_drops_the_prefix(state, name):
    assert state_name(state) == name


# ---------------------------------------------------------------------------------------------
# Certificate policy (R-MSG-3, R-SCORE-4)
# ---------------------------------------------------------------------------------------------

SHORTFALLS = [
    pytest.param(
        {"epsilon": 0.050001},
        "certificate epsilon 0.050001 is above the contract's maximum 0.05",
        id="R-MSG-3-epsilon-above-max-refused",
    ),
    pytest.param(
        {"epsilon": 0.5},
        "certificate epsilon 0.5 is above the contract's maximum 0.05",
        id="R-MSG-3-epsilon-far-above-max-refused",
    ),
    pytest.param(
        {"delta": 0.050001},
        "certificate delta 0.050001 is above the contract's maximum 0.05",
        id="R-MSG-3-delta-above-max-refused",
    ),
    pytest.param(
        {"threshold": 0.6},
        "certificate threshold 0.6 differs from the contract's threshold 0.5",
        id="R-MSG-3-threshold-higher-refused",
    ),
    pytest.param(
        {"threshold": 0.4},
        "certificate threshold 0.4 differs from the contract's threshold 0.5",
        id="R-MSG-3-threshold-lower-refused",
    ),
    pytest.param(
        {"calibration_corpus_digest": "sha256:" + "1" * 64},
        "certificate calibration corpus differs from the contract's calibration corpus",
        id="R-MSG-3-corpus-differs-refused",
    ),
    pytest.param(
        {"expiry_policy_updates": POLICY.max_expiry_policy_updates + 1},
        "certificate expiry of 1001 policy updates is longer than the contract's maximum of 1000",
        id="R-MSG-3-expiry-longer-refused",
    ),
]


@pytest.mark.parametrize(("overrides", "sentence"), SHORTFALLS)
def test_each_shortfall_is_one_sentence(overrides, sentence):
    certificate = make_certificate(**overrides)
    assert unmet(certificate, POLICY) == [sentence]
    assert satisfies(certificate, POLICY) is False


def test_every_shortfall_at_once_in_rule_order():
    certificate = make_certificate(
        epsilon=0.3,
        delta=0.2,
        threshold=0.9,
        calibration_corpus_digest="sha256:" + "1" * 64,
        expiry_policy_updates=5000,
    )
    sentences = unmet(certificate, POLICY)
    assert [s.split(" ")[1] for s in sentences] == [
        "epsilon",
        "delta",
        "threshold",
        "calibration",
        "expiry",
    ]
    # One sentence each: no sentence break or line break inside any of them.
    assert all(". " not in s and "\n" not in s for s in sentences)


ACCEPTED = [
    pytest.param({}, id="R-MSG-3-builder-certificate-accepted"),
    pytest.param({"epsilon": POLICY.max_epsilon}, id="R-MSG-3-epsilon-equal-max-accepted"),
    pytest.param({"epsilon": 0.0}, id="R-MSG-3-epsilon-zero-accepted"),
    pytest.param({"delta": POLICY.max_delta}, id="R-MSG-3-delta-equal-max-accepted"),
    pytest.param({"delta": 0.01}, id="R-MSG-3-delta-below-max-accepted"),
    pytest.param(
        {"expiry_policy_updates": POLICY.max_expiry_policy_updates},
        id="R-MSG-3-expiry-equal-max-accepted",
    ),
    pytest.param({"expiry_policy_updates": 1}, id="R-MSG-3-expiry-one-accepted"),
    pytest.param(
        {
            "epsilon": POLICY.max_epsilon,
            "delta": POLICY.max_delta,
            "expiry_policy_updates": POLICY.max_expiry_policy_updates,
        },
        id="R-MSG-3-all-equal-max-accepted",
    ),
]


@pytest.mark.parametrize("overrides", ACCEPTED)
def test_satisfying_certificate_has_no_shortfall(overrides):
    certificate = make_certificate(**overrides)
    assert unmet(certificate, POLICY) == []
    assert satisfies(certificate, POLICY) is True


def test_unmet_ignores_schedule_revocation_and_contract_digest():
    # Those are separate refusals in score(); unmet() measures the bound against the policy only.
    certificate = make_certificate(
        issued_at_policy_update=MAX_POLICY_UPDATE, reward_contract_digest="sha256:" + "0" * 64
    )
    assert unmet(certificate, POLICY) == []
