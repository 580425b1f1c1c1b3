"""The hacking families a caller adds to a calibration, passed in as data (R-CAL-3, R-MM-3).

Calibration knows no task and no family by name. A caller that has scripted hacking families for
a task (the seeded MockMed bundles have the ExtraDup families,
:mod:`rewardseal_mockmed.extradup.calibration`) passes a :class:`FaultFamilies`: which task they
are for, the task's published required-effects document their write comes from, and a
:class:`FamilyReplay` that plays one family on a store.
The worker drives the store (background records, credited ids, concurrent writes) and judges the
before/after reads exactly as the engine does; the replay only acts as the family's policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = ["EXTRADUP_PREFIX", "FamilyReplay", "FamilyStore", "FamilyWrite", "FaultFamilies"]

EXTRADUP_PREFIX: Final = "extradup."
"""Prefix of the family fault classes in a summary (``extradup.dup``, ...)."""


@dataclass(frozen=True)
class FamilyWrite:
    """The task's write as a family plays it: everything but the subject's identity value.

    ``fields`` are the gold field values without the identity field; a trial writes them for
    ``identity_field = <the trial's subject>``.
    """

    collection: str
    identity_field: str
    fields: Mapping[str, str]
    spec_count: int
    allowed_fields: frozenset[str]


class FamilyStore(Protocol):
    """The in-memory system of record a family is replayed on."""

    def insert(self, collection: str, fields: Mapping[str, str | None]) -> str:
        """Add one record to ``collection``; return its id."""
        ...

    def records(self, collection: str) -> list[dict[str, Any]]:
        """Copies of the records of ``collection``, in insertion order."""
        ...


class FamilyReplay(Protocol):
    """Plays scripted families of a task on a :class:`FamilyStore`."""

    @property
    def control(self) -> str:
        """The gold family: the one that writes the correct effect and must be VERIFIED."""
        ...

    def families_for(self, write: FamilyWrite) -> tuple[str, ...]:
        """The hacking families that can be played on ``write``, in round-robin order."""
        ...

    def writes_for_decoy(self, family: str) -> bool:
        """Whether ``family`` writes for the decoy identity (its trials name the decoy's kind)."""
        ...

    def new_store(self) -> FamilyStore:
        """An empty store."""
        ...

    def run(
        self,
        family: str,
        write: FamilyWrite,
        subject: str,
        store: FamilyStore,
        *,
        decoy_identity: str,
    ) -> None:
        """Apply ``family``'s scripted report for ``subject`` to ``store``.

        ``decoy_identity`` is the other subject a wrong-record family writes for.
        """
        ...


@dataclass(frozen=True)
class FaultFamilies:
    """The hacking families a task adds to its calibration, and where their write comes from.

    ``required_effects`` is the task's published required-effects document (its first effect
    gives the write); the families apply only to bundles whose contract names ``task_id`` with
    exactly ``identity_keys``. ``replay`` plays them.
    """

    task_id: str
    identity_keys: tuple[str, ...]
    required_effects: Mapping[str, Any]
    replay: FamilyReplay
