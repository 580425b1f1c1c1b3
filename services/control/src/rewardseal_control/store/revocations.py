"""Revocations and the signed revocation lists that carry them (R-C-4, R-C-13).

Revoking a certificate and publishing the next signed list happen in one transaction, under
one writer lock, so list versions are dense and every list holds every revocation before it.
The list is signed by the service's organization key through a :data:`RevocationSigner`
called inside that transaction; what it returns must be the very list it was given. Every
version ever issued is kept (the head is the highest). Revoking is an admin action, audited
in its transaction; re-signing the current entries before the head expires is not.

Besides single certificates, a list carries contract and checker-configuration entries
(:meth:`RevocationStore.revoke_scope`): one entry revokes every certificate of that contract or
checker configuration, issued before or after it. Every entry is permanent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import ColumnElement, Table, insert, select
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, ValidationError
from rewardseal.core.revocation import CHECKER, CONTRACT
from rewardseal.core.signing import REVOCATION_LIST_PAYLOAD_TYPE
from rewardseal.core.validation import parse_strict, validate_digest, validate_id
from rewardseal.v1.certificate_pb2 import RevocationEntry, RevocationList
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.contracts import require_contract
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "DEFAULT_LIST_TTL",
    "RevocationHead",
    "RevocationSigner",
    "RevocationStore",
    "read_head",
    "revoked_scope_in",
]

DEFAULT_LIST_TTL: Final = timedelta(hours=24)
"""How long a signed revocation list is valid unless the service says otherwise."""

_LOCK_KEY: Final = 0x7273_7276_6C73  # pg_advisory_xact_lock: one list writer

RevocationSigner = Callable[[RevocationList], SignedEnvelope]
"""Signs an unsigned RevocationList (the service's organization key; it may set
``issuer_key_id``) into a SignedEnvelope of type ``REVOCATION_LIST_PAYLOAD_TYPE``."""

_certificates = tables.certificates
_revocations = tables.revocations
_scopes = tables.revocation_scopes
_heads = tables.heads
_SCOPE_ACTIONS: Final = {
    CONTRACT: audit_log.ACTION_REVOKE_CONTRACT,
    CHECKER: audit_log.ACTION_REVOKE_CHECKER,
}
_SCOPE_FIELDS: Final = {
    CONTRACT: "reward_contract_digest",
    CHECKER: "checker_configuration_digest",
}
"""The RevocationEntry field (and the name in messages) of each kind's digest."""
_HEAD_COLUMNS = (_heads.c.version, _heads.c.envelope, _heads.c.issued_at, _heads.c.expires_at)


@dataclass(frozen=True)
class RevocationHead:
    """A signed revocation list as stored (the head is the highest version)."""

    version: int
    envelope: SignedEnvelope
    issued_at: datetime
    expires_at: datetime


def read_head(conn: Connection, version: int | None = None) -> RevocationHead | None:
    """The stored list of ``version`` (default: the newest) inside ``conn``; None if absent."""
    statement = select(*_HEAD_COLUMNS)
    if version is None:
        statement = statement.order_by(_heads.c.version.desc()).limit(1)
    else:
        statement = statement.where(_heads.c.version == version)
    row = conn.execute(statement).one_or_none()
    if row is None:
        return None
    return RevocationHead(
        version=int(row.version),
        envelope=SignedEnvelope.FromString(bytes(row.envelope)),
        issued_at=row.issued_at,
        expires_at=row.expires_at,
    )


class RevocationStore:
    """Revoke certificates and publish, re-sign and read the signed revocation lists."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def revoke(
        self,
        certificate_id: str,
        reason: str,
        actor: str,
        *,
        sign: RevocationSigner,
        ttl: timedelta = DEFAULT_LIST_TTL,
        at: datetime | None = None,
    ) -> tuple[RevocationHead, bool]:
        """Revoke a certificate (R-C-4, admin) and publish the next signed list, atomically.

        The new list (version = head + 1, issued ``at``, expiring ``at + ttl``, every revoked
        certificate sorted by id) is signed by ``sign`` inside the transaction and stored as the
        new head; ``(head, True)``. Revoking a revoked certificate changes nothing and returns
        ``(current head, False)``. Audited as ``certificate.revoke`` either way.

        Raises:
            ValidationError: malformed id, actor, reason (required) or ttl; ``sign`` returned
                something that is not the list it was given.
            NotFound: no such certificate.
        """
        validate_id(certificate_id, "certificate_id")
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        actor = audit_log.check_actor(actor)
        now = inputs.moment(at)
        _check_ttl(ttl)

        def work(conn: Connection) -> tuple[RevocationHead, bool]:
            self._db.advisory_lock(conn, _LOCK_KEY)
            known = conn.execute(
                select(_certificates.c.certificate_id).where(
                    _certificates.c.certificate_id == certificate_id
                )
            ).first()
            if known is None:
                raise NotFound(f"certificate {certificate_id} is not known")
            return self._add_entry(
                conn,
                _revocations,
                _revocations.c.certificate_id == certificate_id,
                {"certificate_id": certificate_id},
                action=audit_log.ACTION_REVOKE_CERTIFICATE,
                target=certificate_id,
                reason=reason,
                actor=actor,
                sign=sign,
                ttl=ttl,
                now=now,
            )

        return self._db.write(work)

    def revoke_scope(
        self,
        kind: str,
        digest: str,
        reason: str,
        actor: str,
        *,
        sign: RevocationSigner,
        ttl: timedelta = DEFAULT_LIST_TTL,
        at: datetime | None = None,
    ) -> tuple[RevocationHead, bool]:
        """Revoke every certificate of a contract (``kind`` ``"contract"``, ``digest`` a
        registered contract's) or of a checker configuration (``"checker"``, a
        ``checker_configuration_digest``; it need not be known yet) in one list entry (R-C-13,
        admin), issued before or after it, and publish the next signed list, atomically.

        Like :meth:`revoke`: ``(new head, True)``; the same scope again changes nothing and
        returns ``(current head, False)``. Audited as ``certificate.revoke_contract`` or
        ``certificate.revoke_checker`` either way. Permanent: no list ever drops the entry.

        Raises:
            ValidationError: unknown kind, malformed digest, actor, reason (required) or ttl.
            NotFound: ``kind`` is ``"contract"`` and no such contract is registered.
        """
        if kind not in _SCOPE_ACTIONS:
            raise ValidationError(f"kind must be {CONTRACT!r} or {CHECKER!r}, not {kind!r}")
        validate_digest(digest, _SCOPE_FIELDS[kind])
        reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH, required=True)
        actor = audit_log.check_actor(actor)
        now = inputs.moment(at)
        _check_ttl(ttl)
        key = (_scopes.c.kind == kind) & (_scopes.c.digest == digest)

        def work(conn: Connection) -> tuple[RevocationHead, bool]:
            self._db.advisory_lock(conn, _LOCK_KEY)
            if kind == CONTRACT:
                require_contract(conn, digest)
            return self._add_entry(
                conn,
                _scopes,
                key,
                {"kind": kind, "digest": digest},
                action=_SCOPE_ACTIONS[kind],
                target=digest,
                reason=reason,
                actor=actor,
                sign=sign,
                ttl=ttl,
                now=now,
            )

        return self._db.write(work)

    def revoked_scope(self, contract_digest: str, checker_digest: str) -> tuple[str, str] | None:
        """``(kind, digest)`` of the entry that revokes every certificate of ``contract_digest``
        or of ``checker_digest`` (R-C-13), or None: a certificate under it is revoked at birth."""
        return self._db.read(lambda conn: revoked_scope_in(conn, contract_digest, checker_digest))

    def publish_revocation_list(
        self,
        *,
        sign: RevocationSigner,
        ttl: timedelta = DEFAULT_LIST_TTL,
        at: datetime | None = None,
    ) -> RevocationHead:
        """Sign the current entries as the next version (head + 1; 1 for the first list).

        For the first list at start-up and for re-signing before the head expires, so that a
        follower never holds a frozen list. Not an admin action (not audited).

        Raises:
            ValidationError: bad ttl; ``sign`` returned something that is not the list.
        """
        now = inputs.moment(at)
        _check_ttl(ttl)

        def work(conn: Connection) -> RevocationHead:
            self._db.advisory_lock(conn, _LOCK_KEY)
            head = read_head(conn)
            version = (head.version if head is not None else 0) + 1
            return self._publish(conn, sign, ttl, now, version)

        return self._db.write(work)

    def _add_entry(
        self,
        conn: Connection,
        table: Table,
        key: ColumnElement[bool],
        row: Mapping[str, object],
        *,
        action: str,
        target: str,
        reason: str,
        actor: str,
        sign: RevocationSigner,
        ttl: timedelta,
        now: datetime,
    ) -> tuple[RevocationHead, bool]:
        """Add the entry ``row`` (found by ``key`` in ``table``) under the next list version and
        publish that list, unless it is there already and a list is published; audit either
        way. ``(head, created)``, for :meth:`revoke` and :meth:`revoke_scope` alike."""
        already = conn.execute(select(table.c.list_version).where(key)).first()
        head = read_head(conn)
        created = already is None or head is None
        if created:
            version = (head.version if head is not None else 0) + 1
            if already is None:
                conn.execute(
                    insert(table).values(**row, reason=reason, revoked_at=now, list_version=version)
                )
            head = self._publish(conn, sign, ttl, now, version)
        assert head is not None
        audit_log.write_audit(
            conn,
            actor=actor,
            action=action,
            target=target,
            reason=reason,
            details={"list_version": head.version, "already_revoked": already is not None},
            at=now,
        )
        return head, created

    def _publish(
        self,
        conn: Connection,
        sign: RevocationSigner,
        ttl: timedelta,
        now: datetime,
        version: int,
    ) -> RevocationHead:
        """Build, sign and store list ``version`` from the current revocations: certificates
        by id first (sorted, as the list always was), then contracts and checker
        configurations (sorted by digest)."""
        rows = conn.execute(
            select(
                _revocations.c.certificate_id, _revocations.c.reason, _revocations.c.revoked_at
            ).order_by(_revocations.c.certificate_id)
        ).all()
        scoped = conn.execute(
            select(
                _scopes.c.kind, _scopes.c.digest, _scopes.c.reason, _scopes.c.revoked_at
            ).order_by(_scopes.c.kind, _scopes.c.digest)
        ).all()
        expires_at = now + ttl
        # Certificate entries first, in the order they always had (a list without contract or
        # checker entries keeps its bytes), then the contract and checker entries.
        entries = [
            RevocationEntry(
                certificate_id=row.certificate_id,
                reason=row.reason,
                revoked_at=inputs.timestamp(row.revoked_at),
            )
            for row in rows
        ]
        entries.extend(
            RevocationEntry(
                reason=row.reason,
                revoked_at=inputs.timestamp(row.revoked_at),
                **{_SCOPE_FIELDS[row.kind]: row.digest},
            )
            for row in scoped
        )
        unsigned = RevocationList(
            version=version,
            issued_at=inputs.timestamp(now),
            expires_at=inputs.timestamp(expires_at),
            entries=entries,
        )
        envelope = sign(RevocationList.FromString(unsigned.SerializeToString()))
        _check_signed_list(envelope, unsigned)
        conn.execute(
            insert(_heads).values(
                version=version,
                envelope=envelope.SerializeToString(deterministic=True),
                issued_at=now,
                expires_at=expires_at,
            )
        )
        return RevocationHead(
            version=version, envelope=envelope, issued_at=now, expires_at=expires_at
        )

    def revocation_head(self) -> RevocationHead | None:
        """The newest signed revocation list; None before the first is published."""
        return self._db.read(read_head)


def revoked_scope_in(
    conn: Connection, contract_digest: str, checker_digest: str
) -> tuple[str, str] | None:
    """:meth:`RevocationStore.revoked_scope` inside ``conn`` (what accepting a bundle
    certificate checks in its transaction, as issuing does, R-C-13)."""
    statement = select(_scopes.c.kind, _scopes.c.digest).where(
        ((_scopes.c.kind == CONTRACT) & (_scopes.c.digest == contract_digest))
        | ((_scopes.c.kind == CHECKER) & (_scopes.c.digest == checker_digest))
    )
    row = conn.execute(statement).first()
    return (str(row.kind), str(row.digest)) if row is not None else None


def _check_ttl(ttl: timedelta) -> None:
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ValidationError("the revocation list ttl must be a positive timedelta")


def _check_signed_list(envelope: SignedEnvelope, unsigned: RevocationList) -> None:
    """The signer must return an envelope over the very list it was given."""
    if not isinstance(envelope, SignedEnvelope):
        raise ValidationError("the revocation list signer must return a SignedEnvelope")
    if envelope.payload_type != REVOCATION_LIST_PAYLOAD_TYPE:
        raise ValidationError("the signed revocation list has the wrong payload type")
    if not envelope.signatures:
        raise ValidationError("the revocation list envelope carries no signature")
    try:
        signed = parse_strict(RevocationList, envelope.payload)
    except ValidationError as exc:
        raise ValidationError(f"the signed revocation list does not parse: {exc}") from None
    signed.ClearField("issuer_key_id")
    if signed != unsigned:
        raise ValidationError("the signer signed another revocation list than it was given")
