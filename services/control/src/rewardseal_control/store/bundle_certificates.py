"""The bundle certificates a worker key registers, and their acceptance (R-C-9, R-C-11).

A key's bundle certificate (self-signed by the key, SYNTHETIC) is known to the receipt index
once registered, but a linked worker certifies under it only while control *lists* it (R-C-9).
Control lists it only when an admin accepted it (R-C-11, :func:`accept_certificates_in`): with
an enrollment made with ``accept_bundle_certificate`` (the certificate the key registers with
when it uses the credential), or with an approval that says so (the certificates the key has
registered for the approved contracts). Accepting records it among control's certificates
(audited ``certificate.accept``), so it is listed, read and revoked like one control issued;
one under a revoked contract or checker configuration (R-C-13) is never accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import CertificationRefused, ValidationError
from rewardseal.core.validation import validate_certificate
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal_control.store import audit_log, tables
from rewardseal_control.store.certificates import record_in
from rewardseal_control.store.key_admission import admission_in
from rewardseal_control.store.revocations import revoked_scope_in
from rewardseal_server.sqlstore import insert_ignore

__all__ = [
    "Acceptance",
    "accept_certificates_in",
    "register_certificate_in",
    "registered_certificates_in",
]

_certificates = tables.key_certificates


@dataclass(frozen=True)
class Acceptance:
    """What accepting bundle certificates did: the ids now listed among control's
    certificates, and ``(certificate id, why)`` of each that was not accepted."""

    accepted: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


def register_certificate_in(
    conn: Connection, key_id: str, certificate: RewardCertificate, now: datetime
) -> None:
    """Record ``certificate`` as the bundle certificate ``key_id`` registered with.

    Raises:
        ValidationError: not a valid certificate, or its id is registered for this key with
            another digest or contract.
    """
    if not isinstance(certificate, RewardCertificate):
        raise ValidationError("bundle_certificate must be a RewardCertificate")
    validate_certificate(certificate)
    digest = certificate_digest(certificate)
    existing = conn.execute(
        select(_certificates.c.contract_digest, _certificates.c.certificate_digest).where(
            _certificates.c.key_id == key_id,
            _certificates.c.certificate_id == certificate.certificate_id,
        )
    ).one_or_none()
    body = certificate.SerializeToString(deterministic=True)
    if existing is not None:
        if tuple(existing) != (certificate.reward_contract_digest, digest):
            raise ValidationError(
                f"bundle certificate {certificate.certificate_id} is registered for key "
                f"{key_id} with other content; give a new certificate a new id"
            )
        # Registered before schema 0005 kept no body: this registration supplies it (an
        # approval may then accept the certificate).
        conn.execute(
            update(_certificates)
            .where(
                _certificates.c.key_id == key_id,
                _certificates.c.certificate_id == certificate.certificate_id,
                _certificates.c.body.is_(None),
            )
            .values(body=body)
        )
        return
    conn.execute(
        insert_ignore(conn.dialect.name, _certificates),
        {
            "key_id": key_id,
            "certificate_id": certificate.certificate_id,
            "contract_digest": certificate.reward_contract_digest,
            "certificate_digest": digest,
            "registered_at": now,
            "body": body,
        },
    )


def registered_certificates_in(
    conn: Connection, key_id: str, contract_digests: Sequence[str]
) -> list[RewardCertificate]:
    """The bundle certificates ``key_id`` registered for ``contract_digests`` (with their
    bytes), oldest registration first."""
    rows = conn.execute(
        select(_certificates.c.body)
        .where(
            _certificates.c.key_id == key_id,
            _certificates.c.contract_digest.in_(list(contract_digests)),
            _certificates.c.body.is_not(None),
        )
        .order_by(_certificates.c.registered_at, _certificates.c.certificate_id)
    ).scalars()
    return [RewardCertificate.FromString(bytes(body)) for body in rows]


def accept_certificates_in(
    conn: Connection,
    key_id: str,
    certificates: Sequence[RewardCertificate],
    *,
    actor: str,
    reason: str,
    now: datetime,
    strict: bool,
) -> Acceptance:
    """Accept bundle certificates ``key_id`` registered (R-C-11): record each among control's
    certificates, so ListCertificates lists it and it is revoked like any other (R-C-4,
    R-C-13). Each must be signed by ``key_id``, for a contract the key is bound to, and not
    under a revoked contract or checker configuration (it would be revoked at birth).

    ``strict`` (an admin's approval): the first certificate that cannot be accepted raises,
    and the caller's transaction writes nothing. Otherwise (a registration with an accepting
    enrollment: the key is admitted whatever happens to its certificate) each such one is
    left unlisted and reported in :attr:`Acceptance.refused`.

    Raises:
        CertificationRefused: (strict) under a revoked contract or checker configuration.
        ValidationError: (strict) not the key's own, for an unbound contract, or its id names
            another of control's certificates.
    """
    bound = set(admission_in(conn, key_id).contract_digests)
    accepted: list[str] = []
    refused: list[tuple[str, str]] = []
    for certificate in certificates:
        try:
            _check_acceptable(conn, key_id, certificate, bound)
            record_in(
                conn,
                certificate,
                actor=actor,
                reason=reason,
                action=audit_log.ACTION_ACCEPT_CERTIFICATE,
                now=now,
            )
        except ValidationError as exc:
            if strict:
                raise
            refused.append((certificate.certificate_id, exc.message))
            continue
        accepted.append(certificate.certificate_id)
    return Acceptance(tuple(accepted), tuple(refused))


def _check_acceptable(
    conn: Connection, key_id: str, certificate: RewardCertificate, bound: set[str]
) -> None:
    contract = certificate.reward_contract_digest
    if certificate.issuer_key_id != key_id:
        raise ValidationError(
            f"bundle certificate {certificate.certificate_id} is signed by "
            f"{certificate.issuer_key_id}, not by key {key_id}"
        )
    if contract not in bound:
        raise ValidationError(
            f"key {key_id} is not bound to contract {contract}, the contract of bundle "
            f"certificate {certificate.certificate_id}"
        )
    revoked = revoked_scope_in(conn, contract, certificate.checker_configuration_digest)
    if revoked is not None:
        kind, digest = revoked
        # As IssueCertificate refuses it: it would be revoked at birth (R-C-13).
        raise CertificationRefused(
            f"bundle certificate {certificate.certificate_id} is not accepted: every "
            f"certificate of {kind} {digest} is revoked",
            metadata={"rule": "R-C-13", "revoked": kind, "digest": digest},
        )
