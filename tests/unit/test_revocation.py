"""Attacks on signed revocation lists: rollback, freeze, conflict, forgery (R-C-4, R-SIG-2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from rewardseal.core.errors import SignatureError, StaleRevocationList, ValidationError
from rewardseal.core.revocation import (
    RevocationFollower,
    build_revocation_list,
    open_revocation_list,
    sign_revocation_list,
)
from rewardseal.core.signing import (
    RECEIPT_PAYLOAD_TYPE,
    REVOCATION_LIST_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    sign_envelope,
)
from rewardseal.rpc.status import from_parts
from rewardseal.v1.certificate_pb2 import RevocationEntry, RevocationList
from rewardseal.v1.receipt_pb2 import SignedEnvelope

ORG = SigningKey.from_seed(bytes(range(32)))
OTHER_ORG = SigningKey.from_seed(bytes(range(32, 64)))
MALLORY = SigningKey.from_seed(bytes(range(64, 96)))
TRUST = TrustSet([ORG.public_key])
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = timedelta(hours=24)


def entry(certificate_id: str, reason: str = "key compromised") -> RevocationEntry:
    stamp = Timestamp()
    stamp.FromDatetime(T0)
    return RevocationEntry(certificate_id=certificate_id, reason=reason, revoked_at=stamp)


def signed(
    version: int,
    revoked: tuple[str, ...] = (),
    *,
    key: SigningKey = ORG,
    issued_at: datetime = T0,
    reason: str = "key compromised",
) -> SignedEnvelope:
    revocation_list = build_revocation_list(
        version=version,
        entries=[entry(c, reason) for c in revoked],
        issued_at=issued_at,
        ttl=TTL,
        issuer_key_id=key.key_id,
    )
    return sign_revocation_list(revocation_list, key)


def test_follower_accepts_a_newer_list_and_reports_revocations() -> None:
    follower = RevocationFollower(TRUST)
    assert follower.version == 0
    assert not follower.fresh(T0)
    follower.accept(signed(1), T0)
    assert not follower.is_revoked("cert.mockmed.0001")
    accepted = follower.accept(signed(2, ("cert.mockmed.0001",)), T0 + timedelta(minutes=1))
    assert accepted.version == 2
    assert follower.version == 2
    assert follower.is_revoked("cert.mockmed.0001")
    assert not follower.is_revoked("cert.mockmed.0002")
    assert follower.fresh(T0 + timedelta(hours=1))


def test_revocation_list_rollback_rejected() -> None:
    follower = RevocationFollower(TRUST)
    old = signed(1)  # before the revocation: replaying it would un-revoke the certificate
    follower.accept(signed(2, ("cert.mockmed.0001",)), T0)
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(old, T0)
    assert caught.value.reason == "stale_revocation_list"
    assert caught.value.metadata["problem"] == "rollback"
    assert "rollback" in caught.value.message
    # The refused list changed nothing.
    assert follower.version == 2
    assert follower.is_revoked("cert.mockmed.0001")


def test_a_floor_from_an_earlier_run_refuses_older_lists_before_any_is_held() -> None:
    follower = RevocationFollower(TRUST, floor=3)  # a restart: version 3 was accepted before
    assert follower.held is None
    assert follower.floor == 3
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(signed(2), T0)
    assert caught.value.metadata == {"problem": "rollback", "version": "2", "held_version": "3"}
    assert follower.held is None
    # The same version again (content unknown after a restart) and newer ones are taken.
    assert follower.accept(signed(3), T0).version == 3
    assert follower.accept(signed(4), T0).version == 4
    assert follower.floor == 4


def test_a_negative_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        RevocationFollower(TRUST, floor=-1)


def test_revocation_list_freeze_rejected_after_expiry() -> None:
    follower = RevocationFollower(TRUST)
    envelope = signed(1, ("cert.mockmed.0001",))
    follower.accept(envelope, T0)
    assert follower.fresh(T0 + TTL - timedelta(seconds=1))
    # An attacker who withholds new lists cannot keep the follower on this one past its expiry.
    assert not follower.fresh(T0 + TTL)
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(envelope, T0 + TTL)
    assert caught.value.metadata["problem"] == "expired"
    # A never-seen list that is already expired is refused as well.
    with pytest.raises(StaleRevocationList):
        RevocationFollower(TRUST).accept(signed(5), T0 + TTL + timedelta(days=1))
    # Revocations never lapse with the list.
    assert follower.is_revoked("cert.mockmed.0001")


def test_a_fresh_list_after_a_frozen_one_makes_the_follower_fresh_again() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1), T0)
    later = T0 + TTL + timedelta(hours=1)
    assert not follower.fresh(later)
    follower.accept(signed(2, issued_at=later), later)
    assert follower.fresh(later)


def test_revocation_list_same_version_different_content_rejected() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(3, ("cert.mockmed.0001",)), T0)
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(signed(3), T0)
    assert caught.value.metadata["problem"] == "conflict"
    with pytest.raises(StaleRevocationList):
        follower.accept(signed(3, ("cert.mockmed.0001",), reason="other words"), T0)
    assert follower.is_revoked("cert.mockmed.0001")


def test_revocation_list_same_version_same_content_is_accepted_again() -> None:
    follower = RevocationFollower(TRUST)
    envelope = signed(3, ("cert.mockmed.0001",))
    follower.accept(envelope, T0)
    assert follower.accept(envelope, T0 + timedelta(hours=1)).version == 3


def test_revocation_list_that_drops_a_revoked_certificate_rejected() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, ("cert.mockmed.0001",)), T0)
    with pytest.raises(StaleRevocationList) as caught:
        follower.accept(signed(2), T0)
    assert caught.value.metadata["problem"] == "conflict"
    assert follower.version == 1


def test_revocation_list_forged_signature_rejected() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, ("cert.mockmed.0001",)), T0)
    forged = signed(2)
    # Keep the trusted key id, but the payload no longer matches the signature.
    tampered = RevocationList.FromString(forged.payload)
    tampered.version = 9
    forged.payload = tampered.SerializeToString(deterministic=True)
    with pytest.raises(SignatureError):
        follower.accept(forged, T0)
    # A signature by Mallory under the organization's key id does not verify either.
    impostor = signed(3, key=MALLORY)
    impostor.signatures[0].keyid = ORG.key_id
    with pytest.raises(SignatureError):
        follower.accept(impostor, T0)
    assert follower.version == 1
    assert follower.is_revoked("cert.mockmed.0001")


def test_revocation_list_unknown_signer_ignored() -> None:
    follower = RevocationFollower(TRUST)
    # Signed only by an unknown key: no trusted signature, refused.
    with pytest.raises(SignatureError):
        follower.accept(signed(1, key=OTHER_ORG), T0)
    assert follower.version == 0
    # An extra signature by an unknown key neither helps nor hurts a trusted one.
    envelope = signed(1)
    trusted = list(envelope.signatures)
    del envelope.signatures[:]
    envelope.signatures.add(keyid=MALLORY.key_id, sig=MALLORY.sign(b"anything"))
    envelope.signatures.extend(trusted)
    assert follower.accept(envelope, T0).version == 1


def test_revocation_list_with_another_payload_type_rejected() -> None:
    revocation_list = RevocationList.FromString(signed(1).payload)
    as_receipt = sign_envelope(
        RECEIPT_PAYLOAD_TYPE, revocation_list.SerializeToString(deterministic=True), ORG
    )
    with pytest.raises(SignatureError):
        RevocationFollower(TRUST).accept(as_receipt, T0)


def test_revocation_list_with_unknown_fields_rejected() -> None:
    payload = signed(1).payload + b"\xfa\x01\x05hello"  # field 31, a string nobody declared
    envelope = sign_envelope(REVOCATION_LIST_PAYLOAD_TYPE, payload, ORG)
    with pytest.raises(ValidationError, match="does not know"):
        RevocationFollower(TRUST).accept(envelope, T0)


def test_revocation_list_naming_a_key_that_did_not_sign_rejected() -> None:
    both = TrustSet([ORG.public_key, OTHER_ORG.public_key])
    revocation_list = RevocationList.FromString(signed(1).payload)
    revocation_list.issuer_key_id = OTHER_ORG.key_id
    envelope = sign_envelope(
        REVOCATION_LIST_PAYLOAD_TYPE, revocation_list.SerializeToString(deterministic=True), ORG
    )
    with pytest.raises(SignatureError, match="did not sign"):
        open_revocation_list(envelope, both)


def test_build_revocation_list_sorts_and_validates() -> None:
    revocation_list = build_revocation_list(
        version=4,
        entries=[entry("cert.mockmed.0002"), entry("cert.mockmed.0001")],
        issued_at=T0,
        ttl=TTL,
        issuer_key_id=ORG.key_id,
    )
    assert [e.certificate_id for e in revocation_list.entries] == [
        "cert.mockmed.0001",
        "cert.mockmed.0002",
    ]
    assert revocation_list.expires_at.ToDatetime(tzinfo=UTC) == T0 + TTL
    bad_calls: list[dict[str, object]] = [
        {"version": 0},
        {"ttl": timedelta(0)},
        {"issued_at": T0.replace(tzinfo=None)},
        {"entries": [entry("cert.mockmed.0001"), entry("cert.mockmed.0001")]},
        {"entries": [entry("bad id")]},
        {"entries": [entry("cert.mockmed.0001", reason=" ")]},
        {"issuer_key_id": "not-a-key-id"},
    ]
    for overrides in bad_calls:
        arguments: dict[str, object] = {
            "version": 1,
            "entries": [],
            "issued_at": T0,
            "ttl": TTL,
            "issuer_key_id": ORG.key_id,
        }
        arguments.update(overrides)
        with pytest.raises(ValidationError):
            build_revocation_list(**arguments)  # type: ignore[arg-type]


def test_sign_revocation_list_refuses_another_issuer_key() -> None:
    revocation_list = RevocationList.FromString(signed(1).payload)
    with pytest.raises(ValidationError, match="issuer_key_id"):
        sign_revocation_list(revocation_list, OTHER_ORG)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        RevocationFollower(TRUST).accept(signed(1), T0.replace(tzinfo=None))


def test_stale_revocation_list_round_trips_through_the_error_mapping() -> None:
    error = StaleRevocationList("old", metadata={"problem": "rollback"})
    rebuilt = from_parts(error.code, error.reason, error.message, error.metadata)
    assert type(rebuilt) is StaleRevocationList
    assert rebuilt.metadata == {"problem": "rollback"}
