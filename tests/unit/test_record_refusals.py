"""Which of control's per-receipt refusals are permanent (R-C-12): the table of
:mod:`rewardseal_worker.record_refusals`, matched by (code, reason), unknown pairs kept."""

from __future__ import annotations

import grpc
import pytest

from rewardseal.core.errors import (
    DuplicateEpisode,
    NotFound,
    RewardSealError,
    SignatureError,
    ValidationError,
)
from rewardseal.rpc.status import to_episode_error
from rewardseal.v1.episode_pb2 import EpisodeError
from rewardseal_worker.record_refusals import Refusal, classify

S = grpc.StatusCode


def error(code: grpc.StatusCode, reason: str) -> EpisodeError:
    return EpisodeError(code=code.value[0], reason=reason, message="m")


@pytest.mark.parametrize(
    ("code", "reason", "kind"),
    [
        (S.ALREADY_EXISTS, "duplicate_episode", Refusal.PERMANENT),
        (S.INVALID_ARGUMENT, "signature_invalid", Refusal.PERMANENT),
        (S.NOT_FOUND, "not_found", Refusal.PERMANENT),
        (S.INVALID_ARGUMENT, "invalid_argument", Refusal.PERMANENT),
        (S.PERMISSION_DENIED, "key_not_bound", Refusal.PERMANENT),
        (S.INVALID_ARGUMENT, "certificate_unknown", Refusal.PERMANENT),
        (S.FAILED_PRECONDITION, "key_not_admitted", Refusal.RETRYABLE),
        (S.UNAVAILABLE, "unavailable", Refusal.RETRYABLE),
        # Unknown reasons, and known reasons under another code: kept (fail toward keeping).
        (S.INVALID_ARGUMENT, "something_new", Refusal.RETRYABLE),
        (S.INTERNAL, "internal", Refusal.RETRYABLE),
        (S.RESOURCE_EXHAUSTED, "resource_exhausted", Refusal.RETRYABLE),
        (S.INVALID_ARGUMENT, "duplicate_episode", Refusal.RETRYABLE),
        (S.FAILED_PRECONDITION, "key_not_bound", Refusal.RETRYABLE),
        (S.OK, "", Refusal.RETRYABLE),
    ],
)
def test_refusals_are_classified_by_code_and_reason(
    code: grpc.StatusCode, reason: str, kind: Refusal
) -> None:
    assert classify(error(code, reason)) is kind


@pytest.mark.parametrize(
    "refusal",
    [
        DuplicateEpisode("episode e already has a receipt", metadata={"receipt_id": "r"}),
        SignatureError("0 of 1 signature(s) verified"),
        NotFound("reward contract sha256:... is not registered"),
        ValidationError("receipt r is already recorded with other content"),
    ],
)
def test_what_control_answers_today_is_classified_as_it_travels(
    refusal: RewardSealError,
) -> None:
    # The errors control's RecordReceipts builds, through the same mapping it uses on the wire.
    assert classify(to_episode_error(refusal)) is Refusal.PERMANENT
