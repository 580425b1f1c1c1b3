"""The trainer's on-disk signal buffer (R-I-3): captured rows and seals, in order, until control
has them.

Every batch of captured rows and every seal of a boundary is written here first, as one JSON
line, fsync'd, and removed only once control acknowledged it. So a control outage costs no row:
the entries wait on disk, in the order they were captured, and are delivered in that order once
control answers again; a crash of the trainer leaves them for the next start over the same
directory. The buffer is bounded by rows and bytes; reaching either limit raises
:class:`~rewardseal.core.errors.IntegrityBufferFull` and writes nothing of the refused entry, so
nothing is ever dropped silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from rewardseal.core.errors import IntegrityBufferFull, ValidationError
from rewardseal.core.integrity import SignalRow

__all__ = [
    "BUFFER_FILE",
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_BUFFER_ROWS",
    "BufferedEntry",
    "SignalBuffer",
]

BUFFER_FILE: Final = "signal-buffer.jsonl"
DEFAULT_MAX_BUFFER_ROWS: Final = 100_000
"""Rows kept on disk at most while control is away (about a day of 512-row boundaries)."""
DEFAULT_MAX_BUFFER_BYTES: Final = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BufferedEntry:
    """One undelivered step: rows to append to a boundary, or the seal of a boundary."""

    kind: Literal["rows", "seal"]
    run_id: str
    boundary: int
    system_revision_id: str
    protocol_revision_id: str
    rows: tuple[SignalRow, ...] = ()

    def to_line(self) -> bytes:
        """The entry as one JSON line (rows by their plain-dict form)."""
        doc = {
            "kind": self.kind,
            "run_id": self.run_id,
            "boundary": self.boundary,
            "system_revision_id": self.system_revision_id,
            "protocol_revision_id": self.protocol_revision_id,
            "rows": [row.to_json() for row in self.rows],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> BufferedEntry:
        """Read one line back (rows checked by :meth:`SignalRow.from_json`)."""
        doc = json.loads(line)
        kind = doc["kind"]
        if kind not in ("rows", "seal"):
            raise ValidationError(f"signal buffer entry of unknown kind {kind!r}")
        return cls(
            kind=kind,
            run_id=str(doc["run_id"]),
            boundary=int(doc["boundary"]),
            system_revision_id=str(doc["system_revision_id"]),
            protocol_revision_id=str(doc["protocol_revision_id"]),
            rows=tuple(SignalRow.from_json(row) for row in doc["rows"]),
        )


def _fsync_dir(directory: Path) -> None:
    # The rename of a rewritten buffer is durable only once its directory is.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SignalBuffer:
    """JSON lines under ``directory`` (created 0700), appended and fsync'd, bounded.

    ``max_rows`` and ``max_bytes`` bound what waits on disk (defaults
    :data:`DEFAULT_MAX_BUFFER_ROWS`, :data:`DEFAULT_MAX_BUFFER_BYTES`). One trainer process owns
    a directory.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        max_rows: int = DEFAULT_MAX_BUFFER_ROWS,
        max_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    ) -> None:
        if max_rows < 1 or max_bytes < 1:
            raise ValidationError("the signal buffer needs max_rows and max_bytes of at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = self.directory / BUFFER_FILE
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._entries: list[tuple[BufferedEntry, bytes]] = []
        if self.path.exists():
            for line in self.path.read_bytes().splitlines(keepends=True):
                if line.strip():
                    self._entries.append((BufferedEntry.from_line(line), line))

    @property
    def rows(self) -> int:
        """Rows waiting on disk."""
        return sum(len(entry.rows) for entry, _ in self._entries)

    @property
    def size(self) -> int:
        """Bytes waiting on disk."""
        return sum(len(line) for _, line in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[BufferedEntry]:
        """Every waiting entry, oldest first."""
        return [entry for entry, _ in self._entries]

    def add(self, entry: BufferedEntry) -> None:
        """Append ``entry`` and fsync it.

        Raises:
            IntegrityBufferFull: the entry would take the buffer past a limit; nothing of it
                is written and every earlier entry stays.
        """
        line = entry.to_line()
        rows, size = self.rows + len(entry.rows), self.size + len(line)
        if rows > self.max_rows or size > self.max_bytes:
            raise IntegrityBufferFull(
                f"the integrity signal buffer at {self.path} is full ({self.rows} rows, "
                f"{self.size} bytes waiting; limits {self.max_rows} rows, {self.max_bytes} "
                f"bytes): control has not taken the captured rows; the {len(entry.rows)} rows "
                "of this batch were not buffered",
                metadata={
                    "rows": str(self.rows),
                    "bytes": str(self.size),
                    "refused_rows": str(len(entry.rows)),
                },
            )
        with self.path.open("ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._entries.append((entry, line))

    def drop_delivered(self, count: int) -> None:
        """Remove the ``count`` oldest entries (control acknowledged them), durably."""
        if count <= 0:
            return
        self._entries = self._entries[count:]
        self._rewrite([line for _, line in self._entries])

    def _rewrite(self, lines: Sequence[bytes]) -> None:
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("wb") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        _fsync_dir(self.directory)
