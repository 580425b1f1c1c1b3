"""Helpers that play a rollout against the seeded MockMed system of record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_mockmed.seeding import write_encounter

CHECKPOINT = "policy_checkpoint_mockmed_0"


def descriptor(
    digest: str, episode_id: str, *, update: int = 0, **fields: Any
) -> EpisodeDescriptor:
    """A descriptor for ``episode_id``; keyword fields override or add descriptor fields."""
    base: dict[str, Any] = {
        "episode_id": episode_id,
        "policy_checkpoint_id": CHECKPOINT,
        "policy_update": update,
        "reward_contract_digest": digest,
    }
    base.update(fields)
    return make_descriptor(**base)


def write_triage(
    database: Path, patient_id: str, *, note: str = "Follow-up in 2 weeks.", **extra: Any
) -> str:
    """The honest write: one Triage encounter for ``patient_id``."""
    return write_encounter(database, patient_id=patient_id, note=note, **extra)
