"""One-time enrollment credentials: made by the admin, used by one worker key at its
registration to admit it and bind it to contracts (R-C-11).

Enrollment credentials are random, shown once, and kept as their SHA-256 only; each is used by
one key, before it expires. Presenting a used credential again with the key that used it (a
restarted worker) is a no-op, not an error, and binds nothing again (an unbind stays done).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import PermissionDenied, ValidationError
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.key_admission import bind_in, checked_contract_digests
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "ACTION_CREATE_ENROLLMENT",
    "DEFAULT_ENROLLMENT_TTL",
    "ENROLLMENT_PREFIX",
    "MAX_CREDENTIAL_LENGTH",
    "MAX_ENROLLMENT_TTL",
    "MIN_CREDENTIAL_LENGTH",
    "Enrollment",
    "EnrollmentUse",
    "enroll_in",
    "insert_enrollment",
    "new_credential",
]

ACTION_CREATE_ENROLLMENT: Final = "enrollment.create"
DEFAULT_ENROLLMENT_TTL: Final = timedelta(days=1)
MAX_ENROLLMENT_TTL: Final = timedelta(days=365)
ENROLLMENT_PREFIX: Final = "rse-enroll."
"""Every enrollment credential starts so (a person or a secret scanner can tell what it is)."""
MIN_CREDENTIAL_LENGTH: Final = 24
"""A bootstrap credential an operator writes
(:meth:`~rewardseal_control.store.key_bindings.KeyBindingStore.ensure_enrollment`) has at least
this many characters; generated ones are much longer."""
MAX_CREDENTIAL_LENGTH: Final = 256

_enrollments = tables.enrollments


@dataclass(frozen=True)
class EnrollmentUse:
    """An enrollment credential used at registration: which, what it bound now, and whether
    it accepts the bundle certificate the key registers with (only at its first use)."""

    enrollment_id: str
    bound: list[str]
    accepts_bundle_certificate: bool = False


@dataclass(frozen=True)
class Enrollment:
    """A new enrollment credential: ``credential`` exists only in this answer."""

    enrollment_id: str
    credential: str
    contract_digests: tuple[str, ...]
    expires_at: datetime
    accepts_bundle_certificate: bool = False


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


def new_credential() -> str:
    """A fresh random enrollment credential (shown once, stored as its hash)."""
    return ENROLLMENT_PREFIX + secrets.token_urlsafe(32)


def insert_enrollment(
    db: StoreEngine,
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
    """Store a new enrollment for ``credential`` (hashed) and audit it; None when that
    credential is stored already (nothing is written then).

    Raises:
        ValidationError: malformed input, no contract (or contracts with ``any_contract``),
            ``ttl`` not in (0, 365 days].
    """
    digests = checked_contract_digests(contract_digests, required=not any_contract)
    if any_contract and digests:
        raise ValidationError("name contracts or any_contract, not both")
    actor = audit_log.check_actor(actor)
    reason = inputs.text(reason, "reason", max_length=inputs.MAX_REASON_LENGTH)
    if not isinstance(ttl, timedelta) or not timedelta(0) < ttl <= MAX_ENROLLMENT_TTL:
        raise ValidationError("the enrollment's lifetime must be more than 0 and at most 365 days")
    now = inputs.moment(at)
    enrollment_id = f"enroll.{secrets.token_hex(8)}"
    expires_at = now + ttl
    hashed = _hash(credential)
    insert = db.insert_ignore(_enrollments).returning(_enrollments.c.enrollment_id)

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

    return db.write(work)
