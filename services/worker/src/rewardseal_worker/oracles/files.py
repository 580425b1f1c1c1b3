"""The ``json_file`` and ``screen_dump`` oracles: one reader for a JSON file of collections.

Recipe::

    {"kind": "json_file" | "screen_dump", "path": "rel/path.json", "collection": "encounters",
     "identity_fields": {"patient_id": "patient_id"}, "timeout_seconds": 2.0}

File: ``{"collections": {"encounters": [record, ...]}}``. A ``screen_dump`` is the same file read
at tier 0 (what the UI shows); its optional ``"banner"`` is informational and never read as a
record. Only the channel (and so the tier) differs, which the bundle checks, so one class serves
both kinds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rewardseal.core import strict_json
from rewardseal.core.judging import RECORD_ID_FIELD, identity_equals
from rewardseal_worker.oracles.base import (
    OracleUnavailable,
    check_identity,
    check_recipe_shape,
    check_relative_path,
    make_record,
    read_each,
    recipe_collection,
    recipe_identity_fields,
    recipe_timeout,
    resolve_relative,
)

MAX_FILE_BYTES = 64 * 1024 * 1024
"""A larger file is refused rather than parsed: the read must stay bounded."""


def check_file_recipe(recipe: Mapping[str, Any]) -> None:
    """The checks specific to ``json_file`` and ``screen_dump`` (after
    :func:`~.base.check_recipe_shape`): a relative ``path``."""
    check_relative_path(recipe.get("path"), "path")


class JsonFileReader:
    """Reads one collection of a JSON file by identity; the file is re-read on every call."""

    kind: str
    timeout_seconds: float
    local = True

    def __init__(
        self,
        *,
        kind: str,
        path: Path,
        collection: str,
        identity_fields: Mapping[str, str],
        timeout_seconds: float,
    ) -> None:
        """A reader of ``collection`` in the JSON file at ``path`` (absolute, already resolved)."""
        self.kind = kind
        self.timeout_seconds = timeout_seconds
        self._path = path
        self._collection = collection
        self._identity_fields = dict(identity_fields)

    @classmethod
    def from_recipe(cls, recipe: Mapping[str, Any], bundle_dir: Path) -> JsonFileReader:
        """Make a reader from a ``json_file`` or ``screen_dump`` recipe."""
        kind = check_recipe_shape(recipe)
        check_file_recipe(recipe)
        return cls(
            kind=kind,
            path=resolve_relative(recipe["path"], bundle_dir, "path"),
            collection=recipe_collection(recipe),
            identity_fields=recipe_identity_fields(recipe),
            timeout_seconds=recipe_timeout(recipe),
        )

    @property
    def path(self) -> Path:
        """The resolved file path."""
        return self._path

    def read(self, identity: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every record of ``identity`` in the collection. Blocking.

        Raises:
            IdentityMismatch: when the identity's keys are not the recipe's.
            OracleUnavailable: file missing, unreadable, too large, malformed JSON, wrong shape,
                or the read took longer than ``timeout_seconds``.
        """
        check_identity(identity, self._identity_fields)
        source = f"{self.kind} file {self._path.name!r}"
        started = time.monotonic()
        document = self._load(source)
        collections = document.get("collections") if isinstance(document, dict) else None
        if not isinstance(collections, dict):
            raise OracleUnavailable(f"{source}: no 'collections' object")
        rows = collections.get(self._collection)
        if not isinstance(rows, list):
            raise OracleUnavailable(f"{source}: collection {self._collection!r} is not a list")
        records: list[dict[str, Any]] = []
        for row in rows:
            if not isinstance(row, dict):
                raise OracleUnavailable(f"{source}: a record is not a JSON object")
            if all(
                identity_equals(row.get(field), identity[key])
                for key, field in self._identity_fields.items()
            ):
                records.append(make_record(row, RECORD_ID_FIELD, source))
        # A local file read cannot be interrupted; a late answer is still not an answer.
        if time.monotonic() - started > self.timeout_seconds:
            raise OracleUnavailable(f"{source}: read timed out after {self.timeout_seconds:g}s")
        return records

    def read_many(
        self, identities: Sequence[Mapping[str, str]]
    ) -> list[list[dict[str, Any]] | OracleUnavailable]:
        """One ``read`` per identity (file channels are not on the hot path)."""
        return read_each(self, identities)

    def _load(self, source: str) -> Any:
        try:
            with self._path.open("rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise OracleUnavailable(f"{source}: cannot be read ({type(exc).__name__})") from None
        if len(data) > MAX_FILE_BYTES:
            raise OracleUnavailable(f"{source}: larger than {MAX_FILE_BYTES} bytes")
        try:
            return strict_json.loads(data)
        except (ValueError, RecursionError):
            # from None: the decoder's message quotes the document around the error.
            raise OracleUnavailable(f"{source}: malformed JSON") from None

    def close(self) -> None:
        """Nothing to release: the file is opened and closed on each read."""
