"""Proof of possession for issuer-key registration (docs/spec.md R-C-10).

A credential that is not the admin's registers a key only with a signature made by that key
over a canonical statement of the registration: what key, for which role, for which contracts,
with which bundle certificate, and when. The statement is the RFC 8785 canonical JSON of those
fields under a purpose tag, signed over its DSSE pre-authentication encoding (:func:`pae`) with
its own payload type, so it can never be replayed as a receipt, a certificate or a revocation
list, nor a receipt signature as a registration.

Both sides build the bytes with :func:`registration_statement`: the worker to sign
(:func:`sign_registration`), control to verify (:func:`verify_registration`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from rewardseal.core.contract import certificate_digest
from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import PermissionDenied, SignatureError
from rewardseal.core.signing import SigningKey, key_id_for, pae, verify_detached
from rewardseal.v1.control_service_pb2 import KeyPossession, RegisterIssuerKeyRequest
from rewardseal.v1.enums_pb2 import IssuerKeyRole

__all__ = [
    "MAX_POSSESSION_SKEW",
    "POSSESSION_PAYLOAD_TYPE",
    "REGISTRATION_PURPOSE",
    "registration_statement",
    "sign_registration",
    "verify_registration",
]

REGISTRATION_PURPOSE: Final = "rewardseal/register-issuer-key/v1"
POSSESSION_PAYLOAD_TYPE: Final = "application/vnd.rewardseal.key-registration.v1+json"
MAX_POSSESSION_SKEW: Final = timedelta(minutes=15)
"""How far ``signed_at`` may sit from control's clock: a captured registration is stale after
this (clocks of worker and control are assumed within minutes of each other)."""


def registration_statement(request: RegisterIssuerKeyRequest, signed_at: datetime) -> bytes:
    """The exact bytes a registration's possession signature covers.

    The canonical JSON of the purpose tag, the key id and public key (hex), the role's name,
    the sorted, de-duplicated contract digests, the bundle certificate's digest (empty when
    none) and ``signed_at`` (RFC 3339, UTC, microseconds), wrapped in :func:`pae`.

    Raises:
        SignatureError: the public key is not 32 bytes.
    """
    key = request.key
    public_key = bytes(key.public_key)
    bundle = (
        certificate_digest(request.bundle_certificate)
        if request.HasField("bundle_certificate")
        else ""
    )
    statement = {
        "purpose": REGISTRATION_PURPOSE,
        "key_id": key_id_for(public_key),
        "public_key": public_key.hex(),
        "role": IssuerKeyRole.Name(key.role),
        "reward_contract_digests": sorted(set(request.reward_contract_digests)),
        "bundle_certificate_digest": bundle,
        "signed_at": _moment(signed_at),
    }
    return pae(POSSESSION_PAYLOAD_TYPE, canonical_json(statement))


def sign_registration(
    request: RegisterIssuerKeyRequest, key: SigningKey, signed_at: datetime
) -> RegisterIssuerKeyRequest:
    """Set ``request.possession`` to ``key``'s signature of the registration at ``signed_at``;
    returns ``request``. ``request.key`` must be ``key``'s public key."""
    if bytes(request.key.public_key) != key.public_key:
        raise ValueError("a registration is signed by the key it registers")
    possession = KeyPossession(signature=key.sign(registration_statement(request, signed_at)))
    possession.signed_at.FromDatetime(signed_at)
    request.possession.CopyFrom(possession)
    return request


def verify_registration(request: RegisterIssuerKeyRequest, now: datetime) -> None:
    """Refuse a registration that does not prove possession of the key it registers.

    Raises:
        PermissionDenied: no proof, a proof signed too long before or after ``now``
            (:data:`MAX_POSSESSION_SKEW`), or a signature that does not verify under the
            registered public key over :func:`registration_statement`.
    """
    if not request.HasField("possession") or not request.possession.signature:
        raise PermissionDenied(
            "registering a key needs proof of possession: a signature by that key over the "
            "registration statement (docs/spec.md R-C-10); only the admin credential may "
            "register a key without one"
        )
    possession = request.possession
    signed_at = possession.signed_at.ToDatetime(tzinfo=UTC)
    if abs(now - signed_at) > MAX_POSSESSION_SKEW:
        raise PermissionDenied(
            f"the proof of possession was signed at {_moment(signed_at)}, more than "
            f"{int(MAX_POSSESSION_SKEW.total_seconds() // 60)} minutes from control's clock "
            f"({_moment(now)}): check both clocks"
        )
    try:
        statement = registration_statement(request, signed_at)
        valid = verify_detached(bytes(request.key.public_key), statement, possession.signature)
    except SignatureError:
        valid = False
    if not valid:
        raise PermissionDenied(
            "the proof of possession does not verify under the key being registered: the "
            "caller does not hold that key, or the registration was altered after signing"
        )


def _moment(at: datetime) -> str:
    """RFC 3339 UTC with microseconds: the one spelling both sides sign."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
