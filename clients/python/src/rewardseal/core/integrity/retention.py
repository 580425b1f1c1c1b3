"""Deterministic retention of a boundary's rows (R-I-4).

Every record is ranked by SHA-256 of the canonical JSON of ``[protocol seed, record_id]``; the
core is the first ``core_size`` rows in (rank, candidate) order, which is a uniform sample of
records (whole records, so the record-grouped bootstrap sees each record's rows together, and the
same records stay in the core at every boundary). A boundary that fits within the protocol's
limit is retained whole, all of it core, and marked ``exact``.

Diagnostic rows come from outside the core, one family at a time in turn until
``diagnostic_size`` is reached: verifier errors, threshold-adjacent optimizer rewards, the
highest optimizer rewards, component disagreement. They are labelled with their family and never
pooled into core rates (the audit's metrics, rewardseal_server.integrity_audit, read only the
core).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.mapping import RewardMapping
from rewardseal.core.integrity.protocols import RetentionProtocol
from rewardseal.core.integrity.signals import SignalRow

__all__ = [
    "DIAGNOSTIC_FAMILIES",
    "DiagnosticFamily",
    "Population",
    "RetainedRow",
    "Retention",
    "rank_key",
    "retain",
]

Population = Literal["core", "diagnostic"]
DiagnosticFamily = Literal[
    "verifier_error", "threshold_adjacent", "highest_optimizer_reward", "component_disagreement"
]
DIAGNOSTIC_FAMILIES: Final[tuple[str, ...]] = get_args(DiagnosticFamily)


def rank_key(seed: int, record_id: str) -> bytes:
    """The 32-byte rank of a record under a protocol seed (lower ranks are retained first)."""
    return hashlib.sha256(canonical_json([seed, record_id])).digest()


@dataclass(frozen=True, slots=True)
class RetainedRow:
    """A row as a shard keeps it: its population, and its family when diagnostic."""

    row: SignalRow
    population: Population
    family: DiagnosticFamily | None = None

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {"population": self.population, "family": self.family, "row": self.row.to_json()}

    @classmethod
    def from_json(cls, doc: object) -> RetainedRow:
        """Read a retained row."""
        data = fields.mapping(doc, "retained")
        fields.no_unknown_keys(data, ("population", "family", "row"), "retained")
        population, family = data.get("population"), data.get("family")
        if population == "core" and family is None:
            return cls(SignalRow.from_json(data.get("row")), "core")
        if population == "diagnostic" and family in DIAGNOSTIC_FAMILIES:
            return cls(SignalRow.from_json(data.get("row")), "diagnostic", family)
        raise ValidationError("retained row: a core row has no family, a diagnostic row one")


@dataclass(frozen=True, slots=True)
class Retention:
    """What a protocol kept of one boundary: rows in shard order (core by rank, then diagnostics).

    ``captured`` counts every row of the boundary, retained or not.
    """

    boundary: int
    protocol_revision_id: str
    captured: int
    exact: bool
    rows: tuple[RetainedRow, ...]

    @property
    def core(self) -> tuple[SignalRow, ...]:
        """The uniform core: the only rows population rates are computed over."""
        return tuple(r.row for r in self.rows if r.population == "core")

    @property
    def diagnostics(self) -> tuple[RetainedRow, ...]:
        """The diagnostic rows, reported apart."""
        return tuple(r for r in self.rows if r.population == "diagnostic")


def _is_error(row: SignalRow) -> bool:
    return (
        row.sentinel is None
        or row.sentinel.outcome == "error"
        or row.optimizer_mapped is None
        or any(a.outcome == "error" for a in row.auditors)
    )


def _components_disagree(row: SignalRow) -> bool:
    """Components split between pass and fail, or a diagnostic auditor contradicts the sentinel."""
    if len({score >= 0.5 for score in row.components.values()}) > 1:
        return True
    if row.sentinel is None or row.sentinel.outcome == "error":
        return False
    sentinel_accepts = row.sentinel.outcome == "accepted"
    return any(
        a.outcome != "error" and (a.outcome == "accepted") != sentinel_accepts for a in row.auditors
    )


def _round_robin(families: Sequence[list[SignalRow]], limit: int) -> list[tuple[int, SignalRow]]:
    """Take one row from each family in turn (skipping rows taken already) until ``limit``."""
    taken: list[tuple[int, SignalRow]] = []
    seen: set[tuple[str, int]] = set()
    cursors = [0] * len(families)
    while len(taken) < limit:
        progressed = False
        for index, family in enumerate(families):
            while cursors[index] < len(family) and family[cursors[index]].identity in seen:
                cursors[index] += 1
            if cursors[index] < len(family) and len(taken) < limit:
                row = family[cursors[index]]
                seen.add(row.identity)
                taken.append((index, row))
                progressed = True
        if not progressed:
            break
    return taken


def retain(
    rows: Iterable[SignalRow], protocol: RetentionProtocol, mapping: RewardMapping
) -> Retention:
    """Retain one boundary's rows under ``protocol`` (the mapping locates threshold-adjacency).

    Raises:
        ValidationError: no rows, rows from more than one policy update, or two rows with the
            same ``(record_id, candidate)``.
    """
    captured = list(rows)
    if not captured:
        raise ValidationError("a boundary needs at least one row")
    boundaries = {row.policy_update for row in captured}
    if len(boundaries) != 1:
        raise ValidationError(f"rows span {len(boundaries)} policy updates; retain one boundary")
    identities = [row.identity for row in captured]
    if len(set(identities)) != len(identities):
        raise ValidationError("two rows share a (record_id, candidate) identity")
    ranks = {row.record_id: rank_key(protocol.seed, row.record_id) for row in captured}

    def by_rank(row: SignalRow) -> tuple[bytes, int]:
        return (ranks[row.record_id], row.candidate)

    ordered = sorted(captured, key=by_rank)
    boundary, revision = boundaries.pop(), protocol.revision_id
    limit = protocol.limit
    if limit is None or protocol.core_size is None or len(ordered) <= limit:
        kept = tuple(RetainedRow(row, "core") for row in ordered)
        return Retention(boundary, revision, len(captured), True, kept)
    core, rest = ordered[: protocol.core_size], ordered[protocol.core_size :]
    band = protocol.threshold_band * mapping.scale

    def adjacency(row: SignalRow) -> float:
        assert row.optimizer_mapped is not None
        return abs(row.optimizer_mapped - mapping.threshold)

    graded = [row for row in rest if row.optimizer_mapped is not None]
    select: tuple[Callable[[], list[SignalRow]], ...] = (
        lambda: [row for row in rest if _is_error(row)],
        lambda: sorted(
            (row for row in graded if adjacency(row) <= band),
            key=lambda row: (adjacency(row), by_rank(row)),
        ),
        lambda: sorted(graded, key=lambda row: (-(row.optimizer_mapped or 0.0), by_rank(row))),
        lambda: [row for row in rest if _components_disagree(row)],
    )
    picked = _round_robin([choose() for choose in select], protocol.diagnostic_size)
    diagnostics = tuple(
        RetainedRow(row, "diagnostic", DIAGNOSTIC_FAMILIES[index])  # type: ignore[arg-type]
        for index, row in picked
    )
    kept = tuple(RetainedRow(row, "core") for row in core) + diagnostics
    return Retention(boundary, revision, len(captured), False, kept)
