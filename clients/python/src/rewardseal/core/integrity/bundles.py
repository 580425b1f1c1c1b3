"""Signed audit bundles (R-I-8): the audit's content, content-addressed and signed.

The bundle content is an :class:`~rewardseal.core.integrity.reports.AuditReport` (revision ids,
shard ids, metrics, intervals, decision and reasons) plus when it was issued. Its id is the
R-DIG-1 digest of that content; it travels in the same DSSE-style envelope as receipts
(:func:`rewardseal.core.signing.sign_envelope`), under its own payload type, signed by the control
plane's key. The payload is the content's canonical JSON, so verification checks the signature
over the exact bytes and then that those bytes are canonical: any edited byte is refused.

Both sides of the format live here, in core: a trainer verifies a bundle itself with the pinned
organization key (what ``verify_audit`` of the integrity client answers), and only the control
plane, which holds that key, builds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from google.protobuf import json_format

from rewardseal.core import strict_json
from rewardseal.core.digest import canonical_json, digest_bytes, message_to_json_object
from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.reports import AuditReport
from rewardseal.core.signing import SigningKey, TrustSet, sign_envelope
from rewardseal.v1.receipt_pb2 import SignedEnvelope

__all__ = ["BUNDLE_PAYLOAD_TYPE", "AuditBundle", "build_bundle", "verify_bundle"]

BUNDLE_PAYLOAD_TYPE: Final = "application/vnd.rewardseal.integrity-audit-bundle.v1+json"


@dataclass(frozen=True, slots=True)
class AuditBundle:
    """A verified (or freshly signed) bundle: its id, report, issue time and envelope."""

    bundle_id: str
    report: AuditReport
    issued_at: str
    envelope: SignedEnvelope

    def to_json(self) -> JsonObject:
        """``{"bundle_id", "envelope"}``: the envelope in proto3 JSON (bytes as base64). The
        report and time are inside the signed payload; store them beside it only as a cache."""
        return {"bundle_id": self.bundle_id, "envelope": message_to_json_object(self.envelope)}

    @classmethod
    def from_json(cls, doc: object, trust: TrustSet) -> AuditBundle:
        """Read a stored bundle, verifying it (a bundle is never trusted unverified)."""
        data = fields.mapping(doc, "bundle")
        fields.no_unknown_keys(data, ("bundle_id", "envelope"), "bundle")
        envelope = SignedEnvelope()
        try:
            json_format.ParseDict(
                dict(fields.mapping(data.get("envelope"), "bundle.envelope")), envelope
            )
        except json_format.ParseError as exc:
            raise ValidationError(f"bundle envelope is malformed: {exc}") from exc
        return verify_bundle(envelope, trust, bundle_id=fields.string(data, "bundle_id", "bundle"))


def _content(report: AuditReport, issued_at: str) -> JsonObject:
    return {"issued_at": issued_at, "report": report.to_json()}


def build_bundle(report: AuditReport, key: SigningKey, *, issued_at: datetime) -> AuditBundle:
    """Sign ``report`` as a bundle issued at ``issued_at`` (injected; timezone-aware).

    Raises:
        ValidationError: ``issued_at`` is naive.
    """
    stamp = fields.rfc3339(issued_at, "issued_at")
    payload = canonical_json(_content(report, stamp))
    envelope = sign_envelope(BUNDLE_PAYLOAD_TYPE, payload, key)
    return AuditBundle(digest_bytes(payload), report, stamp, envelope)


def verify_bundle(
    envelope: SignedEnvelope, trust: TrustSet, *, bundle_id: str | None = None
) -> AuditBundle:
    """Verify a bundle envelope and return its content.

    Raises:
        SignatureError: no trusted key signed these exact bytes (any edited byte), the payload
            type is not a bundle's, or the payload is not ``bundle_id``.
        ValidationError: the signed payload is not canonical JSON of a well-formed bundle.
    """
    verified = trust.verify(envelope, payload_type=BUNDLE_PAYLOAD_TYPE)
    payload = verified.payload
    if bundle_id is not None and digest_bytes(payload) != bundle_id:
        raise SignatureError(f"the bundle payload does not hash to {bundle_id}")
    try:
        content: Any = strict_json.loads(payload)
    except ValueError as exc:
        raise ValidationError(f"the bundle payload is not JSON: {exc}") from exc
    if canonical_json(content) != payload:
        raise ValidationError("the bundle payload is not in canonical (RFC 8785) form")
    data = fields.mapping(content, "bundle")
    fields.no_unknown_keys(data, ("issued_at", "report"), "bundle")
    report = AuditReport.from_json(data.get("report"))
    return AuditBundle(
        digest_bytes(payload), report, fields.string(data, "issued_at", "bundle"), envelope
    )
