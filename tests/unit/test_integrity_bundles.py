"""Signed audit bundles (R-I-8): content-addressed, signed like receipts, any edit detected."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.integrity_builders import agreeing_rows, audit

from rewardseal.core.digest import canonical_json, digest_bytes
from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.integrity import (
    BUNDLE_PAYLOAD_TYPE,
    AuditBundle,
    AuditReport,
    build_bundle,
    verify_bundle,
)
from rewardseal.core.signing import SigningKey, TrustSet, sign_envelope
from rewardseal.v1.receipt_pb2 import SignedEnvelope

ISSUED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = SigningKey.from_seed(bytes(range(32)))
TRUST = TrustSet([KEY.public_key])


@pytest.fixture(scope="module")
def report() -> AuditReport:
    return audit(agreeing_rows(100, inverted=True), resamples=500)


def test_a_bundle_verifies_and_carries_the_report(report: AuditReport) -> None:
    bundle = build_bundle(report, KEY, issued_at=ISSUED)
    assert bundle.envelope.payload_type == BUNDLE_PAYLOAD_TYPE
    assert bundle.bundle_id == digest_bytes(bundle.envelope.payload)
    verified = verify_bundle(bundle.envelope, TRUST, bundle_id=bundle.bundle_id)
    assert verified == bundle
    assert verified.report.decision.outcome == "fail"
    assert verified.issued_at == "2026-03-01T12:00:00.000000Z"
    assert AuditBundle.from_json(bundle.to_json(), TRUST) == bundle


def test_the_bundle_is_content_addressed(report: AuditReport) -> None:
    again = build_bundle(report, KEY, issued_at=ISSUED)
    assert again.bundle_id == build_bundle(report, KEY, issued_at=ISSUED).bundle_id
    later = build_bundle(report, KEY, issued_at=ISSUED.replace(hour=13))
    assert later.bundle_id != again.bundle_id


def test_every_edited_byte_is_detected(report: AuditReport) -> None:
    bundle = build_bundle(report, KEY, issued_at=ISSUED)
    payload = bytes(bundle.envelope.payload)
    # Every byte position, flipped one bit at a time would be slow: take a stride plus the ends.
    positions = sorted({0, len(payload) - 1, *range(0, len(payload), 97)})
    for position in positions:
        edited = bytearray(payload)
        edited[position] ^= 0x01
        envelope = SignedEnvelope()
        envelope.CopyFrom(bundle.envelope)
        envelope.payload = bytes(edited)
        with pytest.raises(SignatureError):
            verify_bundle(envelope, TRUST)


def test_a_stranger_key_another_payload_type_or_another_id_is_refused(
    report: AuditReport,
) -> None:
    bundle = build_bundle(report, KEY, issued_at=ISSUED)
    with pytest.raises(SignatureError):
        verify_bundle(bundle.envelope, TrustSet([SigningKey.generate().public_key]))
    receipt_typed = sign_envelope(
        "application/vnd.rewardseal.receipt.v1+protobuf", bundle.envelope.payload, KEY
    )
    with pytest.raises(SignatureError, match="payload type"):
        verify_bundle(receipt_typed, TRUST)
    with pytest.raises(SignatureError, match="hash"):
        verify_bundle(bundle.envelope, TRUST, bundle_id="sha256:" + "0" * 64)


def test_a_signed_but_non_canonical_payload_is_refused(report: AuditReport) -> None:
    content = {"issued_at": "2026-03-01T12:00:00.000000Z", "report": report.to_json()}
    pretty = canonical_json(content).replace(b",", b", ", 1)
    with pytest.raises(ValidationError, match="canonical"):
        verify_bundle(sign_envelope(BUNDLE_PAYLOAD_TYPE, pretty, KEY), TRUST)


def test_a_naive_issue_time_is_refused(report: AuditReport) -> None:
    with pytest.raises(ValidationError, match="timezone"):
        build_bundle(report, KEY, issued_at=datetime(2026, 3, 1))
