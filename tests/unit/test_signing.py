"""Attacks on envelopes, certificates and key files (R-MSG-8, R-SIG-1, R-SIG-2, R-MSG-4)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewardseal.core.errors import SignatureError
from rewardseal.core.signing import (
    CERTIFICATE_PAYLOAD_TYPE,
    RECEIPT_PAYLOAD_TYPE,
    REVOCATION_LIST_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    certificate_signing_bytes,
    key_id_for,
    pae,
    sign_certificate,
    sign_envelope,
    verify_certificate,
    verify_detached,
)
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.receipt_pb2 import EnvelopeSignature, RewardEvidenceReceipt, SignedEnvelope

# RFC 8032 section 7.1, TEST 1: a known seed, its public key and its signature of b"".
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_EMPTY_SIG = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b4"
    "6bd25bf5f0595bbe24655141438e7a100b"
)

# Module-level keys, so hypothesis tests need no function-scoped fixtures.
ALICE = SigningKey.from_seed(bytes(range(32)))
BOB = SigningKey.from_seed(bytes(range(32, 64)))
MALLORY = SigningKey.from_seed(bytes(range(64, 96)))
TRUST = TrustSet([ALICE.public_key, BOB.public_key])

PAYLOAD = b"\x0a\x0ereceipt-000001\x2a\x0eepisode-000001"


def _envelope(payload: bytes = PAYLOAD, key: SigningKey = ALICE) -> SignedEnvelope:
    return sign_envelope(RECEIPT_PAYLOAD_TYPE, payload, key)


def _certificate() -> RewardCertificate:
    cert = RewardCertificate(
        certificate_id="cert-mockmed-0001",
        reward_contract_digest="sha256:" + "ab" * 32,
        checker_configuration_digest="sha256:" + "cd" * 32,
        epsilon=0.05,
        delta=0.01,
        threshold=0.5,
        calibration_corpus_digest="sha256:" + "ef" * 32,
        issued_at_policy_update=7,
        expiry_policy_updates=100,
    )
    cert.issued_at.FromSeconds(1_700_000_000)
    return cert


# --- key ids, PAE, raw signatures -------------------------------------------------------------


def test_key_id_format_and_known_value() -> None:
    key = SigningKey.from_seed(RFC8032_SEED)
    assert key.public_key == RFC8032_PUBLIC
    expected = "ed25519:sha256:" + hashlib.sha256(RFC8032_PUBLIC).hexdigest()
    assert expected == (
        "ed25519:sha256:21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"
    )
    assert key.key_id == expected
    assert key_id_for(RFC8032_PUBLIC) == expected


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_key_id_rejects_wrong_length(length: int) -> None:
    with pytest.raises(SignatureError, match="32 bytes"):
        key_id_for(b"\x01" * length)


def test_sign_matches_rfc8032_vector() -> None:
    key = SigningKey.from_seed(RFC8032_SEED)
    assert key.sign(b"") == RFC8032_EMPTY_SIG
    assert verify_detached(RFC8032_PUBLIC, b"", RFC8032_EMPTY_SIG)
    assert not verify_detached(RFC8032_PUBLIC, b"x", RFC8032_EMPTY_SIG)
    assert not verify_detached(RFC8032_PUBLIC, b"", RFC8032_EMPTY_SIG[:63])


def test_from_seed_rejects_wrong_length() -> None:
    with pytest.raises(SignatureError, match="32 bytes"):
        SigningKey.from_seed(b"\x00" * 31)


def test_pae_known_answer() -> None:
    # DSSE v1 example: "http://example.com/HelloWorld" is 29 bytes, "hello world" 11.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # Lengths count UTF-8 bytes, not characters: "t\u00e9" is 3 bytes.
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "
    # Our own receipt type: 46 bytes of type, then the payload verbatim.
    assert len(RECEIPT_PAYLOAD_TYPE.encode()) == 46
    assert pae(RECEIPT_PAYLOAD_TYPE, b"\x00 \x01") == (
        b"DSSEv1 46 application/vnd.rewardseal.receipt.v1+protobuf 3 \x00 \x01"
    )


def test_payload_types_are_distinct() -> None:
    types = {RECEIPT_PAYLOAD_TYPE, CERTIFICATE_PAYLOAD_TYPE, REVOCATION_LIST_PAYLOAD_TYPE}
    assert len(types) == 3


# --- envelopes ---------------------------------------------------------------------------------


def test_sign_envelope_states_no_seal() -> None:
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, PAYLOAD, ALICE, unscored=True)
    assert envelope.payload_type == RECEIPT_PAYLOAD_TYPE
    assert envelope.payload == PAYLOAD
    assert not envelope.execute_seal
    assert not envelope.production_seal
    assert not envelope.flow_governed_policy
    assert envelope.unscored
    assert [s.keyid for s in envelope.signatures] == [ALICE.key_id]
    assert len(envelope.signatures[0].sig) == 64


def test_valid_envelope_verifies() -> None:
    verified = TRUST.verify(_envelope(), payload_type=RECEIPT_PAYLOAD_TYPE)
    assert verified.payload == PAYLOAD
    assert verified.payload_type == RECEIPT_PAYLOAD_TYPE
    assert verified.key_ids == (ALICE.key_id,)


def test_envelope_survives_wire_round_trip() -> None:
    wire = _envelope().SerializeToString()
    verified = TRUST.verify(SignedEnvelope.FromString(wire), payload_type=RECEIPT_PAYLOAD_TYPE)
    assert verified.payload == PAYLOAD


def test_tampered_payload_rejected() -> None:
    envelope = _envelope()
    envelope.payload = PAYLOAD.replace(b"000001", b"000002", 1)
    with pytest.raises(SignatureError, match="0 of 1"):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)
    # Appending bytes (e.g. a duplicate field that would override on parse) is tampering too.
    envelope.payload = PAYLOAD + b"\x2a\x0eepisode-999999"
    with pytest.raises(SignatureError):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)


def test_swapped_payload_type_rejected() -> None:
    # The attacker relabels a signed receipt as a revocation list and asks for one: the type
    # check passes, but PAE bound the original type into the signature.
    relabelled = _envelope()
    relabelled.payload_type = REVOCATION_LIST_PAYLOAD_TYPE
    with pytest.raises(SignatureError, match="0 of 1"):
        TRUST.verify(relabelled, payload_type=REVOCATION_LIST_PAYLOAD_TYPE)
    # A genuine signature over another type is refused before any signature is looked at.
    other = sign_envelope(REVOCATION_LIST_PAYLOAD_TYPE, PAYLOAD, ALICE)
    with pytest.raises(SignatureError, match=r"payload type .* is not "):
        TRUST.verify(other, payload_type=RECEIPT_PAYLOAD_TYPE)


def test_unknown_key_id_ignored_and_rejected() -> None:
    # Signed correctly, by a key nobody trusts: ignored, so nothing verifies.
    with pytest.raises(SignatureError, match="0 of 1"):
        TRUST.verify(_envelope(key=MALLORY), payload_type=RECEIPT_PAYLOAD_TYPE)
    # An unknown signature next to a trusted one is ignored, not an error, and not counted.
    envelope = _envelope(key=MALLORY)
    envelope.signatures.extend(_envelope(key=ALICE).signatures)
    verified = TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)
    assert verified.key_ids == (ALICE.key_id,)
    with pytest.raises(SignatureError, match="1 of 2"):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE, threshold=2)


def test_duplicate_signature_not_counted_twice() -> None:
    envelope = _envelope()
    envelope.signatures.append(envelope.signatures[0])
    with pytest.raises(SignatureError, match=r"1 of 2 .* 2 required"):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE, threshold=2)

    two_keys = _envelope(key=ALICE)
    two_keys.signatures.extend(_envelope(key=BOB).signatures)
    verified = TRUST.verify(two_keys, payload_type=RECEIPT_PAYLOAD_TYPE, threshold=2)
    assert verified.key_ids == (ALICE.key_id, BOB.key_id)


def test_threshold_below_one_refused() -> None:
    unsigned = SignedEnvelope(payload_type=RECEIPT_PAYLOAD_TYPE, payload=PAYLOAD)
    with pytest.raises(ValueError, match="threshold"):
        TRUST.verify(unsigned, payload_type=RECEIPT_PAYLOAD_TYPE, threshold=0)
    with pytest.raises(SignatureError, match="0 of 0"):
        TRUST.verify(unsigned, payload_type=RECEIPT_PAYLOAD_TYPE)


@pytest.mark.parametrize("length", [0, 1, 32, 63, 65, 128])
def test_truncated_signature_rejected(length: int) -> None:
    envelope = _envelope()
    good = envelope.signatures[0].sig
    # Truncate, or pad with more of itself, to the given length.
    envelope.signatures[0].sig = (good * 3)[:length]
    with pytest.raises(SignatureError, match="0 of 1"):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)


def test_wrong_key_rejected() -> None:
    # Mallory signs with her own key and claims Alice's key id.
    envelope = _envelope(key=MALLORY)
    envelope.signatures[0].keyid = ALICE.key_id
    with pytest.raises(SignatureError, match="0 of 1"):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)
    # Or relabels Bob's valid signature as Alice's.
    bobs = _envelope(key=BOB)
    bobs.signatures[0].keyid = ALICE.key_id
    with pytest.raises(SignatureError):
        TRUST.verify(bobs, payload_type=RECEIPT_PAYLOAD_TYPE)


def test_invalid_then_valid_signature_same_key_counts_once() -> None:
    envelope = _envelope()
    good = envelope.signatures[0]
    envelope.signatures.insert(0, EnvelopeSignature(keyid=good.keyid, sig=bytes(64)))
    assert TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE).key_ids == (ALICE.key_id,)


def test_valid_envelope_verifies_without_reserializing() -> None:
    fields = [
        RewardEvidenceReceipt(receipt_id="receipt-00000001"),
        RewardEvidenceReceipt(policy_update=42),
        RewardEvidenceReceipt(episode_id="episode-00000001"),
        RewardEvidenceReceipt(certified=True),
        RewardEvidenceReceipt(nonce="n-0123456789abcdef"),
    ]
    # Fields in reverse order: valid protobuf, but not what any serializer would produce.
    odd_bytes = b"".join(f.SerializeToString() for f in reversed(fields))
    parsed = RewardEvidenceReceipt.FromString(odd_bytes)
    canonical = parsed.SerializeToString(deterministic=True)
    assert parsed.receipt_id == "receipt-00000001"
    assert parsed.nonce == "n-0123456789abcdef"
    assert canonical != odd_bytes

    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, odd_bytes, ALICE)
    wire = SignedEnvelope.FromString(envelope.SerializeToString())
    verified = TRUST.verify(wire, payload_type=RECEIPT_PAYLOAD_TYPE)
    assert verified.payload == odd_bytes

    # A verifier that re-serialized would check other bytes, and fail.
    wire.payload = canonical
    with pytest.raises(SignatureError):
        TRUST.verify(wire, payload_type=RECEIPT_PAYLOAD_TYPE)


# --- trust sets ----------------------------------------------------------------------------------


def test_trust_set_is_immutable_and_keyed_by_id() -> None:
    trust = TrustSet([ALICE.public_key, ALICE.public_key, BOB.public_key])
    assert trust.key_ids == frozenset({ALICE.key_id, BOB.key_id})
    assert len(trust) == 2
    assert ALICE.key_id in trust
    assert MALLORY.key_id not in trust
    assert trust.public_key(BOB.key_id) == BOB.public_key
    with pytest.raises(AttributeError):
        setattr(trust, "_keys", {})  # noqa: B010 - the point is the dynamic write


def test_trust_set_rejects_malformed_key() -> None:
    with pytest.raises(SignatureError):
        TrustSet([b"\x00" * 31])


# --- key files ---------------------------------------------------------------------------------


def test_key_file_created_0600_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "worker.key"
    created = SigningKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    reloaded = SigningKey.load_or_create(path)
    assert reloaded.key_id == created.key_id
    assert reloaded.sign(b"m") == created.sign(b"m")
    # No temporary files left beside the key.
    assert sorted(p.name for p in path.parent.iterdir()) == ["worker.key"]


def test_key_file_0600_even_with_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "worker.key"
        SigningKey.load_or_create(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_raw_seed_key_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "raw.key"
    path.write_bytes(RFC8032_SEED)
    path.chmod(0o600)
    assert SigningKey.load_or_create(path).public_key == RFC8032_PUBLIC


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_refuses_group_or_world_readable_key_file(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "worker.key"
    SigningKey.load_or_create(path)
    path.chmod(mode)
    with pytest.raises(SignatureError, match="group or others") as info:
        SigningKey.load_or_create(path)
    # The message names the problem, never the key material.
    seed_hex = path.read_text().strip()
    assert seed_hex not in str(info.value)


def test_refuses_malformed_key_file_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "worker.key"
    path.write_text("not-a-seed-but-maybe-a-secret\n")
    path.chmod(0o600)
    with pytest.raises(SignatureError, match="does not hold") as info:
        SigningKey.load_or_create(path)
    assert "maybe-a-secret" not in str(info.value)


def test_repr_hides_seed() -> None:
    seed = bytes(range(100, 132))
    key = SigningKey.from_seed(seed)
    for text in (repr(key), str(key), f"{key}"):
        assert key.key_id in text
        assert seed.hex() not in text
        assert repr(seed) not in text


# --- certificates ------------------------------------------------------------------------------


def test_certificate_sign_verify_round_trip() -> None:
    cert = _certificate()
    signed = sign_certificate(cert, ALICE)
    assert cert.signature == b""  # input left unchanged
    assert cert.issuer_key_id == ""
    assert signed.issuer_key_id == ALICE.key_id
    assert len(signed.signature) == 64
    assert verify_certificate(signed, TRUST) == ALICE.key_id
    # It survives the wire, and the signature covers every field but itself.
    wire = RewardCertificate.FromString(signed.SerializeToString())
    assert verify_certificate(wire, TRUST) == ALICE.key_id
    resigned = RewardCertificate()
    resigned.CopyFrom(signed)
    resigned.signature = b"other"
    assert certificate_signing_bytes(resigned) == certificate_signing_bytes(signed)


def test_certificate_signing_bytes_are_canonical_json() -> None:
    body = certificate_signing_bytes(_certificate())
    assert body.startswith(b'{"calibration_corpus_digest":')  # sorted keys, original names
    assert b" " not in body
    assert b"signature" not in body


def test_tampered_epsilon_certificate_rejected() -> None:
    signed = sign_certificate(_certificate(), ALICE)
    signed.epsilon = 0.5
    with pytest.raises(SignatureError, match="does not verify"):
        verify_certificate(signed, TRUST)


def test_certificate_reissued_under_other_trusted_key_id_rejected() -> None:
    signed = sign_certificate(_certificate(), ALICE)
    signed.issuer_key_id = BOB.key_id
    with pytest.raises(SignatureError, match="does not verify"):
        verify_certificate(signed, TRUST)


def test_certificate_untrusted_issuer_rejected() -> None:
    signed = sign_certificate(_certificate(), MALLORY)
    with pytest.raises(SignatureError, match="not trusted"):
        verify_certificate(signed, TRUST)


def test_certificate_truncated_signature_rejected() -> None:
    signed = sign_certificate(_certificate(), ALICE)
    signed.signature = signed.signature[:63]
    with pytest.raises(SignatureError, match="63-byte"):
        verify_certificate(signed, TRUST)


def test_certificate_signature_not_valid_as_envelope_signature() -> None:
    # Domain separation: the certificate signature is over PAE(certificate type, ...), so it can
    # not be replayed as an envelope of another type over the same bytes.
    signed = sign_certificate(_certificate(), ALICE)
    envelope = SignedEnvelope(
        payload_type=RECEIPT_PAYLOAD_TYPE,
        payload=certificate_signing_bytes(signed),
        signatures=[EnvelopeSignature(keyid=ALICE.key_id, sig=signed.signature)],
    )
    with pytest.raises(SignatureError):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)


# --- properties --------------------------------------------------------------------------------


@given(payload=st.binary(max_size=1024))
def test_any_payload_round_trips(payload: bytes) -> None:
    envelope = SignedEnvelope.FromString(_envelope(payload).SerializeToString())
    assert TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE).payload == payload


@given(data=st.data(), payload=st.binary(min_size=1, max_size=1024))
def test_any_single_byte_flip_rejected(data: st.DataObject, payload: bytes) -> None:
    envelope = _envelope(payload)
    index = data.draw(st.integers(0, len(payload) - 1), label="index")
    mask = data.draw(st.integers(1, 255), label="mask")
    flipped = bytearray(payload)
    flipped[index] ^= mask
    envelope.payload = bytes(flipped)
    with pytest.raises(SignatureError):
        TRUST.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)
