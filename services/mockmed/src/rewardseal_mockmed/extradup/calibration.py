"""The ExtraDup families as calibration data: the replay the worker's calibration is handed.

The worker's calibration (:mod:`rewardseal_worker.calibration`) knows no family by name; the
caller that calibrates the seeded MockMed bundles (the worker's ``--seed-mockmed`` path) passes
``FaultFamilies(..., replay=EXTRADUP_REPLAY)``. :class:`ExtraDupReplay` satisfies the worker's
``FamilyReplay`` protocol structurally, so MockMed never imports the worker (contract
``mockmed-alone``). It lives here, beside the families, because the worker's seeding and the kit
both use it and nothing in production may import the kit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from rewardseal_mockmed.extradup.families import CONTROL, HACKING_FAMILIES, run_family
from rewardseal_mockmed.extradup.specs import WriteSpec
from rewardseal_mockmed.extradup.store import InMemoryStore

__all__ = ["EXTRADUP_REPLAY", "ExtraDupReplay", "TaskWrite"]

_OMIT: Final = "omit"
_WRONG_RECORD: Final = "wrong_record"


class TaskWrite(Protocol):
    """The task's write without the subject (the worker's ``FamilyWrite``)."""

    @property
    def collection(self) -> str: ...
    @property
    def identity_field(self) -> str: ...
    @property
    def fields(self) -> Mapping[str, str]: ...
    @property
    def spec_count(self) -> int: ...
    @property
    def allowed_fields(self) -> frozenset[str]: ...


class ExtraDupReplay:
    """Plays the ExtraDup families (:data:`rewardseal_mockmed.extradup.HACKING_FAMILIES`)."""

    @property
    def control(self) -> str:
        """The gold family, ``control``."""
        return CONTROL

    def families_for(self, write: TaskWrite) -> tuple[str, ...]:
        """Every hacking family, in family order; ``omit`` only when there is a field to drop.

        ``omit`` drops one non-identity field of the write: a write of the identity alone has
        none, and its ``omit`` trial would be the gold write.
        """
        droppable = any(name != write.identity_field for name in write.fields)
        return tuple(f for f in HACKING_FAMILIES if f != _OMIT or droppable)

    def writes_for_decoy(self, family: str) -> bool:
        """True for ``wrong_record``: the gold content written on a decoy identity."""
        return family == _WRONG_RECORD

    def new_store(self) -> InMemoryStore:
        """An empty :class:`~rewardseal_mockmed.extradup.InMemoryStore`."""
        return InMemoryStore()

    def run(
        self,
        family: str,
        write: TaskWrite,
        subject: str,
        store: object,
        *,
        decoy_identity: str,
    ) -> None:
        """Replay ``family``'s scripted report for ``subject`` on ``store``.

        ``store`` is typed as the worker's protocol sees it; it must be one :meth:`new_store`
        made (the families act through their in-memory store).
        """
        if not isinstance(store, InMemoryStore):
            raise TypeError("ExtraDupReplay.run needs a store made by ExtraDupReplay.new_store")
        spec = WriteSpec(
            collection=write.collection,
            fields={write.identity_field: subject, **write.fields},
            spec_count=write.spec_count,
            allowed_fields=write.allowed_fields,
            identity_field=write.identity_field,
        )
        run_family(family, spec, store=store, decoy_identity=decoy_identity)


EXTRADUP_REPLAY: Final = ExtraDupReplay()
"""The one replay calibration callers pass (it holds no state)."""
