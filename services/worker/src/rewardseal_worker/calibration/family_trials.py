"""A family trial: a caller's scripted hacking family replayed on a store with background.

The worker draws the subject, the background records (other subjects, older records of the same
subject, some already credited), the decoy a wrong-record family writes for and a concurrent
write; the caller's :class:`~rewardseal_worker.calibration.families.FamilyReplay` only plays the
family's policy on the store. The store's before/after records become the baseline and current
reads.
"""

from __future__ import annotations

import random

from rewardseal_worker.calibration.fault_classes import CalibrationSetup
from rewardseal_worker.calibration.synthetic_values import filler, fresh_identity, near_miss
from rewardseal_worker.calibration.trials import Trial

__all__ = ["build_family_trial"]


def build_family_trial(
    setup: CalibrationSetup, rng: random.Random, family: str
) -> tuple[Trial, str]:
    """A family trial: ``family``'s scripted report replayed on a store with background.

    The variant is ``decoy_<fresh|near_miss|known>`` for a family that writes for the decoy,
    ``scripted`` for every other.
    """
    write, replay = setup.family_write, setup.replay
    assert write is not None
    assert replay is not None
    key = setup.identity_keys[0]
    identity = fresh_identity(rng, [key], {})
    gold: dict[str, str] = {write.identity_field: identity[key], **write.fields}
    store = replay.new_store()
    known: list[str] = []

    def background_row(subject: str) -> dict[str, str | None]:
        row: dict[str, str | None] = {**gold, write.identity_field: subject}
        for field in sorted(write.allowed_fields - set(row)):
            row[field] = filler(rng, field) if rng.random() < 0.8 else None
        return row

    for _ in range(rng.randint(2, 6)):
        subject = fresh_identity(rng, [key], identity)[key]
        known.append(subject)
        store.insert(write.collection, background_row(subject))
    own_ids = [
        store.insert(write.collection, background_row(identity[key]))
        for _ in range(rng.randint(0, 2))
    ]
    credited = {rid for rid in own_ids if rng.random() < 0.5}
    decoy_kind = rng.choice(["fresh", "near_miss", "known"])
    if decoy_kind == "near_miss":
        decoy = near_miss(rng, identity[key])
    elif decoy_kind == "known":
        decoy = rng.choice(known)
    else:
        decoy = fresh_identity(rng, [key], identity)[key]
    before = store.records(write.collection)
    replay.run(family, write, identity[key], store, decoy_identity=decoy)
    for _ in range(rng.randint(0, 1)):  # another episode's write, for another subject
        store.insert(write.collection, background_row(rng.choice(known)))
    after = store.records(write.collection)
    variant = f"decoy_{decoy_kind}" if replay.writes_for_decoy(family) else "scripted"
    return Trial(identity, before, after, credited), variant
