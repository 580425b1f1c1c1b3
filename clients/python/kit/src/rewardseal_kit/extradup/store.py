"""The in-memory system of record an ExtraDup trial is replayed on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardseal.core.errors import ValidationError

__all__ = ["InMemoryStore", "Record"]


Record = dict[str, Any]

_ID_PREFIX = "rec-"


class InMemoryStore:
    """A deterministic in-memory system of record: named collections of records.

    Ids are minted in insertion order across all collections (``rec-000001``, ``rec-000002``,
    ...). Every read returns copies, so a caller can never change the store through a result.
    """

    def __init__(self) -> None:
        self._collections: dict[str, list[Record]] = {}
        self._next_id = 1

    def insert(self, collection: str, fields: Mapping[str, str | None]) -> str:
        """Add one record to ``collection`` and return its minted id."""
        if not isinstance(collection, str) or not collection:
            raise ValidationError("a record needs a non-empty collection name")
        record: Record = {}
        for name, value in fields.items():
            if not isinstance(name, str) or not name or name == "id":
                raise ValidationError(f"field name {name!r} cannot be written")
            if value is not None and not isinstance(value, str):
                raise ValidationError(f"field {name!r} must be a string or None")
            record[name] = value
        record_id = f"{_ID_PREFIX}{self._next_id:06d}"
        self._next_id += 1
        self._collections.setdefault(collection, []).append({"id": record_id, **record})
        return record_id

    def records(self, collection: str, *, where: Mapping[str, str] | None = None) -> list[Record]:
        """Copies of the records of ``collection`` (in insertion order) matching every ``where``."""
        rows = self._collections.get(collection, [])
        conditions = dict(where or {})
        return [
            dict(row)
            for row in rows
            if all(row.get(name) == value for name, value in conditions.items())
        ]

    def collections(self) -> tuple[str, ...]:
        """The names of the collections that hold at least one record, sorted."""
        return tuple(sorted(name for name, rows in self._collections.items() if rows))

    def snapshot(self) -> dict[str, list[Record]]:
        """A deep copy of every collection, keyed by name in sorted order."""
        return {name: self.records(name) for name in sorted(self._collections)}

    def copy(self) -> InMemoryStore:
        """An independent store with the same records and the same next id."""
        clone = InMemoryStore()
        clone._collections = {
            name: [dict(row) for row in rows] for name, rows in self._collections.items()
        }
        clone._next_id = self._next_id
        return clone
