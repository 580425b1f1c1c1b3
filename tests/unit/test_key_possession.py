"""Proof of possession for key registration (docs/spec.md R-C-10): the exact bytes signed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rewardseal.core.errors import PermissionDenied
from rewardseal.core.key_possession import (
    POSSESSION_PAYLOAD_TYPE,
    registration_statement,
    sign_registration,
    verify_registration,
)
from rewardseal.core.signing import RECEIPT_PAYLOAD_TYPE, SigningKey, pae, sign_envelope
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.control_service_pb2 import RegisterIssuerKeyRequest
from rewardseal.v1.enums_pb2 import IssuerKeyRole

NOW = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)
KEY = SigningKey.from_seed(bytes(range(7, 39)))
A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def request(*contracts: str) -> RegisterIssuerKeyRequest:
    return RegisterIssuerKeyRequest(
        key=IssuerKey(public_key=KEY.public_key, role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER),
        reward_contract_digests=list(contracts),
    )


def test_the_statement_is_canonical_and_domain_separated() -> None:
    statement = registration_statement(request(B, A, A), NOW)
    assert statement == registration_statement(request(A, B), NOW)
    assert statement.startswith(f"DSSEv1 {len(POSSESSION_PAYLOAD_TYPE)} ".encode())
    assert b'"purpose":"rewardseal/register-issuer-key/v1"' in statement
    assert b'"signed_at":"2026-12-04T01:00:00.000000Z"' in statement
    assert registration_statement(request(A), NOW) != registration_statement(request(A, B), NOW)


def test_a_receipt_signature_never_passes_as_a_registration() -> None:
    signed = sign_registration(request(A), KEY, NOW)
    verify_registration(signed, NOW + timedelta(minutes=14))
    # The same key's signature over the same JSON as a receipt payload: another PAE type.
    body = registration_statement(request(A), NOW).split(b" ", 4)[4]
    envelope = sign_envelope(RECEIPT_PAYLOAD_TYPE, body, KEY)
    assert pae(RECEIPT_PAYLOAD_TYPE, body) != registration_statement(request(A), NOW)
    forged = request(A)
    forged.possession.CopyFrom(signed.possession)
    forged.possession.signature = envelope.signatures[0].sig
    with pytest.raises(PermissionDenied, match="does not verify"):
        verify_registration(forged, NOW)
    with pytest.raises(PermissionDenied, match="minutes from control's clock"):
        verify_registration(signed, NOW + timedelta(minutes=16))
