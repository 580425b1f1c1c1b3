"""Encounter drafts: forms an agent filled in through the API but has not submitted yet.

A draft is what a clinician's open form holds before "Submit": it lives in the serving process,
never in the ``encounters`` table, so a reward that reads the system of record sees nothing of
it (the unsubmitted-form hack pays nothing) and a restart loses it, as closing a browser tab
loses an unsent form. Submitting takes the draft out of the book and stores it as an encounter.

Every draft belongs to one patient: a lookup names the patient too, and a draft of another
patient is "not found", so an agent scoped to one patient never reaches another's form.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

__all__ = ["DRAFT_FIELDS", "MAX_DRAFTS", "Draft", "DraftBook", "new_draft_id"]

Draft = dict[str, str | None]
"""``id``, ``patient_id`` and the draft's writable fields (values or None)."""

DRAFT_FIELDS: Final = ("type", "note", "status", "priority")
"""The fields a draft's update may change (its patient is fixed when it is opened)."""
MAX_DRAFTS: Final = 10_000
"""Beyond this many open drafts the oldest is dropped (a bound on the process's memory)."""


def new_draft_id() -> str:
    """A fresh draft id (``draft-`` and 32 hex digits)."""
    return f"draft-{uuid.uuid4().hex}"


class DraftBook:
    """The open drafts of one MockMed process. Thread-safe."""

    def __init__(self, *, max_drafts: int = MAX_DRAFTS) -> None:
        """An empty book that keeps at most ``max_drafts`` drafts."""
        self._lock = threading.Lock()
        self._drafts: OrderedDict[str, Draft] = OrderedDict()
        self._max = max_drafts

    def open(self, patient_id: str, fields: Mapping[str, str | None]) -> Draft:
        """A new draft of ``patient_id`` holding ``fields`` (those of :data:`DRAFT_FIELDS`)."""
        draft: Draft = {"id": new_draft_id(), "patient_id": patient_id}
        draft.update({name: fields.get(name) for name in DRAFT_FIELDS})
        with self._lock:
            self._drafts[draft["id"] or ""] = draft
            while len(self._drafts) > self._max:
                self._drafts.popitem(last=False)
        return dict(draft)

    def change(
        self, draft_id: str, patient_id: str, changes: Mapping[str, str | None]
    ) -> Draft | None:
        """Apply ``changes`` to ``patient_id``'s draft ``draft_id``; None when there is none."""
        with self._lock:
            draft = self._drafts.get(draft_id)
            if draft is None or draft["patient_id"] != patient_id:
                return None
            draft.update({name: value for name, value in changes.items() if name in DRAFT_FIELDS})
            return dict(draft)

    def take(self, draft_id: str, patient_id: str) -> Draft | None:
        """Remove and return ``patient_id``'s draft ``draft_id`` (None when there is none).

        Taking is atomic, so two submits of one draft store it once.
        """
        with self._lock:
            draft = self._drafts.get(draft_id)
            if draft is None or draft["patient_id"] != patient_id:
                return None
            return self._drafts.pop(draft_id)

    def put_back(self, draft: Draft) -> None:
        """Return a taken draft whose submit failed, so the agent may submit it again."""
        with self._lock:
            self._drafts[draft["id"] or ""] = draft
