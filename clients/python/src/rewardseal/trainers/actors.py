"""Episode actors: carry out a policy's completion against a system of record (docs/spec.md §11).

A trainer adapter with an actor runs the whole rollout for each completion: it mints an episode
id, asks the actor for the completion's oracle identity, opens the episodes (one BeginEpisodes
call records every baseline read), lets the actor execute each completion, and scores the batch.

Why an identity per completion: TRL copies a dataset row to every member of its group, and the
worker allows one open episode per identity (R-W-3). If every completion of a group wrote for the
row's own patient, the second begin would be refused (``identity_busy``) and, worse, two
completions' rows would be indistinguishable. So each completion gets its own sandbox patient,
derived from the row's patient and the episode id.

Why the task parameters: a parameterized contract (R-MSG-11) asks each row for its own task
("an encounter of type T with note N"), and an actor that builds its calls from the task rather
than only replaying the completion needs them. The adapters pass the row's parameters
(:mod:`rewardseal.trainers.task_parameters`) as ``task_parameters=`` only when the row carries
some, so an actor written before parameters keeps working for a contract without them.

The actor for the synthetic EMR (``MockMedActor``) is in the kit, :mod:`rewardseal_kit.actors`;
the helpdesk example's (``HelpdeskActor``, examples/helpdesk/) is the second implementation:
trainer adapters know this protocol, not a system of record. docs/trainers.md (*Episode actors*)
says how to write one for your own system.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final, Protocol, runtime_checkable

from rewardseal.core.errors import ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.v1.enums_pb2 import RuntimeSignal

__all__ = ["EpisodeActor", "SANDBOX_SEPARATOR", "sandbox_identity"]

SANDBOX_SEPARATOR: Final = "~"
"""Joins a row's patient id and the per-completion suffix (not used in the seeded ids)."""
_SUFFIX_HEX: Final = 12
_MAX_IDENTITY_VALUE: Final = 256


@runtime_checkable
class EpisodeActor(Protocol):
    """Executes one completion of a policy for one episode."""

    def identity_for(self, row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
        """The oracle identity this completion's episode is opened and scored under."""
        ...

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
        *,
        task_parameters: Mapping[str, ParameterValue] | None = None,
    ) -> RuntimeSignal.ValueType:
        """Carry out ``completion`` and say how the run ended (the worker's runtime signal).

        ``task_parameters`` are the values the episode was begun with (None: the row has
        none). They say what the task asks; they never stand in for what the completion did:
        an actor that wrote the task's values when the completion omitted them would be paid
        for its own work, not the policy's.

        ``FAILED_PLATFORM`` only for the platform's own failure (the system of record refused
        service), never for a bad completion: that is the policy's fault and must be read.
        """
        ...


def sandbox_identity(row_patient_id: str, episode_id: str) -> str:
    """``<row patient>~<12 hex of sha256(episode id)>``: unique per completion, stable per id.

    A hash rather than a slice of the id, so any episode id (minted or not) gives a short,
    well-formed suffix. Raises ValidationError when the result would exceed the 256-character
    identity limit shared by the worker (R-W-2) and MockMed.
    """
    if not row_patient_id:
        raise ValidationError("the dataset row has no patient id to derive a sandbox from")
    suffix = hashlib.sha256(episode_id.encode("utf-8")).hexdigest()[:_SUFFIX_HEX]
    value = f"{row_patient_id}{SANDBOX_SEPARATOR}{suffix}"
    if len(value) > _MAX_IDENTITY_VALUE:
        raise ValidationError(
            f"patient id {row_patient_id[:32]!r}... is too long for a sandbox identity"
        )
    return value
