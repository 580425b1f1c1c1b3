"""Worker keys admitted and bound to contracts (R-C-10), their bundle certificates, and the
one-time enrollment credentials that admit a key at registration (R-C-11).

A WORKER key registered by a non-admin credential writes nothing into the receipt index until
it is *admitted*: by an admin (:meth:`KeyBindingStore.approve`) or by an enrollment credential
the admin made for that worker (:func:`enroll_in`, inside the registration's transaction).
Admission binds the key to contracts; a receipt is recorded only under a contract its key is
bound to (:func:`bindings_in`, read by the receipt index in its own transaction). Unbinding
takes contracts away and leaves the key admitted (its receipts for those contracts are then
refused ``key_not_bound``, permanently); retiring the key (``keys.retire_issuer_key``) ends it.

Enrollment credentials are random, shown once, and kept as their SHA-256 only; each is used by
one key, before it expires. Presenting a used credential again with the key that used it (a
restarted worker) is a no-op, not an error, and binds nothing again (an unbind stays done).

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

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from rewardseal.core.contract import certificate_digest
from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import CertificationRefused, NotFound, PermissionDenied, ValidationError
from rewardseal.core.validation import validate_certificate, validate_digest, validate_key_id
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal_control.models import ROLE_WORKER
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.certificates import record_in
from rewardseal_control.store.contracts import require_contract
from rewardseal_control.store.revocations import revoked_scope_in
from rewardseal_server.sqlstore import StoreEngine, chunks, insert_ignore

__all__ = [
    "ACTION_APPROVE_KEY",
    "ACTION_CREATE_ENROLLMENT",
    "ACTION_UNBIND_KEY",
    "DEFAULT_ENROLLMENT_TTL",
    "ENROLLMENT_PREFIX",
    "MAX_BINDINGS_PER_CALL",
    "MAX_ENROLLMENT_TTL",
    "Acceptance",
    "Admission",
    "EnrollmentUse",
    "Enrollment",
    "KeyBindingStore",
    "KeyStanding",
    "accept_certificates_in",
    "admission_in",
    "bind_in",
    "bindings_in",
    "enroll_in",
    "register_certificate_in",
]

ACTION_APPROVE_KEY: Final = "issuer_key.approve"
ACTION_UNBIND_KEY: Final = "issuer_key.unbind"
ACTION_CREATE_ENROLLMENT: Final = "enrollment.create"
DEFAULT_ENROLLMENT_TTL: Final = timedelta(days=1)
MAX_ENROLLMENT_TTL: Final = timedelta(days=365)
ENROLLMENT_PREFIX: Final = "rse-enroll."
"""Every enrollment credential starts so (a person or a secret scanner can tell what it is)."""
MIN_CREDENTIAL_LENGTH: Final = 24
"""A bootstrap credential an operator writes (:meth:`KeyBindingStore.ensure_enrollment`) has at
least this many characters; generated ones are much longer."""
MAX_CREDENTIAL_LENGTH: Final = 256
MAX_BINDINGS_PER_CALL: Final = 64
"""Most contracts one approve, unbind or enrollment names."""

_keys = tables.keys
_bindings = tables.key_bindings
_certificates = tables.key_certificates
_enrollments = tables.enrollments


@dataclass(frozen=True)
class Admission:
    """Whether a key is admitted for the receipt index, and the contracts it is bound to."""

    admitted: bool
    contract_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Acceptance:
    """What accepting bundle certificates did: the ids now listed among control's
    certificates, and ``(certificate id, why)`` of each that was not accepted."""

    accepted: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EnrollmentUse:
    """An enrollment credential used at registration: which, what it bound now, and whether
    it accepts the bundle certificate the key registers with (only at its first use)."""

    enrollment_id: str
    bound: list[str]
    accepts_bundle_certificate: bool = False


@dataclass(frozen=True)
class KeyStanding:
    """What the receipt index needs of one signing key: admitted, bound where, and the bundle
    certificates it registered as ``(certificate_id, contract_digest) -> certificate digest``."""

    admitted: bool
    contracts: frozenset[str]
    certificates: dict[tuple[str, str], str]


@dataclass(frozen=True)
class Enrollment:
    """A new enrollment credential: ``credential`` exists only in this answer."""

    enrollment_id: str
    credential: str
    contract_digests: tuple[str, ...]
    expires_at: datetime
    accepts_bundle_certificate: bool = False


def _digests(values: Iterable[str], *, required: bool) -> list[str]:
    """Sorted, de-duplicated, validated contract digests."""
    if isinstance(values, str):
        raise ValidationError("reward_contract_digests must be a list of digests")
    digests = sorted({validate_digest(value, "reward_contract_digest") for value in values})
    if required and not digests:
        raise ValidationError("name at least one contract (reward_contract_digests)")
    if len(digests) > MAX_BINDINGS_PER_CALL:
        raise ValidationError(f"at most {MAX_BINDINGS_PER_CALL} contracts at a time")
    return digests


def admission_in(conn: Connection, key_id: str) -> Admission:
    """The admission of ``key_id`` inside ``conn`` (not admitted when unknown)."""
    admitted = conn.execute(
        select(_keys.c.admitted_at).where(_keys.c.key_id == key_id)
    ).scalar_one_or_none()
    bound = conn.execute(
        select(_bindings.c.contract_digest)
        .where(_bindings.c.key_id == key_id)
        .order_by(_bindings.c.contract_digest)
    ).scalars()
    return Admission(admitted=admitted is not None, contract_digests=tuple(bound))


def bind_in(conn: Connection, key_id: str, digests: Sequence[str], now: datetime) -> None:
    """Admit ``key_id`` (if it is not yet) and bind it to each of ``digests`` (registered)."""
    for digest in digests:
        require_contract(conn, digest)
    conn.execute(
        update(_keys)
        .where(_keys.c.key_id == key_id, _keys.c.admitted_at.is_(None))
        .values(admitted_at=now)
    )
    rows = [{"key_id": key_id, "contract_digest": digest, "bound_at": now} for digest in digests]
    if rows:
        # A binding made concurrently (two approvals at once) is the same binding: kept.
        conn.execute(insert_ignore(conn.dialect.name, _bindings), rows)


def bindings_in(conn: Connection, key_ids: Sequence[str]) -> dict[str, KeyStanding]:
    """The standing of each of ``key_ids`` that is registered, inside ``conn``."""
    admitted: dict[str, bool] = {}
    contracts: dict[str, set[str]] = {}
    certificates: dict[str, dict[tuple[str, str], str]] = {}
    for chunk in chunks(list(key_ids)):
        for key_id, admitted_at in conn.execute(
            select(_keys.c.key_id, _keys.c.admitted_at).where(_keys.c.key_id.in_(chunk))
        ):
            admitted[key_id] = admitted_at is not None
        for key_id, digest in conn.execute(
            select(_bindings.c.key_id, _bindings.c.contract_digest).where(
                _bindings.c.key_id.in_(chunk)
            )
        ):
            contracts.setdefault(key_id, set()).add(digest)
        for key_id, certificate_id, digest, cert_digest in conn.execute(
            select(
                _certificates.c.key_id,
                _certificates.c.certificate_id,
                _certificates.c.contract_digest,
                _certificates.c.certificate_digest,
            ).where(_certificates.c.key_id.in_(chunk))
        ):
            certificates.setdefault(key_id, {})[(certificate_id, digest)] = cert_digest
    return {
        key_id: KeyStanding(
            admitted=is_admitted,
            contracts=frozenset(contracts.get(key_id, ())),
            certificates=certificates.get(key_id, {}),
        )
        for key_id, is_admitted in admitted.items()
    }


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


def enroll_in(
    conn: Connection, credential: str, key_id: str, asked: Sequence[str], now: datetime
) -> EnrollmentUse:
    """Use ``credential`` for ``key_id``.

    Binds the enrollment's contracts that are registered (a worker registers its contract
    before its key); a contract the key asks for must be among them. Says whether the
    enrollment accepts the key's bundle certificate (the caller accepts it, once registered).

    Raises:
        PermissionDenied: unknown, expired or already used by another key; or the key asks for
            a contract the enrollment does not name.
    """
    hashed = _hash(credential)
    row = conn.execute(
        select(_enrollments).where(_enrollments.c.credential_hash == hashed).with_for_update()
    ).one_or_none()
    if row is None:
        raise PermissionDenied("the enrollment credential is not one control issued")
    # null: an "any contract" enrollment binds what the key asks for at registration.
    named = json.loads(row.contract_digests)
    if named is None:
        named = list(asked)
    outside = sorted(set(asked) - set(named))
    if outside:
        raise PermissionDenied(
            f"enrollment {row.enrollment_id} does not name contract {outside[0]}; the admin "
            "approves that one (rewardseal-control keys approve)"
        )
    if row.used_by_key_id is not None:
        if row.used_by_key_id == key_id:
            # A restart: already enrolled, nothing to bind or accept again.
            return EnrollmentUse(str(row.enrollment_id), [])
        raise PermissionDenied(
            f"enrollment {row.enrollment_id} was already used by another key; an enrollment "
            "credential admits one key (ask the admin for a new one: rewardseal-control keys "
            "enroll)"
        )
    if now >= row.expires_at:
        raise PermissionDenied(
            f"enrollment {row.enrollment_id} expired at {row.expires_at.isoformat()}; ask the "
            "admin for a new one (rewardseal-control keys enroll)"
        )
    registered = set(
        conn.execute(
            select(tables.contracts.c.digest).where(tables.contracts.c.digest.in_(named))
        ).scalars()
    )
    bound = [digest for digest in named if digest in registered]
    bind_in(conn, key_id, bound, now)
    conn.execute(
        update(_enrollments)
        .where(_enrollments.c.enrollment_id == row.enrollment_id)
        .values(used_at=now, used_by_key_id=key_id)
    )
    return EnrollmentUse(str(row.enrollment_id), bound, bool(row.accepts_bundle_certificate))


def _hash(credential: str) -> str:
    """The stored form of a credential: its SHA-256 (the credential itself is kept nowhere)."""
    if not isinstance(credential, str) or not (
        MIN_CREDENTIAL_LENGTH <= len(credential) <= MAX_CREDENTIAL_LENGTH
    ):
        raise PermissionDenied("the enrollment credential is not one control issued")
    return digest_bytes(credential.encode("utf-8"))


class KeyBindingStore:
    """Approve and unbind worker keys; make enrollment credentials; read a key's admission."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def admission(self, key_id: str) -> Admission:
        """Whether ``key_id`` is admitted and the contracts it is bound to.

        Raises:
            ValidationError: malformed key id.
            NotFound: no such key.
        """
        validate_key_id(key_id, "key_id")

        def work(conn: Connection) -> Admission:
            _require_key(conn, key_id)
            return admission_in(conn, key_id)

        return self._db.read(work, snapshot=True)

    def approve(
        self,
        key_id: str,
        contract_digests: Sequence[str],
        actor: str,
        reason: str = "",
        *,
        accept_bundle_certificate: bool = False,
        at: datetime | None = None,
    ) -> tuple[Admission, Acceptance]:
        """Admit a WORKER key and bind it to ``contract_digests`` (admin; audited as
        ``issuer_key.approve``); ``(admission, acceptance)``. Approving again adds bindings;
        none is removed. ``accept_bundle_certificate``: also accept the bundle certificates the
        key registered for those contracts (:func:`accept_certificates_in`; all or nothing).

        Raises:
            ValidationError: malformed input, no contract, a key that is not WORKER or retired;
                with ``accept_bundle_certificate``, a key that registered no bundle certificate
                for these contracts, or one that cannot be accepted.
            CertificationRefused: a bundle certificate under a revoked contract or checker
                configuration (R-C-13).
            NotFound: no such key or contract.
        """
        validate_key_id(key_id, "key_id")
        digests = _digests(contract_digests, required=True)
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        now = inputs.moment(at)

        def work(conn: Connection) -> tuple[Admission, Acceptance]:
            role, retired = _require_key(conn, key_id)
            if role != ROLE_WORKER:
                raise ValidationError(
                    f"issuer key {key_id} is a {role} key; only WORKER keys are bound to contracts"
                )
            if retired:
                raise ValidationError(f"issuer key {key_id} is retired; register a new key")
            bind_in(conn, key_id, digests, now)
            acceptance = Acceptance()
            details: dict[str, object] = {"contracts": digests}
            if accept_bundle_certificate:
                registered = registered_certificates_in(conn, key_id, digests)
                if not registered:
                    raise ValidationError(
                        f"issuer key {key_id} registered no bundle certificate for "
                        f"{', '.join(digests)}; approve without accept_bundle_certificate, or "
                        "let its worker register (start it linked to control) and approve again"
                    )
                acceptance = accept_certificates_in(
                    conn, key_id, registered, actor=actor, reason=reason, now=now, strict=True
                )
                details["accepted_certificates"] = list(acceptance.accepted)
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_APPROVE_KEY,
                target=key_id,
                reason=reason,
                details=details,
                at=now,
            )
            return admission_in(conn, key_id), acceptance

        return self._db.write(work)

    def unbind(
        self,
        key_id: str,
        contract_digests: Sequence[str],
        actor: str,
        reason: str,
        *,
        at: datetime | None = None,
    ) -> Admission:
        """Take ``contract_digests`` out of the key's bindings (admin; audited as
        ``issuer_key.unbind``; a reason is required). Receipts already recorded stay.

        Raises:
            ValidationError: malformed input or no contract.
            NotFound: no such key.
        """
        validate_key_id(key_id, "key_id")
        digests = _digests(contract_digests, required=True)
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        now = inputs.moment(at)

        def work(conn: Connection) -> Admission:
            _require_key(conn, key_id)
            removed = conn.execute(
                delete(_bindings).where(
                    _bindings.c.key_id == key_id, _bindings.c.contract_digest.in_(digests)
                )
            ).rowcount
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_UNBIND_KEY,
                target=key_id,
                reason=reason,
                details={"contracts": digests, "removed": int(removed or 0)},
                at=now,
            )
            return admission_in(conn, key_id)

        return self._db.write(work)

    def create_enrollment(
        self,
        contract_digests: Sequence[str],
        actor: str,
        reason: str = "",
        *,
        ttl: timedelta = DEFAULT_ENROLLMENT_TTL,
        any_contract: bool = False,
        accept_bundle_certificate: bool = False,
        at: datetime | None = None,
    ) -> Enrollment:
        """A new one-time enrollment credential for ``contract_digests`` (admin; audited as
        ``enrollment.create``, never with the credential). The contracts need not be
        registered yet: the worker registers its contract before it enrolls its key.
        ``any_contract`` (no digests then): the key is bound to the contracts it names when
        it registers. ``accept_bundle_certificate``: the bundle certificate the key registers
        with is accepted (listed among control's certificates, :func:`accept_certificates_in`).

        Raises:
            ValidationError: malformed input, no contract (or contracts with
                ``any_contract``), ``ttl`` not in (0, 365 days].
        """
        credential = ENROLLMENT_PREFIX + secrets.token_urlsafe(32)
        enrollment = self._insert_enrollment(
            credential,
            contract_digests,
            actor,
            reason,
            ttl=ttl,
            any_contract=any_contract,
            accept_bundle_certificate=accept_bundle_certificate,
            at=at,
        )
        assert enrollment is not None  # a fresh random credential is never stored already
        return enrollment

    def ensure_enrollment(
        self,
        credential: str,
        actor: str,
        reason: str,
        *,
        ttl: timedelta = MAX_ENROLLMENT_TTL,
        accept_bundle_certificate: bool = False,
        at: datetime | None = None,
    ) -> Enrollment | None:
        """Store ``credential`` (chosen by the operator, e.g. compose's deploy/.env) as an
        "any contract" enrollment unless it is stored already (used or not: a used one is
        never armed again, and what it accepts is what it was armed with); the new
        enrollment, or None. What control does on start with
        ``REWARDSEAL_CONTROL_WORKER_ENROLLMENT_TOKEN`` (and, for
        ``accept_bundle_certificate``,
        ``REWARDSEAL_CONTROL_WORKER_ENROLLMENT_ACCEPTS_BUNDLE_CERTIFICATE``).

        Raises:
            ValidationError: the credential is shorter than 24 or longer than 256 characters.
        """
        if not isinstance(credential, str) or not (
            MIN_CREDENTIAL_LENGTH <= len(credential) <= MAX_CREDENTIAL_LENGTH
        ):
            raise ValidationError(
                f"a worker enrollment credential has {MIN_CREDENTIAL_LENGTH} to "
                f"{MAX_CREDENTIAL_LENGTH} characters"
            )
        return self._insert_enrollment(
            credential,
            (),
            actor,
            reason,
            ttl=ttl,
            any_contract=True,
            accept_bundle_certificate=accept_bundle_certificate,
            at=at,
        )

    def _insert_enrollment(
        self,
        credential: str,
        contract_digests: Sequence[str],
        actor: str,
        reason: str,
        *,
        ttl: timedelta,
        any_contract: bool,
        accept_bundle_certificate: bool,
        at: datetime | None,
    ) -> Enrollment | None:
        digests = _digests(contract_digests, required=not any_contract)
        if any_contract and digests:
            raise ValidationError("name contracts or any_contract, not both")
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        if not isinstance(ttl, timedelta) or not timedelta(0) < ttl <= MAX_ENROLLMENT_TTL:
            raise ValidationError(
                "the enrollment's lifetime must be more than 0 and at most 365 days"
            )
        now = inputs.moment(at)
        enrollment_id = f"enroll.{secrets.token_hex(8)}"
        expires_at = now + ttl
        hashed = _hash(credential)
        insert = self._db.insert_ignore(_enrollments).returning(_enrollments.c.enrollment_id)

        def work(conn: Connection) -> Enrollment | None:
            stored = conn.execute(
                insert,
                {
                    "enrollment_id": enrollment_id,
                    "credential_hash": hashed,
                    "contract_digests": json.dumps(None if any_contract else digests),
                    "created_at": now,
                    "expires_at": expires_at,
                    "used_at": None,
                    "used_by_key_id": None,
                    "accepts_bundle_certificate": bool(accept_bundle_certificate),
                },
            ).first()
            if stored is None:
                return None
            audit_log.write_audit(
                conn,
                actor=actor,
                action=ACTION_CREATE_ENROLLMENT,
                target=enrollment_id,
                reason=reason,
                details={
                    "contracts": "any" if any_contract else digests,
                    "expires_at": expires_at.isoformat(),
                    "accepts_bundle_certificate": bool(accept_bundle_certificate),
                },
                at=now,
            )
            return Enrollment(
                enrollment_id,
                credential,
                tuple(digests),
                expires_at,
                accepts_bundle_certificate=bool(accept_bundle_certificate),
            )

        return self._db.write(work)


def _require_key(conn: Connection, key_id: str) -> tuple[str, bool]:
    """``(role, retired)`` of a registered key, else NotFound."""
    row = conn.execute(
        select(_keys.c.role, _keys.c.retired_at).where(_keys.c.key_id == key_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"issuer key {key_id} is not registered")
    return str(row.role), row.retired_at is not None
