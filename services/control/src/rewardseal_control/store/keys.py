"""Issuer keys (R-C-2): the worker and organization public keys, their windows and retirement.

A key is registered once with one role and one validity window (``not_before`` inclusive,
``not_after`` exclusive) and may be retired; a retired key is never active, nor registered
again. What is active at a moment is what receipts and certificates are verified against
(:meth:`IssuerKeyStore.active_key`, :meth:`IssuerKeyStore.trust_set`); the verifying itself
is the service's job. Registering and retiring are admin actions, audited in their
transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Final, cast

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, SignatureError, ValidationError
from rewardseal.core.signing import TrustSet, key_id_for
from rewardseal.core.validation import validate_digest, validate_key_id
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.models import ROLE_ORGANIZATION, ROLE_WORKER
from rewardseal_control.store import audit_log, inputs, key_bindings, tables
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import LostRace, StoreEngine

_log = logging.getLogger(__name__)

__all__ = ["MAX_DISPLAY_NAME_LENGTH", "IssuerKeyStore"]

MAX_DISPLAY_NAME_LENGTH: Final = 200

_ROLE_NAMES: Final[Mapping[IssuerKeyRole.ValueType, str]] = MappingProxyType(
    {
        IssuerKeyRole.ISSUER_KEY_ROLE_WORKER: ROLE_WORKER,
        IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION: ROLE_ORGANIZATION,
    }
)
_ROLE_VALUES: Final[Mapping[str, IssuerKeyRole.ValueType]] = MappingProxyType(
    {name: value for value, name in _ROLE_NAMES.items()}
)

_keys = tables.keys
_COLUMNS = (
    _keys.c.key_id,
    _keys.c.public_key,
    _keys.c.role,
    _keys.c.display_name,
    _keys.c.not_before,
    _keys.c.not_after,
    _keys.c.retired_at,
    _keys.c.registered_at,
)
_LISTING = Listing(
    kind="issuer_keys", order=(_keys.c.registered_at, _keys.c.key_id), shape=(datetime, str)
)


class IssuerKeyStore:
    """Register, retire, read and list issuer keys; the keys active at a moment."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db
        self._insert = db.insert_ignore(_keys).returning(_keys.c.key_id)

    def register_issuer_key(
        self,
        key: IssuerKey,
        actor: str,
        reason: str = "",
        *,
        at: datetime | None = None,
        bind: Sequence[str] = (),
        enrollment_credential: str = "",
        bundle_certificate: RewardCertificate | None = None,
    ) -> tuple[IssuerKey, bool]:
        """Register a worker or organization public key (R-C-2); ``(key, created)``.

        ``key.key_id`` may be empty (it is computed); if given it must be the key id of
        ``key.public_key``. ``not_before`` defaults to now; ``not_after`` (exclusive) is
        optional. Registering the same key again with the same role (and, where given, the
        same window) is a no-op (``created`` False). Audited as ``issuer_key.register``.

        For a WORKER key, in the same transaction (R-C-10, R-C-11): ``bind`` admits it and
        binds it to those contracts (the admin's registration; the service passes nothing
        else's); ``enrollment_credential`` uses that one-time credential (admits the key for
        the contracts the enrollment names; ``bind`` must be among them);
        ``bundle_certificate`` records the certificate its receipts may name beside control's.
        Proof of possession is the service's to check, before this is called.

        Raises:
            ValidationError: bad key, role, window or text; the key is retired, or already
                registered with another role or window; binding options for a non-WORKER key;
                an invalid bundle certificate.
            NotFound: a contract in ``bind`` is not registered.
            PermissionDenied: the enrollment credential is unknown, expired, used by another
                key, or does not name a contract in ``bind``.
        """
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
        now = inputs.moment(at)
        if not isinstance(key, IssuerKey):
            raise ValidationError("key must be an IssuerKey")
        inputs.no_unknown_fields(key)
        role = _role_name(key.role)
        public_key = bytes(key.public_key)
        try:
            key_id = key_id_for(public_key)
        except SignatureError as exc:
            raise ValidationError(f"public_key: {exc.message}") from None
        if key.key_id and key.key_id != key_id:
            raise ValidationError(
                "key_id does not name public_key (it must be 'ed25519:sha256:' and the hex "
                "SHA-256 of the raw key)"
            )
        if key.retired:
            raise ValidationError("a key cannot be registered as retired")
        display_name = inputs.text(
            key.display_name, "display_name", max_length=MAX_DISPLAY_NAME_LENGTH
        )
        given_not_before = (
            inputs.to_datetime(key.not_before) if key.HasField("not_before") else None
        )
        not_before = given_not_before or now
        not_after = inputs.to_datetime(key.not_after) if key.HasField("not_after") else None
        if not_after is not None and not_after <= not_before:
            raise ValidationError("not_after must be later than not_before")
        asked = sorted({validate_digest(d, "reward_contract_digest") for d in bind})
        binding = bool(asked or enrollment_credential or bundle_certificate is not None)
        if binding and role != ROLE_WORKER:
            raise ValidationError(
                "only WORKER keys are bound to contracts or register bundle certificates"
            )
        row = {
            "key_id": key_id,
            "public_key": public_key,
            "role": role,
            "display_name": display_name,
            "not_before": not_before,
            "not_after": not_after,
            "retired_at": None,
            "registered_at": now,
        }
        by_id = select(*_COLUMNS).where(_keys.c.key_id == key_id)

        def work(conn: Connection) -> tuple[IssuerKey, bool]:
            existing = conn.execute(by_id).one_or_none()
            if existing is None:
                if conn.execute(self._insert, row).first() is None:
                    raise LostRace("issuer key registered concurrently")
                stored = conn.execute(by_id).one()
                created = True
            else:
                if existing.retired_at is not None:
                    raise ValidationError(
                        f"issuer key {key_id} is retired; a retired key is never registered "
                        "again (register a new key)"
                    )
                if (
                    existing.role != role
                    or (given_not_before is not None and existing.not_before != not_before)
                    or (key.HasField("not_after") and existing.not_after != not_after)
                ):
                    raise ValidationError(
                        f"issuer key {key_id} is already registered with another role or "
                        "validity window; retire it and register a new key"
                    )
                stored = existing
                created = False
            details: dict[str, object] = {"role": role, "created": created}
            accepts = False
            if enrollment_credential and not _holds(conn, key_id, asked):
                used = key_bindings.enroll_in(conn, enrollment_credential, key_id, asked, now)
                accepts = used.accepts_bundle_certificate
                details.update(enrollment=used.enrollment_id, bound=used.bound)
            elif asked:
                key_bindings.bind_in(conn, key_id, asked, now)
                details.update(bound=asked)
            if bundle_certificate is not None:
                key_bindings.register_certificate_in(conn, key_id, bundle_certificate, now)
                details.update(bundle_certificate=bundle_certificate.certificate_id)
                if accepts:
                    # The admin's enrollment accepted it: listed from now on (R-C-11). The key
                    # is admitted whatever becomes of its certificate.
                    acceptance = key_bindings.accept_certificates_in(
                        conn,
                        key_id,
                        [bundle_certificate],
                        actor=actor,
                        reason=f"accepted by enrollment {details['enrollment']}",
                        now=now,
                        strict=False,
                    )
                    details.update(accepted_certificates=list(acceptance.accepted))
                    for certificate_id, why in acceptance.refused:
                        details.update(refused_certificate=certificate_id)
                        _log.warning(
                            "bundle certificate %s of key %s is not accepted: %s",
                            certificate_id,
                            key_id,
                            why,
                        )
            audit_log.write_audit(
                conn,
                actor=actor,
                action=audit_log.ACTION_REGISTER_KEY,
                target=key_id,
                reason=reason,
                details=details,
                at=now,
            )
            return _issuer_key(stored), created

        return self._db.write(work)

    def get_issuer_key(self, key_id: str) -> IssuerKey:
        """A registered key (retired or not).

        Raises:
            ValidationError: ``key_id`` is malformed.
            NotFound: no such key is registered.
        """
        validate_key_id(key_id, "key_id")
        statement = select(*_COLUMNS).where(_keys.c.key_id == key_id)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"issuer key {key_id} is not registered")
        return _issuer_key(row)

    def list_issuer_keys(
        self,
        role: int = IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[IssuerKey]:
        """Registered keys (retired ones included), oldest registration first.

        ``role`` UNSPECIFIED lists every role.
        """
        statement = select(*_COLUMNS)
        role_name = None
        if role != IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED:
            role_name = _role_name(role)
            statement = statement.where(_keys.c.role == role_name)
        rows, token = _LISTING.read(
            self._db,
            statement,
            query=fingerprint(role=role_name),
            page_size=page_size,
            page_token=page_token,
        )
        return Page([_issuer_key(row) for row in rows], token)

    def retire_issuer_key(
        self, key_id: str, actor: str, reason: str, *, at: datetime | None = None
    ) -> IssuerKey:
        """Retire a key (admin) from ``at`` (default now) on; audited as ``issuer_key.retire``.

        A retired key is never active again. Retiring a retired key changes nothing (the
        first retirement time stays) but is audited.

        Raises:
            ValidationError: malformed key id, actor or reason (a reason is required).
            NotFound: no such key is registered.
        """
        validate_key_id(key_id, "key_id")
        actor = audit_log.check_actor(actor)
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        now = inputs.moment(at)
        by_id = select(*_COLUMNS).where(_keys.c.key_id == key_id)

        def work(conn: Connection) -> IssuerKey:
            existing = conn.execute(by_id.with_for_update()).one_or_none()
            if existing is None:
                raise NotFound(f"issuer key {key_id} is not registered")
            already = existing.retired_at is not None
            if not already:
                conn.execute(update(_keys).where(_keys.c.key_id == key_id).values(retired_at=now))
            audit_log.write_audit(
                conn,
                actor=actor,
                action=audit_log.ACTION_RETIRE_KEY,
                target=key_id,
                reason=reason,
                details={"role": existing.role, "already_retired": already},
                at=now,
            )
            return _issuer_key(conn.execute(by_id).one())

        return self._db.write(work)

    def active_key(self, key_id: str, role: int, at: datetime | None = None) -> IssuerKey | None:
        """The key if, at ``at`` (default now), it is registered with ``role``, inside its
        validity window (``not_before <= at < not_after``) and not retired; else None.

        Raises:
            ValidationError: malformed key id or a role other than WORKER / ORGANIZATION.
        """
        validate_key_id(key_id, "key_id")
        role_name = _role_name(role)
        moment = inputs.moment(at)
        statement = select(*_COLUMNS).where(
            _keys.c.key_id == key_id, _keys.c.role == role_name, _active_clause(moment)
        )
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        return None if row is None else _issuer_key(row)

    def trust_set(self, role: int, at: datetime | None = None) -> TrustSet:
        """Every key of ``role`` active at ``at`` (default now), as a TrustSet for verifying."""
        role_name = _role_name(role)
        moment = inputs.moment(at)
        statement = select(_keys.c.public_key).where(
            _keys.c.role == role_name, _active_clause(moment)
        )
        keys = self._db.read(lambda conn: [bytes(k) for k in conn.execute(statement).scalars()])
        return TrustSet(keys)

    def worker_trust(self, at: datetime | None = None) -> TrustSet:
        """The active WORKER keys at ``at`` (default now): what receipts are verified against."""
        return self.trust_set(IssuerKeyRole.ISSUER_KEY_ROLE_WORKER, at)


def _holds(conn: Connection, key_id: str, asked: Sequence[str]) -> bool:
    """Whether ``key_id`` is admitted and bound to every contract in ``asked`` already: then
    the enrollment credential it presents is not needed, and not looked at (a worker restarted
    with a credential that has expired since an admin approved its key still registers)."""
    admission = key_bindings.admission_in(conn, key_id)
    return admission.admitted and set(asked) <= set(admission.contract_digests)


def _role_name(role: int) -> str:
    try:
        return _ROLE_NAMES[cast(IssuerKeyRole.ValueType, role)]
    except KeyError:
        raise ValidationError(
            f"issuer key role must be WORKER or ORGANIZATION, got {role}"
        ) from None


def _active_clause(at: datetime) -> ColumnElement[bool]:
    """Keys whose validity window holds ``at`` and that were not retired by then."""
    return and_(
        _keys.c.not_before <= at,
        or_(_keys.c.not_after.is_(None), _keys.c.not_after > at),
        or_(_keys.c.retired_at.is_(None), _keys.c.retired_at > at),
    )


def _issuer_key(row: AnyRow) -> IssuerKey:
    key = IssuerKey(
        key_id=row.key_id,
        public_key=bytes(row.public_key),
        role=_ROLE_VALUES[row.role],
        not_before=inputs.timestamp(row.not_before),
        retired=row.retired_at is not None,
        display_name=row.display_name,
    )
    if row.not_after is not None:
        key.not_after.CopyFrom(inputs.timestamp(row.not_after))
    return key
