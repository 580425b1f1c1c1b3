"""Recorded reward certificates (R-C-3): what the service issued, with each one's revocation.

The service builds and signs a certificate (and checks that its key may issue it, R-MSG-5);
this module checks its shape with core's :func:`~rewardseal.core.validation.validate_certificate`,
that its contract and issuer key are registered and that its id names no other certificate,
then stores it with its digest. Recording is an admin action, audited in its transaction.
A certificate is read together with its revocation (if any): its own, or the entry that revokes
every certificate of its contract or checker configuration (R-C-13); one state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.engine import Connection

from rewardseal.core.contract import certificate_digest
from rewardseal.core.errors import NotFound, ValidationError
from rewardseal.core.revocation import CHECKER, CONTRACT
from rewardseal.core.validation import validate_certificate, validate_digest, validate_id
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.contracts import require_contract
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import LostRace, StoreEngine, chunks, insert_ignore

__all__ = ["CertificateStore", "StoredCertificate", "certificates_in", "record_in"]

_certificates = tables.certificates
_revocations = tables.revocations
_scopes = tables.revocation_scopes
_bundles = tables.key_certificates
_SELECT = select(
    _certificates.c.certificate_id,
    _certificates.c.contract_digest,
    _certificates.c.digest,
    _certificates.c.body,
    _certificates.c.issued_at,
    _revocations.c.revoked_at,
    _revocations.c.reason.label("revocation_reason"),
).select_from(
    _certificates.outerjoin(
        _revocations, _revocations.c.certificate_id == _certificates.c.certificate_id
    )
)
_LISTING = Listing(
    kind="certificates",
    order=(_certificates.c.issued_at, _certificates.c.certificate_id),
    shape=(datetime, str),
)


@dataclass(frozen=True)
class StoredCertificate:
    """A recorded certificate, its digest and its revocation (if any)."""

    certificate: RewardCertificate
    digest: str
    revoked_at: datetime | None = None
    revocation_reason: str | None = None

    @property
    def revoked(self) -> bool:
        """True once the certificate is revoked."""
        return self.revoked_at is not None


class CertificateStore:
    """Record, read and list certificates."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def record_certificate(
        self,
        certificate: RewardCertificate,
        actor: str,
        reason: str = "",
        *,
        at: datetime | None = None,
    ) -> tuple[StoredCertificate, bool]:
        """Store a signed certificate (admin: issued by the service); ``(stored, created)``.

        Checks its shape (``validate_certificate``), that its contract and issuer key are
        registered, and that its id is not taken by another certificate. Recording the same
        certificate again is a no-op (``created`` False). Audited as ``certificate.issue``.
        Whether the issuer key may issue it (active, role, R-MSG-5) is the service's check.

        Raises:
            ValidationError: a malformed certificate, an unregistered issuer key, or an id
                that names another certificate.
            NotFound: its contract is not registered.
        """
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        now = inputs.moment(at)
        return self._db.write(
            lambda conn: record_in(
                conn,
                certificate,
                actor=actor,
                reason=reason,
                action=audit_log.ACTION_ISSUE_CERTIFICATE,
                now=now,
            )
        )

    def get_certificate(self, certificate_id: str) -> StoredCertificate:
        """A recorded certificate with its digest and revocation.

        Raises:
            ValidationError: malformed id.
            NotFound: no such certificate.
        """
        validate_id(certificate_id, "certificate_id")
        statement = _SELECT.where(_certificates.c.certificate_id == certificate_id)

        def read(conn: Connection) -> StoredCertificate | None:
            row = conn.execute(statement).one_or_none()
            return _revoked_by_scope(_stored_certificate(row), _scope_rows(conn)) if row else None

        stored = self._db.read(read)
        if stored is None:
            raise NotFound(f"certificate {certificate_id} is not known")
        return stored

    def list_certificates(
        self, contract_digest: str | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[StoredCertificate]:
        """Recorded certificates (of one contract, when given), oldest ``issued_at`` first."""
        statement = _SELECT
        if contract_digest is not None:
            validate_digest(contract_digest, "reward_contract_digest")
            statement = statement.where(_certificates.c.contract_digest == contract_digest)
        rows, token = _LISTING.read(
            self._db,
            statement,
            query=fingerprint(contract=contract_digest),
            page_size=page_size,
            page_token=page_token,
            snapshot=True,
        )
        scopes = self._db.read(_scope_rows)
        return Page([_revoked_by_scope(_stored_certificate(row), scopes) for row in rows], token)


def record_in(
    conn: Connection,
    certificate: RewardCertificate,
    *,
    actor: str,
    reason: str,
    action: str,
    now: datetime,
) -> tuple[StoredCertificate, bool]:
    """Record ``certificate`` inside ``conn`` and audit it as ``action``; ``(stored, created)``.

    The one way into the certificates table: what the service issued (``certificate.issue``)
    and a worker's bundle certificate an admin accepted (``certificate.accept``, R-C-11, signed
    by the worker key itself), so each is listed, read and revoked alike. ``actor`` and
    ``reason`` are checked by the caller.

    Raises:
        ValidationError: a malformed certificate, an unregistered issuer key, or an id that
            names another certificate.
        NotFound: its contract is not registered.
    """
    if not isinstance(certificate, RewardCertificate):
        raise ValidationError("certificate must be a RewardCertificate")
    validate_certificate(certificate)
    inputs.no_unknown_fields(certificate)
    digest = certificate_digest(certificate)
    certificate_id = certificate.certificate_id
    by_id = _SELECT.where(_certificates.c.certificate_id == certificate_id)
    existing = conn.execute(by_id).one_or_none()
    if existing is not None:
        if existing.digest != digest:
            raise ValidationError(
                f"certificate_id {certificate_id} already names another certificate"
            )
        created = False
        stored = existing
    else:
        require_contract(conn, certificate.reward_contract_digest)
        key_known = conn.execute(
            select(tables.keys.c.key_id).where(tables.keys.c.key_id == certificate.issuer_key_id)
        ).first()
        if key_known is None:
            raise ValidationError(f"issuer key {certificate.issuer_key_id} is not registered")
        row = {
            "certificate_id": certificate_id,
            "contract_digest": certificate.reward_contract_digest,
            "digest": digest,
            "body": certificate.SerializeToString(deterministic=True),
            "scope": certificate.calibration_scope,
            "issuer": certificate.issuer,
            "issuer_key_id": certificate.issuer_key_id,
            "issued_at_policy_update": certificate.issued_at_policy_update,
            "expiry_policy_updates": certificate.expiry_policy_updates,
            "epsilon": certificate.epsilon,
            "issued_at": inputs.to_datetime(certificate.issued_at),
        }
        insert = insert_ignore(conn.dialect.name, _certificates).returning(
            _certificates.c.certificate_id
        )
        if conn.execute(insert, row).first() is None:
            raise LostRace("certificate recorded concurrently")
        created = True
        stored = conn.execute(by_id).one()
    audit_log.write_audit(
        conn,
        actor=actor,
        action=action,
        target=certificate_id,
        reason=reason,
        details={
            "reward_contract_digest": certificate.reward_contract_digest,
            "certificate_digest": digest,
            "issuer_key_id": certificate.issuer_key_id,
            "calibration_scope": certificate.calibration_scope,
            "issuer": certificate.issuer,
            "created": created,
        },
        at=now,
    )
    return _stored_certificate(stored), created


def certificates_in(
    conn: Connection, certificate_ids: Sequence[str]
) -> dict[str, StoredCertificate]:
    """The recorded certificates among ``certificate_ids`` inside ``conn``, by id, each with its
    revocation (by name or by its contract's or checker configuration's entry); ids control
    did not record are absent."""
    scopes = _scope_rows(conn)
    wanted = sorted(set(certificate_ids))
    found: dict[str, StoredCertificate] = {}
    for chunk in chunks(wanted):
        for row in conn.execute(_SELECT.where(_certificates.c.certificate_id.in_(chunk))):
            stored = _revoked_by_scope(_stored_certificate(row), scopes)
            found[stored.certificate.certificate_id] = stored
    # A worker's bundle certificate that no admin accepted is not among control's certificates,
    # yet receipts may name it (R-C-5): read it from the key's registration.
    missing = [certificate_id for certificate_id in wanted if certificate_id not in found]
    for chunk in chunks(missing):
        bundles = conn.execute(
            select(_bundles.c.certificate_id, _bundles.c.certificate_digest, _bundles.c.body)
            .where(_bundles.c.certificate_id.in_(chunk), _bundles.c.body.is_not(None))
            .order_by(_bundles.c.registered_at, _bundles.c.key_id)
        )
        for certificate_id, digest, body in bundles:
            if certificate_id not in found:
                stored = StoredCertificate(RewardCertificate.FromString(bytes(body)), digest)
                found[certificate_id] = _revoked_by_scope(stored, scopes)
    return found


def _stored_certificate(row: AnyRow) -> StoredCertificate:
    return StoredCertificate(
        certificate=RewardCertificate.FromString(bytes(row.body)),
        digest=row.digest,
        revoked_at=row.revoked_at,
        revocation_reason=row.revocation_reason,
    )


def _scope_rows(conn: Connection) -> dict[tuple[str, str], AnyRow]:
    """The contract and checker revocations, by (kind, digest) (a short table)."""
    rows = conn.execute(
        select(_scopes.c.kind, _scopes.c.digest, _scopes.c.revoked_at, _scopes.c.reason)
    ).all()
    return {(row.kind, row.digest): row for row in rows}


def _revoked_by_scope(
    stored: StoredCertificate, scopes: dict[tuple[str, str], AnyRow]
) -> StoredCertificate:
    """``stored``, revoked by its contract's or checker configuration's entry when it is not
    revoked by name (R-C-13)."""
    if stored.revoked or not scopes:
        return stored
    certificate = stored.certificate
    for key in (
        (CONTRACT, certificate.reward_contract_digest),
        (CHECKER, certificate.checker_configuration_digest),
    ):
        row = scopes.get(key)
        if row is not None:
            return replace(stored, revoked_at=row.revoked_at, revocation_reason=row.reason)
    return stored
