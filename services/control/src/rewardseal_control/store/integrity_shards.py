"""Signal shards (R-I-3): a boundary's captured rows, then its sealed, immutable shard.

The trainer side appends a boundary's rows (``append_rows``; appends are all-or-nothing per
call) and seals the boundary (``seal``): the retention protocol picks the rows a shard keeps
(core's :func:`~rewardseal.core.integrity.retain`), core's
:func:`~rewardseal.core.integrity.seal_shard` makes the manifest, and the manifest and the retained
rows are stored in one transaction that also removes the boundary's open rows. A sealed boundary
takes no more rows (:class:`~rewardseal.core.errors.ShardSealed`); a sealed shard's rows and
manifest are immutable (database triggers). Reading a shard back never trusts it:
:meth:`SignalShardStore.load` returns what parses and
:func:`~rewardseal.core.integrity.verify_shard` decides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Connection

from rewardseal.core.errors import NotFound, ShardCorrupt, ShardSealed, ValidationError
from rewardseal.core.integrity import (
    RetainedRow,
    ShardManifest,
    SignalRow,
    retain,
    seal_shard,
    verify_shard,
)
from rewardseal.core.strict_json import loads as strict_loads
from rewardseal.core.validation import validate_id
from rewardseal_control.store import inputs, tables
from rewardseal_control.store.integrity_revisions import IntegrityRevisionStore, content_json
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "MAX_APPEND_ROWS",
    "MAX_RECORD_ID_LENGTH",
    "LoadedShard",
    "SignalShardStore",
    "StoredShard",
]

MAX_APPEND_ROWS: Final = 4096
"""The most rows one append may carry."""
MAX_RECORD_ID_LENGTH: Final = 256
MAX_BOUNDARY: Final = 2**63 - 1

_open = tables.integrity_open_rows
_shards = tables.integrity_shards
_rows = tables.integrity_shard_rows
_LISTING = Listing(
    kind="integrity_shards", order=(_shards.c.boundary, _shards.c.shard_id), shape=(int, str)
)


@dataclass(frozen=True, slots=True)
class StoredShard:
    """A sealed shard as stored (``manifest`` is the stored JSON, read without trusting it)."""

    shard_id: str
    run_id: str
    boundary: int
    system_revision_id: str
    protocol_revision_id: str
    captured: int
    exact: bool
    core_rows: int
    diagnostic_rows: int
    manifest: dict[str, Any]
    sealed_at: datetime


@dataclass(frozen=True, slots=True)
class LoadedShard:
    """A shard read back for an audit: the manifest and rows that parsed (None/short when
    something was edited); verification decides whether they are evidence."""

    shard: StoredShard
    manifest: ShardManifest | None
    rows: tuple[RetainedRow, ...]

    def verify(self) -> None:
        """Raise :class:`ShardCorrupt` unless the rows hash to the manifest and the manifest to
        the shard id."""
        if self.manifest is None:
            raise ShardCorrupt(f"the manifest of shard {self.shard.shard_id} does not parse")
        verify_shard(self.manifest, self.rows, shard_id=self.shard.shard_id)

    def as_manifest(self) -> ShardManifest:
        """The parsed manifest, or a stand-in from the shard's columns (no entries) when it does
        not parse: an audit of it then finds the shard unverifiable."""
        if self.manifest is not None:
            return self.manifest
        shard = self.shard
        return ShardManifest(
            run_id=shard.run_id,
            boundary=shard.boundary,
            system_revision_id=shard.system_revision_id,
            protocol_revision_id=shard.protocol_revision_id,
            captured=shard.captured,
            exact=shard.exact,
            entries=(),
        )


def _boundary_lock(run_id: str, boundary: int) -> int:
    """The advisory-lock key of one boundary: appends and its seal take it, so on PostgreSQL no
    append commits rows into a boundary a concurrent seal has just closed."""
    digest = hashlib.sha256(f"{run_id}\0{boundary}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def check_run(run_id: str, boundary: int) -> None:
    """Refuse a run id that is not an R-MSG-10 id, or a negative boundary."""
    validate_id(run_id, "run_id")
    if isinstance(boundary, bool) or not isinstance(boundary, int) or not boundary >= 0:
        raise ValidationError("boundary must be a policy update >= 0")
    if boundary > MAX_BOUNDARY:
        raise ValidationError("boundary is out of range")


class SignalShardStore:
    """Append, seal, read and list signal shards."""

    def __init__(self, db: StoreEngine, revisions: IntegrityRevisionStore) -> None:
        """Work on ``db``; revisions are looked up through ``revisions``."""
        self._db = db
        self._revisions = revisions

    # ------------------------------------------------------------------ writes

    def append_rows(
        self,
        run_id: str,
        boundary: int,
        system_revision_id: str,
        protocol_revision_id: str,
        rows: Sequence[SignalRow],
        *,
        at: datetime | None = None,
    ) -> tuple[int, int]:
        """Append ``rows`` to the open boundary; ``(appended, rows open now)``.

        Raises:
            ValidationError: a bad run id or boundary, no rows or too many, a row of another
                boundary, an over-long record id, a row identity repeated (in the call or
                already appended), or revisions other than the boundary's earlier appends.
            NotFound: an unknown reward-system or protocol revision.
            ShardSealed: the boundary is sealed already.
        """
        check_run(run_id, boundary)
        if not rows:
            raise ValidationError("an append needs at least one row")
        if len(rows) > MAX_APPEND_ROWS:
            raise ValidationError(f"at most {MAX_APPEND_ROWS} rows per append")
        identities: set[tuple[str, int]] = set()
        for index, row in enumerate(rows):
            if row.policy_update != boundary:
                raise ValidationError(
                    f"rows[{index}] has policy_update {row.policy_update}, not the boundary "
                    f"{boundary}"
                )
            if len(row.record_id) > MAX_RECORD_ID_LENGTH:
                raise ValidationError(f"rows[{index}].record_id is over {MAX_RECORD_ID_LENGTH}")
            if row.identity in identities:
                raise ValidationError(f"rows[{index}] repeats a (record_id, candidate) identity")
            identities.add(row.identity)
        moment = inputs.moment(at)

        def work(conn: Connection) -> tuple[int, int]:
            self._db.advisory_lock(conn, _boundary_lock(run_id, boundary))
            system = self._revisions.get_in(conn, "system", system_revision_id)
            protocol = self._revisions.get_in(conn, "protocol", protocol_revision_id)
            where = (_open.c.run_id == run_id, _open.c.boundary == boundary)
            if _sealed(conn, run_id, boundary) is not None:
                raise ShardSealed(f"boundary {boundary} of run {run_id} is sealed already")
            bound = conn.execute(
                select(_open.c.system_revision_id, _open.c.protocol_revision_id)
                .where(*where)
                .limit(1)
            ).first()
            if bound is not None and tuple(bound) != (system.revision_id, protocol.revision_id):
                raise ValidationError(
                    "the boundary's earlier rows name another reward-system or protocol revision"
                )
            taken = _taken(conn, run_id, boundary, [row.record_id for row in rows])
            clash = next((row for row in rows if row.identity in taken), None)
            if clash is not None:
                raise ValidationError(
                    f"record {clash.record_id!r} candidate {clash.candidate} is appended already"
                )
            conn.execute(
                insert(_open),
                [
                    {
                        "run_id": run_id,
                        "boundary": boundary,
                        "record_id": row.record_id,
                        "candidate": row.candidate,
                        "system_revision_id": system.revision_id,
                        "protocol_revision_id": protocol.revision_id,
                        "body": content_json(row.to_json()),
                        "appended_at": moment,
                    }
                    for row in rows
                ],
            )
            count = conn.execute(select(func.count()).select_from(_open).where(*where))
            return len(rows), int(count.scalar_one())

        return self._db.write(work)

    def seal(
        self,
        run_id: str,
        boundary: int,
        *,
        expected_shard_id: str = "",
        at: datetime | None = None,
    ) -> tuple[StoredShard, bool]:
        """Seal the boundary: retain, make the manifest, store both; ``(shard, created)``.

        Sealing a sealed boundary again returns the stored shard (``created`` False).

        Raises:
            ValidationError: a bad run id or boundary.
            NotFound: no rows were appended to the boundary.
            ShardCorrupt: ``expected_shard_id`` is given and is not what the rows seal to;
                nothing is sealed.
        """
        check_run(run_id, boundary)
        moment = inputs.moment(at)

        def work(conn: Connection) -> tuple[StoredShard, bool]:
            self._db.advisory_lock(conn, _boundary_lock(run_id, boundary))
            sealed = _sealed(conn, run_id, boundary)
            if sealed is not None:
                _expect(expected_shard_id, sealed.shard_id)
                return sealed, False
            open_rows = list(
                conn.execute(
                    select(_open.c.system_revision_id, _open.c.protocol_revision_id, _open.c.body)
                    .where(_open.c.run_id == run_id, _open.c.boundary == boundary)
                    .order_by(_open.c.record_id, _open.c.candidate)
                )
            )
            if not open_rows:
                raise NotFound(f"no rows were appended to boundary {boundary} of run {run_id}")
            system_id, protocol_id = (
                open_rows[0].system_revision_id,
                open_rows[0].protocol_revision_id,
            )
            system = self._revisions.get_in(conn, "system", system_id).system()
            protocol = self._revisions.get_in(conn, "protocol", protocol_id).protocol()
            captured = [SignalRow.from_json(strict_loads(row.body)) for row in open_rows]
            retention = retain(captured, protocol, system.mapping)
            manifest = seal_shard(retention, run_id=run_id, system_revision_id=system_id)
            _expect(expected_shard_id, manifest.shard_id)
            record = {
                "shard_id": manifest.shard_id,
                "run_id": run_id,
                "boundary": boundary,
                "system_revision_id": system_id,
                "protocol_revision_id": protocol_id,
                "captured": manifest.captured,
                "exact": manifest.exact,
                "core_rows": manifest.core_count,
                "diagnostic_rows": len(manifest.entries) - manifest.core_count,
                "manifest": content_json(manifest.to_json()),
                "sealed_at": moment,
            }
            conn.execute(insert(_shards), record)
            conn.execute(
                insert(_rows),
                [
                    {
                        "shard_id": manifest.shard_id,
                        "position": position,
                        "body": content_json(kept.to_json()),
                    }
                    for position, kept in enumerate(retention.rows)
                ],
            )
            conn.execute(
                delete(_open).where(_open.c.run_id == run_id, _open.c.boundary == boundary)
            )
            stored = _sealed(conn, run_id, boundary)
            assert stored is not None
            return stored, True

        return self._db.write(work)

    # ------------------------------------------------------------------ reads

    def get(self, shard_id: str) -> StoredShard:
        """The sealed shard ``shard_id``.

        Raises:
            NotFound: no such shard.
        """
        return self._db.read(lambda conn: get_shard_in(conn, shard_id))

    def load(self, shard_id: str) -> LoadedShard:
        """The shard with the manifest and rows that parse (see :class:`LoadedShard`).

        Raises:
            NotFound: no such shard.
        """

        def work(conn: Connection) -> LoadedShard:
            shard = get_shard_in(conn, shard_id)
            bodies = conn.execute(
                select(_rows.c.body).where(_rows.c.shard_id == shard_id).order_by(_rows.c.position)
            ).scalars()
            return LoadedShard(shard, _parsed_manifest(shard), _parsed_rows(bodies))

        return self._db.read(work, snapshot=True)

    def verify(self, shard_id: str) -> StoredShard:
        """The shard, after checking its rows against its manifest.

        Raises:
            NotFound: no such shard.
            ShardCorrupt: a row or the manifest was edited, dropped, added or reordered.
        """
        loaded = self.load(shard_id)
        loaded.verify()
        return loaded.shard

    def earlier(self, shard: StoredShard) -> list[StoredShard]:
        """The run's shards before ``shard``'s boundary under the same revisions, in order."""
        statement = (
            select(_shards)
            .where(
                _shards.c.run_id == shard.run_id,
                _shards.c.boundary < shard.boundary,
                _shards.c.system_revision_id == shard.system_revision_id,
                _shards.c.protocol_revision_id == shard.protocol_revision_id,
            )
            .order_by(_shards.c.boundary)
        )
        return self._db.read(lambda conn: [_stored(r) for r in conn.execute(statement)])

    def list_shards(
        self, run_id: str, page_size: int = 0, page_token: str = ""
    ) -> Page[StoredShard]:
        """The run's sealed shards in boundary order.

        Raises:
            ValidationError: ``run_id`` is not an id, or a bad page token.
        """
        validate_id(run_id, "run_id")
        rows, token = _LISTING.read(
            self._db,
            select(_shards).where(_shards.c.run_id == run_id),
            query=fingerprint(run_id=run_id),
            page_size=page_size,
            page_token=page_token,
        )
        return Page([_stored(row) for row in rows], token)


def get_shard_in(conn: Connection, shard_id: str) -> StoredShard:
    """The sealed shard ``shard_id`` inside the caller's ``conn`` (NotFound when absent)."""
    if not isinstance(shard_id, str) or not shard_id or len(shard_id) > 256:
        raise ValidationError("shard_id is required")
    row = conn.execute(select(_shards).where(_shards.c.shard_id == shard_id)).one_or_none()
    if row is None:
        raise NotFound(f"signal shard {shard_id} is not stored")
    return _stored(row)


def _expect(expected: str, actual: str) -> None:
    if expected and expected != actual:
        raise ShardCorrupt(
            f"the rows seal to shard {actual}, not the expected {expected}",
            metadata={"shard_id": actual},
        )


def _sealed(conn: Connection, run_id: str, boundary: int) -> StoredShard | None:
    row = conn.execute(
        select(_shards).where(_shards.c.run_id == run_id, _shards.c.boundary == boundary)
    ).one_or_none()
    return None if row is None else _stored(row)


def _taken(
    conn: Connection, run_id: str, boundary: int, records: list[str]
) -> set[tuple[str, int]]:
    taken: set[tuple[str, int]] = set()
    unique = sorted(set(records))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        found = conn.execute(
            select(_open.c.record_id, _open.c.candidate).where(
                _open.c.run_id == run_id,
                _open.c.boundary == boundary,
                _open.c.record_id.in_(chunk),
            )
        )
        taken.update((str(r), int(c)) for r, c in found)
    return taken


def _parsed_manifest(shard: StoredShard) -> ShardManifest | None:
    try:
        return ShardManifest.from_json(shard.manifest)
    except ValidationError:
        return None


def _parsed_rows(bodies: Any) -> tuple[RetainedRow, ...]:
    parsed: list[RetainedRow] = []
    for body in bodies:
        try:
            parsed.append(RetainedRow.from_json(strict_loads(body)))
        except (ValueError, ValidationError):
            continue  # an edited row that no longer parses: the count no longer verifies
    return tuple(parsed)


def _stored(row: AnyRow) -> StoredShard:
    try:
        manifest = json.loads(row.manifest)
    except ValueError:
        manifest = {}
    return StoredShard(
        shard_id=row.shard_id,
        run_id=row.run_id,
        boundary=int(row.boundary),
        system_revision_id=row.system_revision_id,
        protocol_revision_id=row.protocol_revision_id,
        captured=int(row.captured),
        exact=bool(row.exact),
        core_rows=int(row.core_rows),
        diagnostic_rows=int(row.diagnostic_rows),
        manifest=manifest if isinstance(manifest, dict) else {},
        sealed_at=row.sealed_at,
    )
