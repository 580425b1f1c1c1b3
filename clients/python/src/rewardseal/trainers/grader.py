"""The OpenAI grader shape, ``grade(sample, item) -> float``, for a loop you host yourself.

OpenAI's hosted reinforcement fine-tuning graders (``string_check``, ``text_similarity``,
``score_model``, ``label_model``, ``python`` and ``multi``) take no URL, and the ``python``
grader's code runs without network access. A hosted RFT job therefore cannot reach a
user-hosted reward worker, and this wrapper does not pretend otherwise: it is for a
self-hosted training loop that already speaks ``grade(sample, item)``.

``item`` carries the episode descriptor fields by name (``episode_id``,
``policy_checkpoint_id``, ``policy_update``, ``reward_contract_digest`` and, for the identity,
``metadata.oracle_identity``); ``sample`` is the model output. The worker's GradeOpenAI mirror
scores the episode and the client verifies the receipt's signature, checks that the receipt
answers the episode the item names (``ReceiptMismatch`` otherwise) and that the score is the
receipt's, before the score is used (R-T-5).

The grader shape has no "no score" value, and a hosted grader marks an exception or a bad
float as invalid and scores it 0. An unscored episode must never become 0.0 (R-W-9), so
:meth:`OpenAIGrader.grade` raises :class:`~rewardseal.core.errors.Unscored` for it: the loop drops
the sample. The worker stores nothing for that dry run, so the episode id is not burned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardseal.rpc.worker_client import WorkerClient

__all__ = ["OpenAIGrader"]


class OpenAIGrader:
    """``grade(sample, item) -> float`` through a worker's GradeOpenAI mirror."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    def grade(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """The verified score of the episode ``item`` names.

        Raises Unscored when the episode has no scalar (drop the sample; never pay it 0.0),
        ReceiptMismatch when the answer belongs to another episode (stop: the link is not to be
        trusted), and the client's other errors (ValidationError, Unavailable, ...) as they come.
        """
        return self.client.grade_openai(sample, item)

    def __call__(self, sample: Mapping[str, Any], item: Mapping[str, Any]) -> float:
        """Same as :meth:`grade`."""
        return self.grade(sample, item)
