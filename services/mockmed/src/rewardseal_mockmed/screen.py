"""The screen dump: what MockMed's UI showed, for tier-0 (screen_dump) oracles.

Document shape (the one :mod:`rewardseal_mockmed.seeding` stages and the worker's
``screen_dump`` oracle reads)::

    {"collections": {"encounters": [row, ...]}, "banner": {"<patient_id>": "Saved", ...}}

Every stored write shows its row and the banner "Saved". A *claim* (``POST /ui/claim``) shows
the same banner and a row that was never stored: the banner lie. The dump is therefore
evidence of what a user saw, never of what the system of record holds.

Without a file the dump lives in memory. With a file, the file is the dump: each change takes
an advisory lock (``.<name>.lock`` beside the file), reads the file, appends, and replaces it
atomically, so rows staged by other processes (for instance
``rewardseal_mockmed.seeding.show_on_screen``) are kept, and a reader never sees half a file. The
oldest rows are dropped beyond ``max_rows``.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.schema import ENCOUNTERS_TABLE

__all__ = ["MAX_SCREEN_ROWS", "SAVED_BANNER", "ScreenDump"]

SAVED_BANNER: Final = "Saved"
MAX_SCREEN_ROWS: Final = 100_000


def _empty() -> dict[str, Any]:
    return {"collections": {ENCOUNTERS_TABLE: []}, "banner": {}}


class ScreenDump:
    """The rows and banners the UI has shown. Thread-safe; with a file, process-safe too."""

    def __init__(self, path: Path | None = None, *, max_rows: int = MAX_SCREEN_ROWS) -> None:
        """A dump in memory or, when ``path`` is given, in that file (created empty if missing).

        Raises:
            ValidationError: the existing file is not a screen dump.
        """
        self._lock = threading.Lock()
        self._path = path
        self._max_rows = max_rows
        self._memory = _empty()
        if path is not None:
            with self._locked():
                self._write(self._read())  # checks the shape; creates a missing file

    @property
    def path(self) -> Path | None:
        """The file, if any."""
        return self._path

    @staticmethod
    def claimed_row_id() -> str:
        """An id for a row that is shown but was never stored (``screen-`` and 32 hex)."""
        return f"screen-{uuid.uuid4().hex}"

    def show(self, row: Mapping[str, Any], banner: str = SAVED_BANNER) -> None:
        """Show ``row`` (it must carry a string ``id`` and ``patient_id``) with ``banner``."""
        patient_id = row.get("patient_id")
        if not isinstance(patient_id, str) or not isinstance(row.get("id"), str):
            raise ValidationError("a screen row needs a string id and patient_id")
        with self._locked():
            # In memory the dump is changed in place: a deep copy per write grew with the dump
            # (up to max_rows rows) and made every write slower than the last.
            document = self._memory if self._path is None else self._read()
            rows: list[Any] = document["collections"][ENCOUNTERS_TABLE]
            rows.append(dict(row))
            del rows[: max(0, len(rows) - self._max_rows)]
            banners: dict[str, Any] = document["banner"]
            banners.pop(patient_id, None)  # insertion order follows the latest banner
            banners[patient_id] = banner
            for stale in list(banners)[: max(0, len(banners) - self._max_rows)]:
                del banners[stale]  # the oldest banners go, as the oldest rows do
            self._write(document)

    def document(self, patient_id: str | None = None) -> dict[str, Any]:
        """The dump as a JSON document (only ``patient_id``'s rows and banner when given)."""
        with self._lock:
            document = self._read()
        if patient_id is None:
            return document
        rows = document["collections"][ENCOUNTERS_TABLE]
        return {
            "collections": {
                ENCOUNTERS_TABLE: [row for row in rows if row.get("patient_id") == patient_id]
            },
            "banner": {k: v for k, v in document["banner"].items() if k == patient_id},
        }

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's lock, then (with a file) the advisory lock beside the file."""
        with self._lock:
            if self._path is None:
                yield
                return
            self._path.parent.mkdir(parents=True, exist_ok=True)
            lock_path = self._path.with_name(f".{self._path.name}.lock")
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _read(self) -> dict[str, Any]:
        """A fresh copy of the document (caller holds ``self._lock``)."""
        if self._path is None:
            return copy.deepcopy(self._memory)
        try:
            document = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _empty()
        except (OSError, ValueError) as exc:
            raise ValidationError(f"{self._path.name}: not a readable screen dump") from exc
        collections = document.get("collections") if isinstance(document, dict) else None
        rows = collections.get(ENCOUNTERS_TABLE, []) if isinstance(collections, dict) else None
        banners = document.get("banner", {}) if isinstance(document, dict) else None
        if (
            not isinstance(collections, dict)
            or not isinstance(rows, list)
            or not all(isinstance(row, dict) for row in rows)
            or not isinstance(banners, dict)
        ):
            raise ValidationError(f"{self._path.name}: not a screen dump")
        # Other collections and keys written by other tools are kept as they are.
        return {
            **document,
            "collections": {**collections, ENCOUNTERS_TABLE: rows},
            "banner": banners,
        }

    def _write(self, document: dict[str, Any]) -> None:
        """Store ``document`` (caller holds the locks); a file is replaced atomically."""
        if self._path is None:
            self._memory = document
            return
        fd, temporary = tempfile.mkstemp(
            dir=self._path.parent, prefix=f".{self._path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=2, sort_keys=True)
                handle.write("\n")
            os.chmod(temporary, 0o644)
            os.replace(temporary, self._path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
