"""Sealed signal shards (R-I-3): a content-addressed manifest over one boundary's retained rows.

The manifest lists every retained row's digest in shard order with its population and family,
plus what the shard was retained under. Its own digest (:attr:`ShardManifest.shard_id`) names the
shard, so a stored shard whose rows were edited, dropped, added or reordered no longer verifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal.core.digest import digest_json, is_digest
from rewardseal.core.errors import ShardCorrupt, ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.retention import DIAGNOSTIC_FAMILIES, RetainedRow, Retention

__all__ = ["ShardEntry", "ShardManifest", "seal_shard", "verify_shard"]

_ENTRY_KEYS: Final = ("row_digest", "population", "family")
_MANIFEST_KEYS: Final = (
    "run_id",
    "boundary",
    "system_revision_id",
    "protocol_revision_id",
    "captured",
    "exact",
    "entries",
)


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One retained row as the manifest lists it."""

    row_digest: str
    population: str
    family: str | None

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {"row_digest": self.row_digest, "population": self.population, "family": self.family}

    @classmethod
    def of(cls, retained: RetainedRow) -> ShardEntry:
        """The entry a retained row should have."""
        return cls(retained.row.digest, retained.population, retained.family)


@dataclass(frozen=True, slots=True)
class ShardManifest:
    """The sealed manifest of one boundary's shard; :attr:`shard_id` is its digest."""

    run_id: str
    boundary: int
    system_revision_id: str
    protocol_revision_id: str
    captured: int
    exact: bool
    entries: tuple[ShardEntry, ...]

    @property
    def shard_id(self) -> str:
        """The R-DIG-1 digest of :meth:`to_json`."""
        return digest_json(self.to_json())

    @property
    def core_count(self) -> int:
        """How many retained rows are core."""
        return sum(1 for entry in self.entries if entry.population == "core")

    def to_json(self) -> JsonObject:
        """The plain-dict form (what is digested)."""
        return {
            "run_id": self.run_id,
            "boundary": self.boundary,
            "system_revision_id": self.system_revision_id,
            "protocol_revision_id": self.protocol_revision_id,
            "captured": self.captured,
            "exact": self.exact,
            "entries": [entry.to_json() for entry in self.entries],
        }

    @classmethod
    def from_json(cls, doc: object) -> ShardManifest:
        """Read a manifest; refuse a malformed one (the shard is then unverifiable)."""
        where = "manifest"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(data, _MANIFEST_KEYS, where)
        entries: list[ShardEntry] = []
        for item in fields.sequence(data, "entries", where):
            entry = fields.mapping(item, "manifest.entries[]")
            fields.no_unknown_keys(entry, _ENTRY_KEYS, "manifest.entries[]")
            digest = fields.string(entry, "row_digest", "manifest.entries[]")
            population, family = entry.get("population"), entry.get("family")
            valid = (population == "core" and family is None) or (
                population == "diagnostic" and family in DIAGNOSTIC_FAMILIES
            )
            if not is_digest(digest) or not valid:
                raise ValidationError("manifest entry: bad row digest, population or family")
            entries.append(ShardEntry(digest, str(population), family))
        manifest = cls(
            run_id=fields.string(data, "run_id", where),
            boundary=fields.integer(data, "boundary", where),
            system_revision_id=fields.string(data, "system_revision_id", where),
            protocol_revision_id=fields.string(data, "protocol_revision_id", where),
            captured=fields.integer(data, "captured", where),
            exact=fields.boolean(data, "exact", where),
            entries=tuple(entries),
        )
        if manifest.captured < len(manifest.entries):
            raise ValidationError("manifest: more entries than captured rows")
        return manifest


def seal_shard(retention: Retention, *, run_id: str, system_revision_id: str) -> ShardManifest:
    """Seal a boundary's retained rows into a manifest (store the manifest and the rows).

    Raises:
        ValidationError: ``run_id`` is empty or ``system_revision_id`` is not a digest.
    """
    if not run_id:
        raise ValidationError("a shard needs a run id")
    if not is_digest(system_revision_id):
        raise ValidationError("system_revision_id must be a sha256: digest")
    return ShardManifest(
        run_id=run_id,
        boundary=retention.boundary,
        system_revision_id=system_revision_id,
        protocol_revision_id=retention.protocol_revision_id,
        captured=retention.captured,
        exact=retention.exact,
        entries=tuple(ShardEntry.of(retained) for retained in retention.rows),
    )


def verify_shard(
    manifest: ShardManifest, rows: Sequence[RetainedRow], *, shard_id: str | None = None
) -> Retention:
    """Check ``rows`` against ``manifest`` (and the manifest against ``shard_id`` when given).

    Returns the rows as a :class:`Retention`, ready for an audit.

    Raises:
        ShardCorrupt: the manifest is not ``shard_id``, a row is missing, extra, reordered or
            edited, a row belongs to another boundary, or an exact shard holds diagnostics.
    """
    if shard_id is not None and manifest.shard_id != shard_id:
        raise ShardCorrupt(f"the manifest does not hash to shard {shard_id}")
    if len(rows) != len(manifest.entries):
        raise ShardCorrupt(
            f"the shard has {len(rows)} rows; its manifest lists {len(manifest.entries)}"
        )
    for index, (retained, entry) in enumerate(zip(rows, manifest.entries, strict=True)):
        if ShardEntry.of(retained) != entry:
            raise ShardCorrupt(
                f"row {index} does not match its manifest entry (edited, reordered or relabelled)",
                metadata={"row_index": str(index)},
            )
        if retained.row.policy_update != manifest.boundary:
            raise ShardCorrupt(f"row {index} belongs to another boundary")
    identities = [retained.row.identity for retained in rows]
    if len(set(identities)) != len(identities):
        raise ShardCorrupt("two rows of the shard share a (record_id, candidate) identity")
    if manifest.exact and any(r.population != "core" for r in rows):
        raise ShardCorrupt("an exact shard holds only core rows")
    if manifest.exact and manifest.captured != len(rows):
        raise ShardCorrupt("an exact shard retains every captured row")
    return Retention(
        manifest.boundary,
        manifest.protocol_revision_id,
        manifest.captured,
        manifest.exact,
        tuple(rows),
    )
