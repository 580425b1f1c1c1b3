"""Reward-system, retention-protocol and integrity-profile revisions (R-I-1, R-I-4, R-I-7).

Every definition is parsed by core (:mod:`rewardseal.core.integrity`: validation, credential
scrubbing, normalization) before anything is stored; the id is the digest of the scrubbed
content, so creating the same content again is a no-op (``created`` False) and a refused spec
stores nothing. Rows are immutable (the migration's triggers refuse UPDATE and DELETE). The
built-in protocols and profiles are stored on start (:meth:`IntegrityRevisionStore.ensure_builtins`)
and their names are reserved: a custom revision may not take one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import and_, exists, select
from sqlalchemy.engine import Connection

from rewardseal.core.errors import IntegritySpecInvalid, NotFound, ValidationError
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    IntegrityProfile,
    RetentionProtocol,
    RewardSystem,
    correlation_reasons,
    parse_profile,
    parse_protocol,
    parse_reward_system,
)
from rewardseal.core.strict_json import loads as strict_loads
from rewardseal_control.store import audit_log, inputs, tables
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "ACTION_CREATE_REVISION",
    "RevisionKind",
    "StoredRevision",
    "SystemFilter",
    "IntegrityRevisionStore",
    "content_json",
]

RevisionKind = Literal["system", "protocol", "profile"]
ACTION_CREATE_REVISION: Final = "integrity.revision.create"
MAX_REF_LENGTH: Final = 256

_revisions = tables.integrity_revisions
_refs = tables.integrity_revision_refs
_LISTING = Listing(
    kind="integrity_revisions",
    order=(_revisions.c.created_at, _revisions.c.revision_id),
    shape=(datetime, str),
)
_T = TypeVar("_T")


def content_json(content: Mapping[str, Any]) -> str:
    """The stored text of a JSON document: sorted keys, no NaN (core refused those already)."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True)
class StoredRevision:
    """One stored revision; ``content`` is the scrubbed, normalized document."""

    revision_id: str
    kind: RevisionKind
    name: str | None
    builtin: bool
    independent: bool | None
    content: dict[str, Any]
    created_at: datetime

    def system(self) -> RewardSystem:
        """The reward system this revision holds (kind ``system``)."""
        return _typed(self, "system", parse_reward_system)

    def protocol(self) -> RetentionProtocol:
        """The retention protocol this revision holds (kind ``protocol``)."""
        return _typed(self, "protocol", parse_protocol)

    def profile(self) -> IntegrityProfile:
        """The integrity profile this revision holds (kind ``profile``)."""
        return _typed(self, "profile", parse_profile)


def _typed(revision: StoredRevision, kind: str, parse: Callable[[object], _T]) -> _T:
    if revision.kind != kind:
        raise ValidationError(f"revision {revision.revision_id} is a {revision.kind}, not a {kind}")
    return parse(revision.content)


@dataclass(frozen=True, slots=True)
class SystemFilter:
    """Filters of :meth:`IntegrityRevisionStore.list_revisions` for reward systems."""

    contract_digest: str | None = None
    implementation_fingerprint: str | None = None
    independent: bool | None = None


def _system_refs(system: RewardSystem) -> set[tuple[str, str]]:
    refs: set[tuple[str, str]] = set()
    for source in (system.optimizer, *(a.source for a in system.auditors)):
        if source.contract_digest is not None:
            refs.add(("contract", source.contract_digest))
        if source.fingerprints.implementation is not None:
            refs.add(("implementation", source.fingerprints.implementation[:MAX_REF_LENGTH]))
    return refs


class IntegrityRevisionStore:
    """Create, read and list integrity revisions."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db
        self._insert = db.insert_ignore(_revisions).returning(_revisions.c.revision_id)
        self._insert_ref = db.insert_ignore(_refs)

    # ------------------------------------------------------------------ writes

    def create_system(
        self, spec: object, actor: str, *, at: datetime | None = None
    ) -> tuple[StoredRevision, bool]:
        """Store the reward-system revision ``spec`` defines; ``(revision, created)``.

        Raises:
            IntegritySpecInvalid: the spec has blockers (``metadata["blockers"]``); nothing is
                stored.
        """
        system = parse_reward_system(spec)
        independent = not correlation_reasons(system.optimizer, system.primary_sentinel)
        return self._create(
            "system",
            system.revision_id,
            system.to_json(),
            name=None,
            independent=independent,
            refs=_system_refs(system),
            actor=actor,
            at=at,
        )

    def create_protocol(
        self, spec: object, actor: str, *, at: datetime | None = None
    ) -> tuple[StoredRevision, bool]:
        """Store a custom retention protocol; its name may not be a built-in's.

        Raises:
            IntegritySpecInvalid: blockers, or ``name_reserved``; nothing is stored.
        """
        return self._create_named("protocol", parse_protocol(spec), BUILTIN_PROTOCOLS, actor, at)

    def create_profile(
        self, spec: object, actor: str, *, at: datetime | None = None
    ) -> tuple[StoredRevision, bool]:
        """Store a custom integrity profile; its name may not be a built-in's.

        Raises:
            IntegritySpecInvalid: blockers, or ``name_reserved``; nothing is stored.
        """
        return self._create_named("profile", parse_profile(spec), BUILTIN_PROFILES, actor, at)

    def _create_named(
        self,
        kind: RevisionKind,
        revision: RetentionProtocol | IntegrityProfile,
        builtins: Mapping[str, RetentionProtocol | IntegrityProfile],
        actor: str,
        at: datetime | None,
    ) -> tuple[StoredRevision, bool]:
        _refuse_reserved(revision.name, revision.revision_id, builtins)
        return self._create(
            kind,
            revision.revision_id,
            revision.to_json(),
            name=revision.name,
            actor=actor,
            at=at,
        )

    def ensure_builtins(self, *, at: datetime | None = None) -> int:
        """Store the built-in protocols and profiles that are not stored yet; how many were."""
        moment = inputs.moment(at)
        rows = [
            _row("protocol", p.revision_id, p.to_json(), p.name, True, None, moment)
            for p in BUILTIN_PROTOCOLS.values()
        ] + [
            _row("profile", p.revision_id, p.to_json(), p.name, True, None, moment)
            for p in BUILTIN_PROFILES.values()
        ]

        def work(conn: Connection) -> int:
            return sum(conn.execute(self._insert, row).first() is not None for row in rows)

        return self._db.write(work)

    def _create(
        self,
        kind: RevisionKind,
        revision_id: str,
        content: dict[str, Any],
        *,
        name: str | None,
        actor: str,
        at: datetime | None,
        independent: bool | None = None,
        refs: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
    ) -> tuple[StoredRevision, bool]:
        audit_log.check_actor(actor)
        moment = inputs.moment(at)
        row = _row(kind, revision_id, content, name, False, independent, moment)

        def work(conn: Connection) -> tuple[StoredRevision, bool]:
            created = conn.execute(self._insert, row).first() is not None
            if created:
                for ref, value in sorted(refs):
                    conn.execute(
                        self._insert_ref, {"revision_id": revision_id, "ref": ref, "value": value}
                    )
                audit_log.write_audit(
                    conn,
                    actor=actor,
                    action=ACTION_CREATE_REVISION,
                    target=revision_id,
                    reason="",
                    details={"kind": kind, "name": name},
                    at=moment,
                )
            stored = _select_one(conn, revision_id)
            assert stored is not None
            if stored.kind != kind:  # pragma: no cover - ids digest different documents
                raise ValidationError(f"revision {revision_id} exists as a {stored.kind}")
            return stored, created

        return self._db.write(work)

    # ------------------------------------------------------------------ reads

    def get(self, kind: RevisionKind, revision_id: str) -> StoredRevision:
        """The revision of ``kind`` with ``revision_id`` (protocols and profiles: or a
        built-in's name).

        Raises:
            ValidationError: ``revision_id`` is empty.
            NotFound: no such revision of that kind.
        """
        return self._db.read(lambda conn: self.get_in(conn, kind, revision_id), snapshot=True)

    def get_in(self, conn: Connection, kind: RevisionKind, revision_id: str) -> StoredRevision:
        """:meth:`get` inside the caller's ``conn``."""
        if not isinstance(revision_id, str) or not revision_id:
            raise ValidationError(f"a {kind} revision id is required")
        if len(revision_id) > MAX_REF_LENGTH:
            raise ValidationError(f"{kind} revision id is too long")
        builtins: Mapping[str, Any] = {
            "protocol": BUILTIN_PROTOCOLS,
            "profile": BUILTIN_PROFILES,
        }.get(kind, {})
        if revision_id in builtins:
            revision_id = builtins[revision_id].revision_id
        stored = _select_one(conn, revision_id)
        if stored is None or stored.kind != kind:
            raise NotFound(f"{kind} revision {revision_id} is not stored")
        return stored

    def list_revisions(
        self,
        kind: RevisionKind,
        page_size: int = 0,
        page_token: str = "",
        filters: SystemFilter | None = None,
    ) -> Page[StoredRevision]:
        """Revisions of ``kind``, oldest first (filters apply to reward systems)."""
        filters = filters or SystemFilter()
        statement = select(_revisions).where(_revisions.c.kind == kind)
        for ref, value in (
            ("contract", filters.contract_digest),
            ("implementation", filters.implementation_fingerprint),
        ):
            if value:
                statement = statement.where(
                    exists().where(
                        and_(
                            _refs.c.revision_id == _revisions.c.revision_id,
                            _refs.c.ref == ref,
                            _refs.c.value == value,
                        )
                    )
                )
        if filters.independent is not None:
            statement = statement.where(_revisions.c.independent == filters.independent)
        rows, token = _LISTING.read(
            self._db,
            statement,
            query=fingerprint(
                kind=kind,
                contract=filters.contract_digest,
                implementation=filters.implementation_fingerprint,
                independent=filters.independent,
            ),
            page_size=page_size,
            page_token=page_token,
        )
        return Page([_stored(row) for row in rows], token)


def _refuse_reserved(name: str, revision_id: str, builtins: Mapping[str, Any]) -> None:
    builtin = builtins.get(name)
    if builtin is not None and builtin.revision_id != revision_id:
        raise IntegritySpecInvalid(
            f"the name {name!r} is a built-in's; give the custom revision another name",
            metadata={"blockers": "name_reserved"},
        )


def _row(
    kind: RevisionKind,
    revision_id: str,
    content: dict[str, Any],
    name: str | None,
    builtin: bool,
    independent: bool | None,
    at: datetime,
) -> dict[str, Any]:
    return {
        "revision_id": revision_id,
        "kind": kind,
        "name": name,
        "builtin": builtin,
        "independent": independent,
        "content": content_json(content),
        "created_at": at,
    }


def _select_one(conn: Connection, revision_id: str) -> StoredRevision | None:
    row = conn.execute(
        select(_revisions).where(_revisions.c.revision_id == revision_id)
    ).one_or_none()
    return None if row is None else _stored(row)


def _stored(row: AnyRow) -> StoredRevision:
    return StoredRevision(
        revision_id=row.revision_id,
        kind=row.kind,
        name=row.name,
        builtin=bool(row.builtin),
        independent=None if row.independent is None else bool(row.independent),
        content=strict_loads(row.content),
        created_at=row.created_at,
    )
