"""build_receipt, seal_receipt and open_receipt (R-MSG-7, R-MSG-8, R-SIG-2, R-VAL-3, R-T-5).

A receipt is sealed into a DSSE envelope over its exact bytes; opening verifies the signature
first, then parses strictly (no unknown fields), validates, checks the named issuer signed it, and
checks that the envelope's unsigned flags only repeat what the signed receipt says.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta, timezone, tzinfo

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from support.builders import FIXED_TIME, ISSUED_AT_UPDATE, TEST_KEY, make_certificate, make_facts

from rewardseal.core.clock import timestamp
from rewardseal.core.contract import UNSCORED_OUTCOMES
from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.receipts import (
    MAX_TEMPLATES,
    EpisodeFacts,
    OpenedReceipt,
    ReceiptIssuer,
    build_receipt,
    is_unscored,
    issue_receipt,
    open_receipt,
    seal_receipt,
)
from rewardseal.core.signing import RECEIPT_PAYLOAD_TYPE, SigningKey, TrustSet, sign_envelope
from rewardseal.v1.contract_pb2 import RewardComponent, ScoringPolicy
from rewardseal.v1.enums_pb2 import RewardOutcome, Uncertainty
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

Outcome = RewardOutcome
OTHER_KEY = SigningKey.from_seed(bytes(range(32, 64)))
TRUST = TrustSet([TEST_KEY.public_key])

ALL_OUTCOMES = [
    Outcome.REWARD_OUTCOME_VERIFIED,
    Outcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT,
    Outcome.REWARD_OUTCOME_REFUSED,
    Outcome.REWARD_OUTCOME_REJECTED_POLICY,
    Outcome.REWARD_OUTCOME_WRONG_EFFECT,
    Outcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
    Outcome.REWARD_OUTCOME_FAILED_PLATFORM,
]
SCORED_OUTCOMES = [o for o in ALL_OUTCOMES if o not in UNSCORED_OUTCOMES]


def short(outcome: int) -> str:
    return Outcome.Name(outcome).removeprefix("REWARD_OUTCOME_")


def make_receipt(
    outcome: RewardOutcome.ValueType = Outcome.REWARD_OUTCOME_VERIFIED,
    *,
    issuer_key_id: str = TEST_KEY.key_id,
    with_certificate: bool = True,
    **facts: object,
) -> RewardEvidenceReceipt:
    contract = mockmed_contract()
    certificate = make_certificate(contract) if with_certificate else None
    return build_receipt(
        make_facts(outcome, **facts),  # type: ignore[arg-type]
        contract=contract,
        certificate=certificate,
        issuer_key_id=issuer_key_id,
    )


def copy_envelope(envelope: SignedEnvelope) -> SignedEnvelope:
    copy = SignedEnvelope()
    copy.CopyFrom(envelope)
    return copy


# ---------------------------------------------------------------------------------------------
# Happy path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome", ALL_OUTCOMES, ids=lambda o: f"R-MSG-8-{short(o)}-opens-to-equal-receipt"
)
@pytest.mark.parametrize(
    "with_certificate",
    [pytest.param(True, id="certificate"), pytest.param(False, id="no-certificate")],
)
def test_seal_then_open_returns_an_equal_receipt(outcome, with_certificate):
    receipt = make_receipt(outcome, with_certificate=with_certificate)
    envelope = seal_receipt(receipt, TEST_KEY)
    opened = open_receipt(envelope, TRUST)
    assert opened == OpenedReceipt(receipt, envelope)
    assert opened.receipt.SerializeToString(deterministic=True) == receipt.SerializeToString(
        deterministic=True
    )
    assert opened.unscored is is_unscored(receipt)
    assert opened.scalar == (None if is_unscored(receipt) else receipt.scalar_reward)


def test_envelope_payload_is_the_exact_receipt_bytes():
    receipt = make_receipt()
    envelope = seal_receipt(receipt, TEST_KEY)
    assert envelope.payload_type == RECEIPT_PAYLOAD_TYPE
    assert envelope.payload == receipt.SerializeToString(deterministic=True)
    assert [s.keyid for s in envelope.signatures] == [TEST_KEY.key_id]


@pytest.mark.parametrize(
    ("outcome", "unscored"),
    [
        pytest.param(
            o, o in UNSCORED_OUTCOMES, id=f"R-MSG-8-{short(o)}-unscored-{o in UNSCORED_OUTCOMES}"
        )
        for o in ALL_OUTCOMES
    ],
)
def test_envelope_flags(outcome, unscored):
    envelope = seal_receipt(make_receipt(outcome), TEST_KEY)
    assert envelope.unscored is unscored
    assert envelope.execute_seal is False
    assert envelope.production_seal is False
    assert envelope.flow_governed_policy is False


def test_open_accepts_a_trust_set_holding_extra_keys():
    trust = TrustSet([OTHER_KEY.public_key, TEST_KEY.public_key])
    receipt = make_receipt()
    assert open_receipt(seal_receipt(receipt, TEST_KEY), trust).receipt == receipt


# ---------------------------------------------------------------------------------------------
# Tampering with what the signature does not cover (R-MSG-8 step 5)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "flag", "value"),
    [
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED, "execute_seal", True, id="R-MSG-8-execute_seal-refused"
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            "production_seal",
            True,
            id="R-MSG-8-production_seal-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            "flow_governed_policy",
            True,
            id="R-MSG-8-flow_governed_policy-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            "unscored",
            True,
            id="R-MSG-8-scored-receipt-flagged-unscored-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_WRONG_EFFECT,
            "unscored",
            True,
            id="R-MSG-8-wrong-effect-flagged-unscored-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
            "unscored",
            False,
            id="R-MSG-8-unscored-receipt-flagged-scored-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_FAILED_PLATFORM,
            "unscored",
            False,
            id="R-MSG-8-failed-platform-flagged-scored-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_FAILED_PLATFORM,
            "execute_seal",
            True,
            id="R-MSG-8-unscored-with-execute_seal-refused",
        ),
    ],
)
def test_tampered_unsigned_flag_is_refused(outcome, flag, value):
    envelope = copy_envelope(seal_receipt(make_receipt(outcome), TEST_KEY))
    assert getattr(envelope, flag) is not value
    setattr(envelope, flag, value)
    # The signature still verifies (the flags are outside it); the receipt check refuses.
    TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)
    with pytest.raises(ValidationError):
        open_receipt(envelope, TRUST)


# ---------------------------------------------------------------------------------------------
# Who signed (R-SIG-2, R-MSG-8 steps 1 and 4)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trust",
    [
        pytest.param(TRUST, id="R-SIG-2-named-issuer-untrusted-refused"),
        pytest.param(
            TrustSet([TEST_KEY.public_key, OTHER_KEY.public_key]),
            id="R-SIG-2-named-issuer-trusted-but-did-not-sign-refused",
        ),
    ],
)
def test_receipt_naming_another_issuer_than_its_signer_is_refused(trust):
    receipt = make_receipt(issuer_key_id=OTHER_KEY.key_id)
    payload = receipt.SerializeToString(deterministic=True)
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, payload, TEST_KEY)
    with pytest.raises(SignatureError, match="issuer_key_id"):
        open_receipt(envelope, trust)


def test_envelope_signed_by_an_untrusted_key_is_refused():
    receipt = make_receipt(issuer_key_id=OTHER_KEY.key_id)
    envelope = seal_receipt(receipt, OTHER_KEY)
    with pytest.raises(SignatureError):
        open_receipt(envelope, TRUST)


def test_untrusted_signature_cannot_borrow_a_trusted_key_id():
    envelope = copy_envelope(seal_receipt(make_receipt(), TEST_KEY))
    forged = sign_envelope(RECEIPT_PAYLOAD_TYPE, envelope.payload, OTHER_KEY).signatures[0]
    del envelope.signatures[:]
    envelope.signatures.add(keyid=TEST_KEY.key_id, sig=forged.sig)
    with pytest.raises(SignatureError):
        open_receipt(envelope, TRUST)


def test_tampered_payload_byte_is_refused_before_parsing():
    envelope = copy_envelope(seal_receipt(make_receipt(), TEST_KEY))
    payload = bytearray(envelope.payload)
    payload[-1] ^= 0x01
    envelope.payload = bytes(payload)
    with pytest.raises(SignatureError):
        open_receipt(envelope, TRUST)


def test_other_payload_type_is_refused():
    receipt = make_receipt()
    payload = receipt.SerializeToString(deterministic=True)
    envelope = sign_envelope("application/vnd.rewardseal.certificate.v1+json", payload, TEST_KEY)
    with pytest.raises(SignatureError, match="payload type"):
        open_receipt(envelope, TRUST)


def test_unsigned_envelope_is_refused():
    envelope = copy_envelope(seal_receipt(make_receipt(), TEST_KEY))
    del envelope.signatures[:]
    with pytest.raises(SignatureError):
        open_receipt(envelope, TRUST)


# ---------------------------------------------------------------------------------------------
# Unknown fields in the signed payload (R-MSG-7)
# ---------------------------------------------------------------------------------------------


def length_delimited(tag: bytes, body: bytes) -> bytes:
    assert len(body) < 128  # one-byte varint length
    return tag + bytes([len(body)]) + body


# Field 99 wire type 2: tag (99 << 3) | 2 = 794 = varint 0x9a 0x06.
EXECUTION_ID = length_delimited(b"\x9a\x06", b"execution_id:exec-0001")
# Field 100 wire type 2: tag 802 = varint 0xa2 0x06.
WORKFLOW_DIGEST = length_delimited(b"\xa2\x06", b"sha256:" + b"f" * 64)
# Field 99 wire type 0 (varint 1) inside a second issued_at (field 22, tag 0xb2 0x01): protobuf
# merges it into the Timestamp, so the unknown field hides one level down.
NESTED_UNKNOWN = length_delimited(b"\xb2\x01", b"\x98\x06\x01")


@pytest.mark.parametrize(
    ("outcome", "extra"),
    [
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            EXECUTION_ID,
            id="R-MSG-7-field-99-execution_id-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_FAILED_PLATFORM,
            EXECUTION_ID,
            id="R-MSG-7-unscored-field-99-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            WORKFLOW_DIGEST,
            id="R-MSG-7-field-100-workflow_digest-refused",
        ),
        pytest.param(
            Outcome.REWARD_OUTCOME_VERIFIED,
            NESTED_UNKNOWN,
            id="R-MSG-7-unknown-field-inside-issued_at-refused",
        ),
    ],
)
def test_resigned_payload_with_unknown_field_is_refused(outcome, extra):
    receipt = make_receipt(outcome)
    payload = receipt.SerializeToString(deterministic=True) + extra
    # Sanity: the bytes parse, and a lenient reader would silently drop the extra field.
    lenient = RewardEvidenceReceipt()
    lenient.ParseFromString(payload)
    assert lenient.receipt_id == receipt.receipt_id
    assert lenient.issued_at.seconds == receipt.issued_at.seconds
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, payload, TEST_KEY, unscored=is_unscored(receipt))
    TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)  # the signature is good
    with pytest.raises(ValidationError, match="does not know"):
        open_receipt(envelope, TRUST)


def test_resigned_garbage_payload_is_refused():
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, b"\xff\xff\xff\xff", TEST_KEY)
    with pytest.raises(ValidationError):
        open_receipt(envelope, TRUST)


def test_resigned_invalid_receipt_is_refused():
    receipt = make_receipt()
    receipt.ClearField("scalar_reward")  # a VERIFIED receipt without a scalar breaks R-VAL-3
    envelope = sign_envelope(
        RECEIPT_PAYLOAD_TYPE, receipt.SerializeToString(deterministic=True), TEST_KEY
    )
    with pytest.raises(ValidationError, match="scalar"):
        open_receipt(envelope, TRUST)


def test_receipt_schema_has_no_execution_seal_fields():
    names = {f.name for f in RewardEvidenceReceipt.DESCRIPTOR.fields}
    assert names.isdisjoint({"execution_id", "workflow_digest", "qualification_id"})


# ---------------------------------------------------------------------------------------------
# seal_receipt refusals
# ---------------------------------------------------------------------------------------------


def test_seal_refuses_a_key_other_than_the_named_issuer():
    receipt = make_receipt(issuer_key_id=TEST_KEY.key_id)
    with pytest.raises(ValidationError, match="issuer_key_id"):
        seal_receipt(receipt, OTHER_KEY)


@pytest.mark.parametrize("outcome", ALL_OUTCOMES, ids=short)
def test_issue_receipt_is_build_then_seal(outcome):
    """The worker's one-call path gives the receipt and envelope bytes build + seal give."""
    contract = mockmed_contract()
    facts = make_facts(outcome)
    built = build_receipt(
        facts,
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )
    issued = issue_receipt(
        facts, contract=contract, certificate=make_certificate(contract), key=TEST_KEY
    )
    assert issued.receipt == built
    assert issued.envelope.SerializeToString(deterministic=True) == seal_receipt(
        built, TEST_KEY
    ).SerializeToString(deterministic=True)
    assert open_receipt(issued.envelope, TRUST).receipt == built


def test_seal_refuses_an_invalid_receipt():
    receipt = make_receipt()
    receipt.certified = True
    receipt.oracle_tier = 0
    receipt.development_only = True
    with pytest.raises(ValidationError):
        seal_receipt(receipt, TEST_KEY)


# ---------------------------------------------------------------------------------------------
# build_receipt (R-VAL-3, R-SCORE-2)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    sorted(UNSCORED_OUTCOMES),
    ids=lambda o: f"R-VAL-3-{short(o)}-no-scalar-no-components",
)
@pytest.mark.parametrize("tier", [0, 2], ids=lambda t: f"tier-{t}")
def test_unscored_receipt_has_no_scalar_and_no_components(outcome, tier):
    receipt = make_receipt(outcome, tier=tier)
    assert receipt.HasField("scalar_reward") is False
    assert len(receipt.reward_components) == 0
    assert is_unscored(receipt) is True
    # The scalar is absent, never 0.0, also on the wire.
    parsed = RewardEvidenceReceipt()
    parsed.ParseFromString(receipt.SerializeToString())
    assert parsed.HasField("scalar_reward") is False


@pytest.mark.parametrize(
    "outcome", sorted(UNSCORED_OUTCOMES), ids=lambda o: f"R-SCORE-4-{short(o)}-still-certified"
)
def test_unscored_outcome_does_not_enter_certified(outcome):
    receipt = make_receipt(outcome)
    assert receipt.certified is True
    assert list(receipt.certification_refusals) == []


@pytest.mark.parametrize(
    "outcome", SCORED_OUTCOMES, ids=lambda o: f"R-VAL-3-{short(o)}-has-scalar-and-components"
)
def test_scored_receipt_has_scalar_and_components(outcome):
    receipt = make_receipt(outcome)
    assert receipt.HasField("scalar_reward")
    assert dict(receipt.reward_components) == {"triage_encounter_created": receipt.scalar_reward}
    assert is_unscored(receipt) is False


def three_component_contract():
    contract = mockmed_contract()
    del contract.components[:]
    contract.components.extend(
        [
            RewardComponent(name="record_created", weight=1.0),
            RewardComponent(name="fields_match", weight=2.0),
            RewardComponent(name="no_duplicate", weight=3.0),
        ]
    )
    contract.scoring_policy.CopyFrom(
        ScoringPolicy(verified_reward=0.7, wrong_effect_reward=-1.3, refused_reward=-0.1)
    )
    return contract


@pytest.mark.parametrize(
    ("outcome", "scalar"),
    [
        pytest.param(Outcome.REWARD_OUTCOME_VERIFIED, 0.7, id="R-VAL-3-verified-0.7-sums"),
        pytest.param(
            Outcome.REWARD_OUTCOME_WRONG_EFFECT, -1.3, id="R-VAL-3-wrong-effect-minus-1.3-sums"
        ),
        pytest.param(Outcome.REWARD_OUTCOME_REFUSED, -0.1, id="R-VAL-3-refused-minus-0.1-sums"),
        pytest.param(
            Outcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT, 0.0, id="R-VAL-3-halted-0.0-sums"
        ),
    ],
)
def test_components_sum_to_the_scalar(outcome, scalar):
    contract = three_component_contract()
    receipt = build_receipt(
        make_facts(outcome),
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )
    assert receipt.scalar_reward == scalar
    components = dict(receipt.reward_components)
    assert set(components) == {"record_created", "fields_match", "no_duplicate"}
    assert math.isclose(sum(components.values()), scalar, abs_tol=1e-12)
    # Split in proportion to the weights 1 : 2 : 3.
    assert math.isclose(components["record_created"], scalar / 6, abs_tol=1e-12)
    assert math.isclose(components["fields_match"], 2 * scalar / 6, abs_tol=1e-12)
    assert math.isclose(components["no_duplicate"], 3 * scalar / 6, abs_tol=1e-12)


def test_build_receipt_carries_the_certificate_reference():
    receipt = make_receipt()
    assert receipt.certificate_id == "cert.mockmed.0001"
    assert receipt.certificate_digest.startswith("sha256:")
    assert receipt.policy_update == ISSUED_AT_UPDATE
    assert receipt.issued_at.ToDatetime(tzinfo=UTC) == FIXED_TIME


def naive_facts() -> EpisodeFacts:
    facts = make_facts()
    return EpisodeFacts(**{**facts.__dict__, "issued_at": datetime(2026, 11, 30, 12, 0, 0)})


def test_build_receipt_refuses_a_naive_datetime():
    with pytest.raises(ValidationError, match="timezone"):
        build_receipt(
            naive_facts(),
            contract=mockmed_contract(),
            certificate=None,
            issuer_key_id=TEST_KEY.key_id,
        )


def test_build_receipt_converts_an_aware_datetime_to_utc():
    plus_two = timezone(timedelta(hours=2))
    facts = make_facts()
    shifted = EpisodeFacts(**{**facts.__dict__, "issued_at": FIXED_TIME.astimezone(plus_two)})
    contract = mockmed_contract()
    receipts = [
        build_receipt(f, contract=contract, certificate=None, issuer_key_id=TEST_KEY.key_id)
        for f in (facts, shifted)
    ]
    assert receipts[0] == receipts[1]


# ---------------------------------------------------------------------------------------------
# ReceiptIssuer: many receipts of one contract and certificate, issue_receipt's bytes
# ---------------------------------------------------------------------------------------------


def sealed_bytes(facts: EpisodeFacts, certificate: object, **flags: bool) -> tuple[bytes, bytes]:
    """The reference: build_receipt then seal_receipt, each receipt on its own."""
    receipt = build_receipt(
        facts,
        contract=mockmed_contract(),
        certificate=certificate,  # type: ignore[arg-type]
        issuer_key_id=TEST_KEY.key_id,
        **flags,
    )
    envelope = seal_receipt(receipt, TEST_KEY)
    return receipt.SerializeToString(deterministic=True), envelope.SerializeToString(
        deterministic=True
    )


def other_facts(facts: EpisodeFacts, n: int) -> EpisodeFacts:
    """Facts of another episode with the same claims: every fact field differs."""
    return dataclasses.replace(
        facts,
        receipt_id=f"rcpt.other-{n:04d}",
        episode_id=f"episode.other-{n:04d}",
        policy_checkpoint_id=f"policy.checkpoint.{n:04d}",
        evidence_digest="sha256:" + f"{n:02x}" * 32,
        nonce=f"{n:032x}",
        issued_at=FIXED_TIME + timedelta(seconds=n, microseconds=n * 7),
    )


@pytest.mark.parametrize("outcome", ALL_OUTCOMES, ids=short)
@pytest.mark.parametrize("with_certificate", [True, False], ids=["certificate", "none"])
@pytest.mark.parametrize(
    "flags",
    [{}, {"revoked": True}, {"revocation_unknown": True}],
    ids=["not-revoked", "revoked", "revocation-unknown"],
)
def test_issuer_gives_build_then_seal_bytes_for_every_receipt(outcome, with_certificate, flags):
    """The first receipt of a combination is built, the next are stamped from its template:
    all are byte for byte what build_receipt + seal_receipt make, and they open."""
    contract = mockmed_contract()
    certificate = make_certificate(contract) if with_certificate else None
    issuer = ReceiptIssuer(contract=contract, certificate=certificate, key=TEST_KEY)
    # Below, inside and past the certificate's schedule: NOT_YET_VALID, CURRENT, EXPIRED.
    for update in (ISSUED_AT_UPDATE - 1, ISSUED_AT_UPDATE, ISSUED_AT_UPDATE + 50):
        for n in range(3):
            facts = other_facts(make_facts(outcome, policy_update=update), n)
            issued = issuer.issue(facts, **flags)
            expected = sealed_bytes(facts, certificate, **flags)
            assert (
                issued.receipt.SerializeToString(deterministic=True),
                issued.envelope.SerializeToString(deterministic=True),
            ) == expected
            assert open_receipt(issued.envelope, TRUST).receipt == issued.receipt


def test_issuer_checks_the_facts_of_every_receipt():
    issuer = ReceiptIssuer(
        contract=mockmed_contract(), certificate=make_certificate(), key=TEST_KEY
    )
    good = make_facts()
    issuer.issue(good)  # the template of these claims now exists
    bad = [
        ("receipt_id", "rcpt"),
        ("episode_id", "episode\n0001"),
        ("policy_checkpoint_id", ""),
        ("evidence_digest", "sha256:" + "E" * 64),
        ("nonce", ""),
    ]
    for field, value in bad:
        with pytest.raises(ValidationError, match=field):
            issuer.issue(dataclasses.replace(good, **{field: value}))
    with pytest.raises(ValidationError, match="timezone"):
        issuer.issue(naive_facts())


def test_issuer_refuses_what_build_receipt_refuses_after_a_template_exists():
    issuer = ReceiptIssuer(contract=mockmed_contract(), certificate=None, key=TEST_KEY)
    issuer.issue(make_facts(policy_update=1))
    with pytest.raises(ValidationError, match="policy update"):
        issuer.issue(dataclasses.replace(make_facts(), policy_update=True))  # equal to 1 as a key
    with pytest.raises(ValidationError):
        issuer.issue(make_facts(policy_update=-1))
    with pytest.raises(ValidationError, match="cannot carry uncertainty"):
        issuer.issue(
            make_facts(
                Outcome.REWARD_OUTCOME_VERIFIED, uncertainty=Uncertainty.UNCERTAINTY_NONE + 2
            )
        )


def test_issuer_keeps_a_bounded_number_of_templates():
    issuer = ReceiptIssuer(contract=mockmed_contract(), certificate=None, key=TEST_KEY)
    for update in range(MAX_TEMPLATES + 5):
        facts = make_facts(policy_update=update)
        assert (
            issuer.issue(facts).receipt.SerializeToString(deterministic=True)
            == sealed_bytes(facts, None)[0]
        )
    assert len(issuer._templates) <= MAX_TEMPLATES


@pytest.mark.parametrize(
    "moment",
    [
        FIXED_TIME,
        datetime(2026, 12, 1, 19, 30, 1, 999_999, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),  # before the epoch
        datetime(2026, 3, 29, 1, 30, 0, 123_456, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ],
)
def test_timestamp_equals_protobufs_conversion(moment):
    expected = Timestamp()
    expected.FromDatetime(moment.astimezone(UTC))
    assert timestamp(moment) == expected


class _NoOffset(tzinfo):
    """A tzinfo that names no offset: the datetime stays naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def test_timestamp_refuses_a_datetime_whose_tzinfo_gives_no_offset():
    with pytest.raises(ValidationError, match="timezone"):
        timestamp(datetime(2026, 12, 1, 12, 0, tzinfo=_NoOffset()), "issued_at")
