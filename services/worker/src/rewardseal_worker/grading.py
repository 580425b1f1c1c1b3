"""The grader mirror (R-W-9, R-H-1): an OpenAI-grader ``item`` scored as the episode it names.

Both faces of the worker call :func:`grade_item`: the gRPC ``GradeOpenAI`` RPC
(:mod:`rewardseal_worker.service`) and ``POST /v1/graders/openai``
(:mod:`rewardseal_worker.http.routes`). Neither face imports the other; each only translates
its request to an item and :class:`Graded` to its response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from rewardseal.core.errors import InvalidEpisode, Unscored, preview
from rewardseal.core.receipts import grader_score, is_unscored
from rewardseal.core.validation import parse_strict
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_worker.engine import ScoreJob, Scorer

__all__ = ["Graded", "descriptor_from_item", "grade_item"]


def descriptor_from_item(item: Mapping[str, Any]) -> EpisodeDescriptor:
    """The episode descriptor a grader ``item`` carries by field name."""
    descriptor = EpisodeDescriptor()
    known = {f.name for f in EpisodeDescriptor.DESCRIPTOR.fields}
    fields = {k: v for k, v in item.items() if k in known}
    try:
        # Struct numbers arrive as floats; the JSON mapping accepts integral floats for ints.
        if isinstance(fields.get("policy_update"), float):
            value = fields["policy_update"]
            if not value.is_integer():
                raise InvalidEpisode("policy_update must be an integer")
            fields["policy_update"] = int(value)
        json_format.ParseDict(fields, descriptor)
    except json_format.ParseError as exc:
        # The parser's message quotes the caller's value, which may be any size: cut it.
        raise InvalidEpisode(
            f"the grader item is not an episode descriptor: {preview(exc, quoted=False)}"
        ) from exc
    return descriptor


@dataclass(frozen=True)
class Graded:
    """The grader mirror's answer for one item: its score and the receipt behind it."""

    score: float
    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope


async def grade_item(scorer: Scorer, item: Mapping[str, Any]) -> Graded:
    """Score the episode a grader ``item`` names without burning its id when it is unscored,
    and grade it (the gRPC GradeOpenAI RPC and ``POST /v1/graders/openai`` alike).

    Raises:
        Unscored: the episode is unscored; the grader shape cannot say so and 0.0 would train
            on noise (R-W-9).
        RewardSealError: the item is not a descriptor, or scoring refused it.
    """
    descriptor = descriptor_from_item(item)
    envelope = await scorer.score(ScoreJob(descriptor, commit_unscored=False))
    receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
    if is_unscored(receipt):
        raise Unscored(
            f"episode {descriptor.episode_id} is unscored; drop the sample",
            metadata={"reward_outcome": RewardOutcome.Name(receipt.reward_outcome)},
        )
    return Graded(grader_score(receipt), receipt, envelope)
