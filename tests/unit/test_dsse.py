"""Every rewardseal envelope kind (receipts, revocation lists, audit bundles, certificates) as
DSSE v1 JSON (R-SIG-3): an independent verifier (securesystemslib 1.6.0's ``dsse.Envelope``)
accepts it, a flipped payload or signature byte is refused, conversion is lossless both ways, and
a signature that is not over DSSE's PAE is refused.

Old-format envelopes: none exist. Every rewardseal signature has always been over
``pae(payload_type, payload)`` (``rewardseal.core.signing``), so nothing is migrated; a DSSE
document whose signature covers anything else (the bare payload) fails verification here.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey
from support.builders import TEST_KEY, make_certificate, make_facts
from support.integrity_builders import agreeing_rows, audit

from rewardseal.cli import main
from rewardseal.cli.receipt import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rewardseal.core.dsse import (
    certificate_from_dsse_json,
    certificate_to_dsse_json,
    dsse_envelope_for,
    from_dsse_json,
    to_dsse_json,
    verify_dsse_json,
)
from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.integrity import build_bundle, verify_bundle
from rewardseal.core.receipts import build_receipt, open_receipt, seal_receipt
from rewardseal.core.revocation import (
    build_revocation_list,
    open_revocation_list,
    sign_revocation_list,
)
from rewardseal.core.signing import (
    CERTIFICATE_PAYLOAD_TYPE,
    RECEIPT_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    verify_certificate,
)
from rewardseal.v1.certificate_pb2 import RevocationEntry
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import EnvelopeSignature, SignedEnvelope
from rewardseal_mockmed.contract import mockmed_contract

TRUST = TrustSet([TEST_KEY.public_key])
OTHER = SigningKey.from_seed(bytes(range(64, 96)))
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def sslib_key(key: SigningKey) -> SSlibKey:
    """The public half of ``key`` as securesystemslib spells an Ed25519 key."""
    return SSlibKey(
        keyid=key.key_id,
        keytype="ed25519",
        scheme="ed25519",
        keyval={"public": key.public_key.hex()},
    )


def sslib_verify(doc: dict[str, Any], key: SigningKey = TEST_KEY) -> bytes:
    """securesystemslib's DSSE verification of ``doc``; its payload. (``from_dict`` rewrites
    the signatures it is given, so it gets a copy.)"""
    envelope = Envelope.from_dict(copy.deepcopy(doc))
    accepted = envelope.verify([sslib_key(key)], 1)
    assert list(accepted) == [key.key_id]
    return envelope.payload


def receipt_envelope(outcome: int = RewardOutcome.REWARD_OUTCOME_VERIFIED) -> SignedEnvelope:
    contract = mockmed_contract()
    receipt = build_receipt(
        make_facts(outcome),  # type: ignore[arg-type]
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )
    return seal_receipt(receipt, TEST_KEY)


def revocation_envelope() -> SignedEnvelope:
    stamp = Timestamp()
    stamp.FromDatetime(T0)
    revocation_list = build_revocation_list(
        version=3,
        entries=[
            RevocationEntry(certificate_id="cert.mockmed.0001", reason="leaked", revoked_at=stamp)
        ],
        issued_at=T0,
        ttl=timedelta(hours=24),
        issuer_key_id=TEST_KEY.key_id,
    )
    return sign_revocation_list(revocation_list, TEST_KEY)


@functools.cache
def audit_bundle_bytes() -> bytes:
    report = audit(agreeing_rows(100, inverted=True), resamples=200)
    return build_bundle(report, TEST_KEY, issued_at=T0).envelope.SerializeToString()


def audit_bundle_envelope() -> SignedEnvelope:
    return SignedEnvelope.FromString(audit_bundle_bytes())


ENVELOPES: dict[str, Callable[[], SignedEnvelope]] = {
    "receipt": receipt_envelope,
    "audit_bundle": audit_bundle_envelope,
    "unscored_receipt": lambda: receipt_envelope(RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM),
    "revocation_list": revocation_envelope,
}


KINDS = ["receipt", "unscored_receipt", "revocation_list", "audit_bundle", "certificate"]


def every_kind() -> dict[str, dict[str, Any]]:
    """Each envelope kind's DSSE JSON, the certificate's included."""
    kinds = {name: to_dsse_json(make()) for name, make in ENVELOPES.items()}
    kinds["certificate"] = certificate_to_dsse_json(make_certificate())
    return kinds


def flip(text: str, position: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[position] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("kind", KINDS)
def test_every_envelope_kind_verifies_with_securesystemslib(kind: str) -> None:
    doc = every_kind()[kind]
    assert list(doc) == ["payloadType", "payload", "signatures"]
    payload = sslib_verify(doc)
    assert payload == base64.b64decode(doc["payload"])
    # ... and with ours, over the same bytes.
    assert verify_dsse_json(doc, TRUST).payload == payload


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["payload_first", "payload_last", "sig_first", "sig_last"])
def test_a_flipped_byte_fails_both_verifiers(kind: str, where: str) -> None:
    doc = every_kind()[kind]
    if where.startswith("payload"):
        doc["payload"] = flip(doc["payload"], 0 if where.endswith("first") else -1)
    else:
        signature = doc["signatures"][0]
        signature["sig"] = flip(signature["sig"], 0 if where.endswith("first") else -1)
    with pytest.raises(VerificationError):
        sslib_verify(doc)
    with pytest.raises(SignatureError):
        verify_dsse_json(doc, TRUST)


@pytest.mark.parametrize("kind", KINDS)
def test_another_key_does_not_verify(kind: str) -> None:
    doc = every_kind()[kind]
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(doc)).verify(
            [
                SSlibKey(
                    keyid=TEST_KEY.key_id,  # the claimed id, another key's bytes
                    keytype="ed25519",
                    scheme="ed25519",
                    keyval={"public": OTHER.public_key.hex()},
                )
            ],
            1,
        )
    with pytest.raises(SignatureError):
        verify_dsse_json(doc, TrustSet([OTHER.public_key]))


@pytest.mark.parametrize("name", sorted(ENVELOPES))
def test_envelope_conversion_is_lossless(name: str) -> None:
    envelope = ENVELOPES[name]()
    doc = to_dsse_json(envelope)
    back = from_dsse_json(doc)
    assert back == envelope
    assert back.SerializeToString(deterministic=True) == envelope.SerializeToString(
        deterministic=True
    )
    assert to_dsse_json(back) == doc
    # The converted-back envelope is still one every rewardseal reader opens.
    if name.endswith("receipt"):
        assert open_receipt(back, TRUST).receipt.receipt_id
    elif name == "audit_bundle":
        assert verify_bundle(back, TRUST).envelope == envelope
    else:
        assert open_revocation_list(back, TRUST).version == 3


def test_a_signed_envelope_json_mapping_is_its_dsse_json() -> None:
    # protobuf's JSON mapping of an envelope with default flags already spells DSSE v1 JSON.
    envelope = receipt_envelope()
    assert json_format.MessageToDict(envelope) == to_dsse_json(envelope)


def test_certificate_conversion_is_lossless() -> None:
    certificate = make_certificate()
    doc = certificate_to_dsse_json(certificate)
    back = certificate_from_dsse_json(doc)
    assert back == certificate
    assert back.SerializeToString(deterministic=True) == certificate.SerializeToString(
        deterministic=True
    )
    assert certificate_to_dsse_json(back) == doc
    assert verify_certificate(back, TRUST) == TEST_KEY.key_id
    assert json.loads(base64.b64decode(doc["payload"]))["certificate_id"] == "cert.mockmed.0001"
    assert doc["payloadType"] == CERTIFICATE_PAYLOAD_TYPE


def test_a_signature_not_over_pae_is_refused() -> None:
    # What an "old format" would be: Ed25519 over the bare payload. None was ever made, and
    # one made now verifies nowhere.
    envelope = receipt_envelope()
    envelope.signatures[0].sig = TEST_KEY.sign(envelope.payload)
    doc = to_dsse_json(envelope)
    with pytest.raises(SignatureError, match="0 of 1 signature"):
        verify_dsse_json(doc, TRUST)
    with pytest.raises(VerificationError):
        sslib_verify(doc)


def test_a_document_of_another_type_is_refused_when_a_type_is_expected() -> None:
    doc = dsse_envelope_for("application/vnd.example+json", b"{}", TEST_KEY)
    assert sslib_verify(doc) == b"{}"
    with pytest.raises(SignatureError, match="payload type"):
        verify_dsse_json(doc, TRUST, payload_type=RECEIPT_PAYLOAD_TYPE)


def _mutations() -> dict[str, Callable[[dict[str, Any]], object]]:
    return {
        "unknown_field": lambda d: d.update(extra=1),
        "missing_payload": lambda d: d.pop("payload"),
        "missing_signatures": lambda d: d.pop("signatures"),
        "empty_type": lambda d: d.update(payloadType=""),
        "type_not_string": lambda d: d.update(payloadType=7),
        "url_safe_base64": lambda d: d.update(
            payload=d["payload"].replace("+", "-").replace("/", "_") + "-_"
        ),
        "unpadded_base64": lambda d: d.update(payload="YWJjZA"),
        "not_base64": lambda d: d.update(payload="*not*"),
        "signatures_not_list": lambda d: d.update(signatures={}),
        "signature_unknown_field": lambda d: d["signatures"][0].update(extra="x"),
        "signature_missing_keyid": lambda d: d["signatures"][0].pop("keyid"),
        "signature_keyid_not_string": lambda d: d["signatures"][0].update(keyid=1),
        "signature_bad_base64": lambda d: d["signatures"][0].update(sig="@@"),
    }


@pytest.mark.parametrize("mutation", sorted(_mutations()))
def test_a_malformed_document_is_refused(mutation: str) -> None:
    doc = to_dsse_json(receipt_envelope())
    _mutations()[mutation](doc)
    with pytest.raises(ValidationError) as raised:
        from_dsse_json(doc)
    assert not isinstance(raised.value, SignatureError)


def test_flags_that_say_more_than_the_payload_have_no_dsse_form() -> None:
    envelope = receipt_envelope()
    envelope.unscored = True  # a VERIFIED receipt
    with pytest.raises(ValidationError, match="unscored"):
        to_dsse_json(envelope)
    envelope = revocation_envelope()
    envelope.production_seal = True
    with pytest.raises(ValidationError, match="seal"):
        to_dsse_json(envelope)


def test_a_certificate_payload_that_is_not_canonical_is_refused() -> None:
    doc = certificate_to_dsse_json(make_certificate())
    fields = json.loads(base64.b64decode(doc["payload"]))
    doc["payload"] = base64.b64encode(json.dumps(fields, indent=1).encode()).decode()
    with pytest.raises(ValidationError, match="canonical"):
        certificate_from_dsse_json(doc)


def test_a_certificate_signature_under_another_keyid_is_refused() -> None:
    doc = certificate_to_dsse_json(make_certificate())
    doc["signatures"][0]["keyid"] = OTHER.key_id
    with pytest.raises(ValidationError, match="issuer_key_id"):
        certificate_from_dsse_json(doc)
    doc = certificate_to_dsse_json(make_certificate())
    doc["signatures"].append(dict(doc["signatures"][0]))
    with pytest.raises(ValidationError, match="one signature"):
        certificate_from_dsse_json(doc)


def test_two_signatures_keep_their_order() -> None:
    envelope = revocation_envelope()
    envelope.signatures.append(EnvelopeSignature(keyid=OTHER.key_id, sig=b"\x00" * 64))
    assert from_dsse_json(to_dsse_json(envelope)) == envelope


# --- rewardseal receipt dsse ----------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_prints_each_kind_in_each_file_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receipt = receipt_envelope()
    revocations = revocation_envelope()
    certificate = make_certificate()
    files = {
        "receipt.pb": (receipt.SerializeToString(), to_dsse_json(receipt)),
        "receipt.json": (json_format.MessageToJson(receipt).encode(), to_dsse_json(receipt)),
        "revocations.json": (
            json.dumps({"revocationList": json_format.MessageToDict(revocations)}).encode(),
            to_dsse_json(revocations),
        ),
        "certificate.json": (
            json_format.MessageToJson(certificate, preserving_proto_field_name=True).encode(),
            certificate_to_dsse_json(certificate),
        ),
        "get_certificate.json": (
            json.dumps({"certificate": json_format.MessageToDict(certificate)}).encode(),
            certificate_to_dsse_json(certificate),
        ),
    }
    for name, (content, expected) in files.items():
        path = tmp_path / name
        path.write_bytes(content)
        status, out, err = cli(capsys, "receipt", "dsse", str(path))
        assert (status, err) == (EXIT_OK, ""), name
        printed = json.loads(out)
        assert printed == expected, name
        sslib_verify(printed)
        # DSSE JSON in, the same DSSE JSON out (it is an envelope's JSON mapping).
        again = tmp_path / f"{name}.dsse.json"
        again.write_text(out)
        assert cli(capsys, "receipt", "dsse", str(again))[:2] == (EXIT_OK, out), name


def test_cli_refuses_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": "world"}')
    status, out, err = cli(capsys, "receipt", "dsse", str(junk))
    assert status == EXIT_FAILED
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("rewardseal receipt dsse: cannot convert: ")

    status, out, err = cli(capsys, "receipt", "dsse", str(tmp_path / "absent.pb"))
    assert status == EXIT_USAGE
    assert err.count("\n") == 1
    assert "cannot read" in err
