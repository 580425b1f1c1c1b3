"""Retention protocols (R-I-4): how many rows of a boundary a signal shard keeps, and which.

A protocol is an immutable revision like a reward system: its id is the digest of its content
(name included). The built-ins use seed 42; a custom protocol is validated the same way. The
``threshold_band`` is the half-width, as a fraction of the mapped reward range, within which an
optimizer reward counts as threshold-adjacent (a diagnostic family).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.revisions import document_blockers, refuse_blocked, revision_id

__all__ = [
    "BUILTIN_PROTOCOLS",
    "DEFAULT_SEED",
    "RetentionProtocol",
    "parse_protocol",
    "validate_protocol",
]

DEFAULT_SEED: Final = 42
MAX_ROWS: Final = 1_000_000
"""The largest core or diagnostic size a custom protocol may name (a bound, not a target)."""
_KEYS: Final = ("name", "seed", "core_size", "diagnostic_size", "threshold_band")


@dataclass(frozen=True, slots=True)
class RetentionProtocol:
    """``core_size`` rows sampled uniformly plus up to ``diagnostic_size`` diagnostic rows.

    ``core_size`` None retains everything (``exhaustive``): every boundary is then exact.
    """

    name: str
    seed: int
    core_size: int | None
    diagnostic_size: int
    threshold_band: float = 0.05

    @property
    def limit(self) -> int | None:
        """The most rows a shard of this protocol holds; None for no limit."""
        return None if self.core_size is None else self.core_size + self.diagnostic_size

    @property
    def revision_id(self) -> str:
        """The R-DIG-1 digest of :meth:`to_json`."""
        return revision_id(self.to_json())

    def to_json(self) -> JsonObject:
        """The content, every field explicit."""
        return {
            "name": self.name,
            "seed": self.seed,
            "core_size": self.core_size,
            "diagnostic_size": self.diagnostic_size,
            "threshold_band": self.threshold_band,
        }

    @classmethod
    def from_json(cls, doc: object) -> RetentionProtocol:
        """Read a stored or custom protocol (the same as :func:`parse_protocol`)."""
        return parse_protocol(doc)


def _size(value: object, *, nullable: bool) -> bool:
    if value is None:
        return nullable
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ROWS


def validate_protocol(doc: object) -> list[str]:
    """Every blocker of a protocol document, sorted and unique; empty when it is valid."""
    if not isinstance(doc, Mapping):
        return ["wrong_type:$"]
    found = document_blockers(doc, _KEYS, named=True)
    seed = doc.get("seed", DEFAULT_SEED)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**53:
        found.add("invalid_value:seed")
    core = doc.get("core_size")
    if not _size(core, nullable=True) or core == 0:
        found.add("invalid_value:core_size")
    diagnostic = doc.get("diagnostic_size", 0)
    if not _size(diagnostic, nullable=False):
        found.add("invalid_value:diagnostic_size")
    elif core is None and diagnostic:
        # Everything is core when nothing is dropped: diagnostics would double-count rows.
        found.add("diagnostic_size_without_core_limit")
    band = doc.get("threshold_band", 0.05)
    band_value = fields.finite_number(band)
    if band_value is None or not 0 <= band_value <= 0.5:
        found.add("invalid_value:threshold_band")
    return sorted(found)


def parse_protocol(doc: object) -> RetentionProtocol:
    """A protocol revision from its document.

    Raises:
        IntegritySpecInvalid: the document has blockers (listed in ``metadata["blockers"]``).
    """
    blockers = validate_protocol(doc)
    refuse_blocked("retention protocol", blockers)
    data = fields.mapping(doc, "$")
    return RetentionProtocol(
        name=data["name"],
        seed=data.get("seed", DEFAULT_SEED),
        core_size=data.get("core_size"),
        diagnostic_size=data.get("diagnostic_size", 0),
        threshold_band=float(data.get("threshold_band", 0.05)),
    )


BUILTIN_PROTOCOLS: Final[Mapping[str, RetentionProtocol]] = MappingProxyType(
    {
        p.name: p
        for p in (
            RetentionProtocol("balanced_256", DEFAULT_SEED, core_size=192, diagnostic_size=64),
            RetentionProtocol("broad_512", DEFAULT_SEED, core_size=384, diagnostic_size=128),
            RetentionProtocol("exhaustive", DEFAULT_SEED, core_size=None, diagnostic_size=0),
        )
    }
)
"""The built-in protocols by name (R-I-4); their ids are computed like any custom one's."""
