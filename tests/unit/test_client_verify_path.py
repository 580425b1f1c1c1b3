"""The client's lean verify path refuses everything the slow one did (R-T-5, R-MSG-7/8).

Every answer a worker client hands out goes through ``WorkerProtocol.verify`` (a batch entry
through ``WorkerProtocol.result``): the signature against the pinned keys, straight through
libsodium with the raw key the trust set holds; the strict parse, which walks only the fields
that can hold messages (known once per message type); the R-VAL checks, which read each field
once; then the binding to the request. Each test below signs the bad answer with real Ed25519
keys, so the only thing that can refuse it is the check named.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.core.errors import ReceiptMismatch, SignatureError, ValidationError
from rewardseal.core.receipts import ExpectedReceipt, issue_receipt
from rewardseal.core.signing import (
    RECEIPT_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    pae,
    sign_envelope,
    verify_detached,
)
from rewardseal.core.validation import MAX_ABS_FLOAT, check_float, is_bounded_float
from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.rpc.worker_protocol import VerifiedReceipt, WorkerProtocol
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

OTHER_KEY = SigningKey.from_seed(bytes(range(1, 33)))
PROTOCOL = WorkerProtocol("token-client-verify", TrustSet([TEST_KEY.public_key]), 5.0, 0)


def issued(key: SigningKey = TEST_KEY, episode_id: str = "episode.0001") -> SignedEnvelope:
    contract = mockmed_contract()
    return issue_receipt(
        make_facts(episode_id=episode_id),
        contract=contract,
        certificate=make_certificate(contract),
        key=key,
    ).envelope


def receipt_of(envelope: SignedEnvelope) -> RewardEvidenceReceipt:
    return RewardEvidenceReceipt.FromString(envelope.payload)


def descriptor_for(envelope: SignedEnvelope) -> EpisodeDescriptor:
    receipt = receipt_of(envelope)
    return make_descriptor(
        episode_id=receipt.episode_id,
        policy_checkpoint_id=receipt.policy_checkpoint_id,
        policy_update=receipt.policy_update,
        reward_contract_digest=receipt.reward_contract_digest,
    )


def signed_payload(payload: bytes, key: SigningKey = TEST_KEY) -> SignedEnvelope:
    """``payload`` signed by ``key`` as a receipt, whatever it holds."""
    return sign_envelope(RECEIPT_PAYLOAD_TYPE, payload, key)


def test_an_honest_receipt_is_handed_out_bound_and_unchanged() -> None:
    envelope = issued()
    verified = PROTOCOL.verify(envelope, ExpectedReceipt.for_descriptor(descriptor_for(envelope)))
    assert isinstance(verified, VerifiedReceipt)
    assert verified.receipt == receipt_of(envelope)
    assert verified.envelope is envelope


def test_a_receipt_signed_by_a_key_not_pinned_is_refused() -> None:
    envelope = issued(OTHER_KEY)  # valid in every way but its signer
    with pytest.raises(SignatureError, match="0 of 1 signature"):
        PROTOCOL.verify(envelope, ExpectedReceipt.for_descriptor(descriptor_for(envelope)))


def test_a_pinned_signature_moved_onto_another_payload_is_refused() -> None:
    honest, other = issued(), issued(episode_id="episode.0002")
    forged = SignedEnvelope()
    forged.CopyFrom(other)
    forged.signatures[0].sig = honest.signatures[0].sig  # the pinned key's, over other bytes
    with pytest.raises(SignatureError):
        PROTOCOL.verify(forged, ExpectedReceipt.for_descriptor(descriptor_for(other)))


@pytest.mark.parametrize("length", [0, 63, 65])
def test_a_signature_of_the_wrong_length_is_refused(length: int) -> None:
    envelope = issued()
    envelope.signatures[0].sig = (envelope.signatures[0].sig * 2)[:length]
    with pytest.raises(SignatureError):
        PROTOCOL.verify(envelope, ExpectedReceipt.for_descriptor(descriptor_for(envelope)))


def test_a_signed_receipt_answering_another_request_is_refused() -> None:
    envelope = issued(episode_id="episode.0002")
    asked = descriptor_for(issued(episode_id="episode.0001"))
    with pytest.raises(ReceiptMismatch) as caught:
        PROTOCOL.verify(envelope, ExpectedReceipt.for_descriptor(asked))
    assert caught.value.metadata["field"] == "episode_id"


def test_a_batch_entry_moved_to_another_position_is_that_entry_s_mismatch() -> None:
    first, second = issued(episode_id="episode.0001"), issued(episode_id="episode.0002")
    answer = pb.ScoreEpisodesResponse(
        results=[
            pb.EpisodeResult(episode_id="episode.0001", envelope=second),  # swapped receipt
            pb.EpisodeResult(episode_id="episode.0002", envelope=second),
        ]
    )
    entries = PROTOCOL.results(answer, [descriptor_for(first), descriptor_for(second)])
    assert isinstance(entries[0], ReceiptMismatch)
    assert isinstance(entries[1], VerifiedReceipt)


def test_a_signed_payload_with_a_field_the_schema_does_not_know_is_refused() -> None:
    envelope = issued()
    # Field 22 (issued_at) again, now holding an unknown field 99: a nested unknown, which
    # only a walk into the Timestamp finds.
    unknown_in_timestamp = b"\xb2\x01\x03\x98\x06\x01"
    forged = signed_payload(envelope.payload + unknown_in_timestamp)
    with pytest.raises(ValidationError, match=r"issued_at carries fields"):
        PROTOCOL.verify(forged, ExpectedReceipt())


def test_a_signed_receipt_breaking_a_claim_rule_is_refused_by_name() -> None:
    receipt = receipt_of(issued())
    name = next(iter(receipt.reward_components))
    receipt.reward_components[name] = math.inf
    forged = signed_payload(receipt.SerializeToString(deterministic=True))
    with pytest.raises(ValidationError, match=f"reward component {name} must be finite"):
        PROTOCOL.verify(forged, ExpectedReceipt())


def test_the_trust_set_holds_each_key_once_as_its_raw_bytes() -> None:
    trust = TrustSet([TEST_KEY.public_key, bytearray(TEST_KEY.public_key)])
    assert len(trust) == 1
    assert trust.public_key(TEST_KEY.key_id) == TEST_KEY.public_key
    signed = pae(RECEIPT_PAYLOAD_TYPE, b"payload")
    signature = TEST_KEY.sign(signed)
    assert trust.verify_signature(TEST_KEY.key_id, signed, signature)
    assert not trust.verify_signature(TEST_KEY.key_id, signed + b"!", signature)
    assert not trust.verify_signature(OTHER_KEY.key_id, signed, signature)
    assert verify_detached(TEST_KEY.public_key, signed, signature)
    assert not verify_detached(OTHER_KEY.public_key, signed, signature)


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([MAX_ABS_FLOAT, -MAX_ABS_FLOAT, math.nextafter(MAX_ABS_FLOAT, math.inf)]),
    )
)
def test_is_bounded_float_is_exactly_the_rule_check_float_enforces(value: float) -> None:
    try:
        check_float(value, "x")
    except ValidationError:
        assert not is_bounded_float(value)
    else:
        assert is_bounded_float(value)
