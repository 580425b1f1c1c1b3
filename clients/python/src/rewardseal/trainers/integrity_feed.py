"""From a trainer's scored batch to :class:`~rewardseal.trainers.integrity.capture.CapturedSample`
(R-I-3): the one reading of record identity, candidate ordinal and group the TRL reward function
and the verl managers share.

The record identity is the row's own ``record_id`` column when the dataset has one, else the
canonical JSON of its oracle identity (the system-of-record row the episode is about), else the
episode id (then every sample is its own record: the audit's bootstrap resamples samples, not
prompts). The candidate is the sample's ordinal among the samples of its record in the batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.integrity.capture import CapturedSample, IntegrityCapture
from rewardseal.v1.enums_pb2 import RuntimeSignal

__all__ = ["capture_batch", "record_id_for", "scored_samples"]


def record_id_for(explicit: Any, identity: Mapping[str, str] | None, episode_id: str) -> str:
    """The stable record identity of one sample (see the module docstring)."""
    if explicit is not None and str(explicit):
        return str(explicit)
    if identity:
        return json.dumps(dict(identity), sort_keys=True, separators=(",", ":"))
    return episode_id


def scored_samples(
    *,
    episode_ids: Sequence[str],
    texts: Sequence[str],
    scalars: Sequence[float | None],
    record_ids: Sequence[str],
    group_ids: Sequence[str],
    identities: Sequence[Mapping[str, str] | None],
    signals: Sequence[RuntimeSignal.ValueType | None],
) -> list[CapturedSample]:
    """One sample per scored completion, ``scalars`` the optimizer's own numbers (None for an
    unscored sample: never the group fill the trainer was handed, R-T-1)."""
    count = len(episode_ids)
    columns = (texts, scalars, record_ids, group_ids, identities, signals)
    if any(len(values) != count for values in columns):
        raise ValidationError("every capture column needs one entry per sample")
    seen: dict[str, int] = {}
    samples = []
    for index in range(count):
        record = record_ids[index]
        candidate = seen.get(record, 0)
        seen[record] = candidate + 1
        samples.append(
            CapturedSample(
                record_id=record,
                candidate=candidate,
                episode_id=episode_ids[index],
                output_text=texts[index],
                optimizer_raw=scalars[index],
                group_id=group_ids[index],
                identity=identities[index],
                runtime_signal=signals[index],
            )
        )
    return samples


def capture_batch(
    capture: IntegrityCapture | None,
    *,
    policy_update: int,
    episode_ids: Sequence[str],
    texts: Sequence[str] | None,
    scalars: Sequence[float | None],
    record_ids: Sequence[str],
    identities: Sequence[Mapping[str, str] | None],
    group_ids: Sequence[str],
    signals: Sequence[RuntimeSignal.ValueType | None],
) -> None:
    """Hand a scored batch to ``capture`` (nothing when None or not a captured boundary).

    ``identities`` are what each episode was opened with (the sentinel scores with them);
    ``record_ids`` come from :func:`record_id_for`.

    Called after the rewards are computed; it returns nothing a trainer could read (R-I-5).

    Raises:
        ValidationError: ``texts`` is None while a capture wants the rows.
        IntegrityBufferFull: from the capture.
    """
    if capture is None or not capture.captures(policy_update):
        return
    if texts is None:
        raise ValidationError("integrity capture needs each sample's response text")
    samples = scored_samples(
        episode_ids=episode_ids,
        texts=texts,
        scalars=scalars,
        record_ids=record_ids,
        group_ids=group_ids,
        identities=identities,
        signals=signals,
    )
    capture.record(samples, policy_update=policy_update)
