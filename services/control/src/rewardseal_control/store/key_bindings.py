"""Approving and unbinding worker keys (R-C-10), and making enrollment credentials (R-C-11).

A WORKER key registered by a non-admin credential writes nothing into the receipt index until
it is *admitted*: by an admin (:meth:`KeyBindingStore.approve`) or by an enrollment credential
the admin made for that worker (:func:`~.enrollments.enroll_in`, inside the registration's
transaction). Admission binds the key to contracts (:mod:`.key_admission`); unbinding takes
contracts away and leaves the key admitted (its receipts for those contracts are then refused
``key_not_bound``, permanently); retiring the key (``keys.retire_issuer_key``) ends it. An
approval may also accept the bundle certificates the key registered (:mod:`.bundle_certificates`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import delete
from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal.core.validation import validate_key_id
from rewardseal_control.models import ROLE_WORKER
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.bundle_certificates import (
    Acceptance,
    accept_certificates_in,
    registered_certificates_in,
)
from rewardseal_control.store.enrollments import (
    DEFAULT_ENROLLMENT_TTL,
    MAX_CREDENTIAL_LENGTH,
    MAX_ENROLLMENT_TTL,
    MIN_CREDENTIAL_LENGTH,
    Enrollment,
    insert_enrollment,
    new_credential,
)
from rewardseal_control.store.key_admission import (
    Admission,
    admission_in,
    bind_in,
    checked_contract_digests,
    require_key,
)
from rewardseal_server.sqlstore import StoreEngine

__all__ = ["ACTION_APPROVE_KEY", "ACTION_UNBIND_KEY", "KeyBindingStore"]

ACTION_APPROVE_KEY: Final = "issuer_key.approve"
ACTION_UNBIND_KEY: Final = "issuer_key.unbind"

_bindings = tables.key_bindings


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
            require_key(conn, key_id)
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
        key registered for those contracts (all or nothing,
        :func:`~.bundle_certificates.accept_certificates_in`).

        Raises:
            ValidationError: malformed input, no contract, a key that is not WORKER or retired;
                with ``accept_bundle_certificate``, a key that registered no bundle certificate
                for these contracts, or one that cannot be accepted.
            CertificationRefused: a bundle certificate under a revoked contract or checker
                configuration (R-C-13).
            NotFound: no such key or contract.
        """
        validate_key_id(key_id, "key_id")
        digests = checked_contract_digests(contract_digests, required=True)
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        now = inputs.moment(at)

        def work(conn: Connection) -> tuple[Admission, Acceptance]:
            role, retired = require_key(conn, key_id)
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
        digests = checked_contract_digests(contract_digests, required=True)
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        now = inputs.moment(at)

        def work(conn: Connection) -> Admission:
            require_key(conn, key_id)
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
        with is accepted (listed among control's certificates,
        :func:`~.bundle_certificates.accept_certificates_in`).

        Raises:
            ValidationError: malformed input, no contract (or contracts with
                ``any_contract``), ``ttl`` not in (0, 365 days].
        """
        enrollment = insert_enrollment(
            self._db,
            new_credential(),
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
        return insert_enrollment(
            self._db,
            credential,
            (),
            actor,
            reason,
            ttl=ttl,
            any_contract=True,
            accept_bundle_certificate=accept_bundle_certificate,
            at=at,
        )
