"""rewardseal's signed messages as DSSE v1 JSON envelopes, both ways, losslessly (R-SIG-3).

Every rewardseal signature already is a DSSE v1 signature: Ed25519 over
:func:`rewardseal.core.signing.pae` of a payload type and the exact payload bytes. So
converting is a change of spelling, never a re-signing:

* a :class:`SignedEnvelope` (receipts, revocation lists, audit bundles) is the DSSE envelope
  itself; its protobuf bytes fields become standard padded base64 (:func:`to_dsse_json`,
  :func:`from_dsse_json`). Its flags (``unscored``, the seals) lie outside the signature and
  only repeat what the signed payload says (R-MSG-8), so they are not written: reading derives
  them again, and an envelope whose flags say more than its payload is refused;
* a :class:`RewardCertificate` carries its signature inline, over ``pae(CERTIFICATE_PAYLOAD_TYPE,
  certificate_signing_bytes(cert))``: its DSSE payload is those canonical bytes and its one
  signature is the certificate's (:func:`certificate_to_dsse_json`,
  :func:`certificate_from_dsse_json`).

Reading is strict: a field DSSE does not define, a missing field, base64 that is not the one
standard padded spelling of its bytes are refused (:class:`ValidationError`), so every document
has exactly one envelope and every envelope one document. Converting never checks a signature;
:func:`verify_dsse_json` does, with the rules of :meth:`TrustSet.verify` (R-SIG-2).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from rewardseal.core import strict_json
from rewardseal.core.errors import ValidationError, preview
from rewardseal.core.receipts import is_unscored
from rewardseal.core.signing import (
    CERTIFICATE_PAYLOAD_TYPE,
    RECEIPT_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    VerifiedPayload,
    certificate_signing_bytes,
    sign_envelope,
)
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.receipt_pb2 import EnvelopeSignature, RewardEvidenceReceipt, SignedEnvelope

__all__ = [
    "DSSE_FIELDS",
    "SIGNATURE_FIELDS",
    "certificate_from_dsse_json",
    "certificate_to_dsse_json",
    "dsse_envelope_for",
    "from_dsse_json",
    "to_dsse_json",
    "verify_dsse_json",
]

DSSE_FIELDS: Final = ("payloadType", "payload", "signatures")
"""The members of a DSSE v1 JSON envelope, in the order this module writes them."""
SIGNATURE_FIELDS: Final = ("keyid", "sig")
"""The members of one DSSE signature (``keyid`` is required here: R-SIG-2 matches by it)."""


def _b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode("ascii")


def _unb64(value: object, where: str) -> bytes:
    """The bytes ``value`` spells in standard padded base64, refusing every other spelling."""
    if not isinstance(value, str):
        raise ValidationError(f"DSSE {where} is base64 text, not {type(value).__name__}")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raw = None
    # One spelling per byte string (no URL-safe alphabet, no missing padding, no stray bits):
    # what we read is what we would write, so conversion is lossless both ways.
    if raw is None or _b64(raw) != value:
        raise ValidationError(
            f"DSSE {where} {preview(value, 40)} is not standard padded base64 (RFC 4648 §4)"
        )
    return raw


def _exact_keys(doc: object, fields: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise ValidationError(f"{where} is a JSON object, not {type(doc).__name__}")
    unknown = sorted(str(key) for key in doc if key not in fields)
    if unknown:
        raise ValidationError(
            f"{where} has a field DSSE v1 does not define: {preview(unknown[0], quoted=True)}"
        )
    missing = [name for name in fields if name not in doc]
    if missing:
        raise ValidationError(f"{where} lacks {missing[0]!r}")
    return doc


def _derived_unscored(payload_type: str, payload: bytes) -> bool:
    """The ``unscored`` flag a reader expects beside ``payload`` (R-MSG-8 step 5).

    Only a receipt can be unscored. Its payload is parsed here only to spell the unsigned flag
    again; nothing parsed is trusted (open_receipt verifies, parses strictly and checks the
    flag). A payload that does not parse gets False, and open_receipt refuses it anyway.
    """
    if payload_type != RECEIPT_PAYLOAD_TYPE:
        return False
    receipt = RewardEvidenceReceipt()
    try:
        receipt.ParseFromString(payload)
    except DecodeError:
        return False
    return is_unscored(receipt)


def to_dsse_json(envelope: SignedEnvelope) -> dict[str, Any]:
    """``envelope`` as a DSSE v1 JSON envelope: ``payloadType``, ``payload`` and
    ``signatures[{keyid, sig}]``, bytes in standard padded base64 (R-SIG-3).

    Raises:
        ValidationError: the envelope's unsigned flags say more than its payload (a seal, or an
            ``unscored`` flag its receipt contradicts): no DSSE reader could get them back,
            and every rewardseal reader refuses such an envelope anyway.
    """
    if envelope.execute_seal or envelope.production_seal or envelope.flow_governed_policy:
        raise ValidationError("an envelope claiming a seal or a governed policy has no DSSE form")
    if envelope.unscored != _derived_unscored(envelope.payload_type, envelope.payload):
        raise ValidationError("the envelope's unscored flag disagrees with its payload")
    return {
        "payloadType": envelope.payload_type,
        "payload": _b64(envelope.payload),
        "signatures": [
            {"keyid": signature.keyid, "sig": _b64(signature.sig)}
            for signature in envelope.signatures
        ],
    }


def from_dsse_json(doc: Mapping[str, Any]) -> SignedEnvelope:
    """The :class:`SignedEnvelope` a DSSE v1 JSON envelope spells (the inverse of
    :func:`to_dsse_json`; the signature is not checked here).

    Raises:
        ValidationError: a member is missing, unknown, of the wrong type, or not standard
            padded base64.
    """
    doc = _exact_keys(doc, DSSE_FIELDS, "a DSSE envelope")
    payload_type = doc["payloadType"]
    if not isinstance(payload_type, str) or not payload_type:
        raise ValidationError("DSSE payloadType is a non-empty string")
    payload = _unb64(doc["payload"], "payload")
    listed = doc["signatures"]
    if not isinstance(listed, list):
        raise ValidationError("DSSE signatures is a JSON array")
    signatures = []
    for position, entry in enumerate(listed):
        where = f"DSSE signatures[{position}]"
        entry = _exact_keys(entry, SIGNATURE_FIELDS, where)
        keyid = entry["keyid"]
        if not isinstance(keyid, str):
            raise ValidationError(f"{where}.keyid is a string")
        signatures.append(EnvelopeSignature(keyid=keyid, sig=_unb64(entry["sig"], f"{where}.sig")))
    return SignedEnvelope(
        payload_type=payload_type,
        payload=payload,
        signatures=signatures,
        unscored=_derived_unscored(payload_type, payload),
    )


def certificate_to_dsse_json(certificate: RewardCertificate) -> dict[str, Any]:
    """A certificate as the DSSE v1 JSON envelope its inline signature already is (R-SIG-3):
    payload :func:`certificate_signing_bytes`, type ``CERTIFICATE_PAYLOAD_TYPE``, one
    signature by ``issuer_key_id``."""
    return {
        "payloadType": CERTIFICATE_PAYLOAD_TYPE,
        "payload": _b64(certificate_signing_bytes(certificate)),
        "signatures": [{"keyid": certificate.issuer_key_id, "sig": _b64(certificate.signature)}],
    }


def certificate_from_dsse_json(doc: Mapping[str, Any]) -> RewardCertificate:
    """The certificate a DSSE envelope of :func:`certificate_to_dsse_json` spells (the
    signature is not checked here; :func:`rewardseal.core.signing.verify_certificate` does).

    Raises:
        ValidationError: the envelope is malformed, is not of the certificate payload type,
            has other than one signature, its keyid is not the certificate's issuer, or its
            payload is not a certificate's exact canonical signing bytes (anything else could
            not be the bytes the certificate's signature covers).
    """
    envelope = from_dsse_json(doc)
    if envelope.payload_type != CERTIFICATE_PAYLOAD_TYPE:
        raise ValidationError(
            f"payload type {preview(envelope.payload_type)} is not {CERTIFICATE_PAYLOAD_TYPE!r}"
        )
    if len(envelope.signatures) != 1:
        raise ValidationError(
            f"a certificate carries one signature; this envelope has {len(envelope.signatures)}"
        )
    try:
        fields = strict_json.loads(envelope.payload)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"the certificate payload is not JSON: {exc}") from None
    if not isinstance(fields, dict) or "signature" in fields:
        raise ValidationError("the certificate payload is a certificate without its signature")
    certificate = RewardCertificate()
    try:
        json_format.ParseDict(fields, certificate)
    except json_format.ParseError as exc:
        raise ValidationError(f"the certificate payload does not parse: {exc}") from None
    if certificate_signing_bytes(certificate) != envelope.payload:
        raise ValidationError(
            "the certificate payload is not in canonical form (RFC 8785 of its proto3 JSON)"
        )
    signature = envelope.signatures[0]
    if signature.keyid != certificate.issuer_key_id:
        raise ValidationError(
            f"the signature's keyid {preview(signature.keyid)} is not the certificate's "
            f"issuer_key_id {preview(certificate.issuer_key_id)}"
        )
    certificate.signature = signature.sig
    return certificate


def dsse_envelope_for(payload_type: str, payload: bytes, key: SigningKey) -> dict[str, Any]:
    """``payload`` signed by ``key`` as ``payload_type``, as DSSE v1 JSON (the signature over
    :func:`rewardseal.core.signing.pae`, like every rewardseal envelope)."""
    return to_dsse_json(sign_envelope(payload_type, payload, key))


def verify_dsse_json(
    doc: Mapping[str, Any],
    trust: TrustSet,
    *,
    payload_type: str | None = None,
    threshold: int = 1,
) -> VerifiedPayload:
    """Verify a DSSE v1 JSON envelope with the rules of :meth:`TrustSet.verify` (R-SIG-2) and
    return its exact payload bytes; ``payload_type``, when given, is the type it must have.

    A signature is over ``pae(payloadType, payload)``; one over anything else (the bare
    payload, another encoding) does not verify.

    Raises:
        ValidationError: the document is not a DSSE envelope (see :func:`from_dsse_json`).
        SignatureError: another payload type, or fewer than ``threshold`` trusted keys verify.
    """
    envelope = from_dsse_json(doc)
    expected = envelope.payload_type if payload_type is None else payload_type
    return trust.verify(envelope, payload_type=expected, threshold=threshold)
