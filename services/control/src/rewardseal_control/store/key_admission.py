"""A worker key's admission and its contract bindings, read and written inside a transaction
(R-C-10).

A WORKER key registered by a non-admin credential writes nothing into the receipt index until
it is *admitted* (an admin's approval, :mod:`.key_bindings`, or an enrollment credential,
:mod:`.enrollments`). Admission binds the key to contracts; a receipt is recorded only under a
contract its key is bound to (:func:`bindings_in`, read by the receipt index in its own
transaction). These functions are what the key, binding, enrollment and receipt aggregates share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, ValidationError
from rewardseal.core.validation import validate_digest
from rewardseal_control.store import tables
from rewardseal_control.store.contracts import require_contract
from rewardseal_server.sqlstore import chunks, insert_ignore

__all__ = [
    "MAX_BINDINGS_PER_CALL",
    "Admission",
    "KeyStanding",
    "admission_in",
    "bind_in",
    "bindings_in",
    "checked_contract_digests",
    "require_key",
]

MAX_BINDINGS_PER_CALL: Final = 64
"""Most contracts one approve, unbind or enrollment names."""

_keys = tables.keys
_bindings = tables.key_bindings
_certificates = tables.key_certificates


@dataclass(frozen=True)
class Admission:
    """Whether a key is admitted for the receipt index, and the contracts it is bound to."""

    admitted: bool
    contract_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyStanding:
    """What the receipt index needs of one signing key: admitted, bound where, and the bundle
    certificates it registered as ``(certificate_id, contract_digest) -> certificate digest``."""

    admitted: bool
    contracts: frozenset[str]
    certificates: dict[tuple[str, str], str]


def checked_contract_digests(values: Iterable[str], *, required: bool) -> list[str]:
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


def require_key(conn: Connection, key_id: str) -> tuple[str, bool]:
    """``(role, retired)`` of a registered key, else NotFound."""
    row = conn.execute(
        select(_keys.c.role, _keys.c.retired_at).where(_keys.c.key_id == key_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"issuer key {key_id} is not registered")
    return str(row.role), row.retired_at is not None
