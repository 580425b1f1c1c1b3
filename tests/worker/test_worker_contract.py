"""Contract tests for RewardWorkerService on a real grpc.aio server (port 0): every row of
docs/spec.md §8.

Errors are read straight off the wire (status code + google.rpc.Status ErrorInfo), not through
our client's decoder, so the tests would catch a mapping bug on either side.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from support.mockmed_episodes import descriptor, write_triage
from support.worker_store import count_receipts
from worker.conftest import RunningStack

from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import CertificateState, RewardOutcome, RuntimeSignal
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt

SERVICE = "rewardseal.v1.RewardWorkerService"


def raw_stub(stack: RunningStack) -> tuple[grpc.aio.Channel, pb_grpc.RewardWorkerServiceStub]:
    channel = grpc.aio.insecure_channel(stack.target)
    return channel, pb_grpc.RewardWorkerServiceStub(channel)


def auth(stack: RunningStack, token: str | None = None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token or stack.token}"),)


async def wire_error(
    stack: RunningStack, method: str, request: object, *, metadata: object = None
) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """Call ``method`` expecting failure; return (code, ErrorInfo.reason, ErrorInfo.metadata)."""
    channel, stub = raw_stub(stack)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await getattr(stub, method)(
                request, metadata=auth(stack) if metadata is None else metadata, timeout=20
            )
    finally:
        await channel.close()
    error = caught.value
    details = dict(error.trailing_metadata() or ()).get(rpc_status.GRPC_DETAILS_METADATA_KEY)
    assert details is not None, "every error carries google.rpc.Status details"
    status = status_pb2.Status.FromString(details)
    assert status.code == error.code().value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details
    assert status.details[0].Unpack(info)
    assert info.domain == "rewardseal"
    return error.code(), info.reason, dict(info.metadata)


# --- Health (no token needed) ---


async def test_health_reports_key_contract_tier_and_certificate(stack: RunningStack) -> None:
    channel, stub = raw_stub(stack)
    try:
        answer = await stub.Health(pb.HealthRequest(), timeout=10)
        standard = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=10
        )
    finally:
        await channel.close()
    assert answer.issuer_key_id == stack.app.key.key_id
    assert answer.issuer_public_key == stack.app.key.public_key
    assert answer.reward_contract_digest == stack.digest
    assert answer.oracle_tier == 2
    assert answer.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
    assert answer.certificate_id == stack.app.bundle.certificate.certificate_id
    assert standard.status == health_pb2.HealthCheckResponse.SERVING


# --- UNAUTHENTICATED on every RPC but health ---

AUTHED_CALLS = [
    ("BeginEpisode", pb.BeginEpisodeRequest()),
    ("BeginEpisodes", pb.BeginEpisodesRequest()),
    ("ScoreEpisode", pb.ScoreEpisodeRequest()),
    ("ScoreEpisodes", pb.ScoreEpisodesRequest()),
    ("GetReceipt", pb.GetReceiptRequest(receipt_id="rcpt.00000000")),
    ("GradeOpenAI", pb.GradeOpenAIRequest()),
]


@pytest.mark.parametrize(
    ("method", "request_message"), AUTHED_CALLS, ids=[m for m, _ in AUTHED_CALLS]
)
@pytest.mark.parametrize("presented", ["none", "wrong", "not-bearer"])
async def test_unauthenticated_without_the_token(
    stack: RunningStack, method: str, request_message: object, presented: str
) -> None:
    metadata = {
        "none": (),
        "wrong": (("authorization", "Bearer " + "x" * 43),),
        "not-bearer": (("authorization", f"Basic {stack.token}"),),
    }[presented]
    code, reason, _ = await wire_error(stack, method, request_message, metadata=metadata)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")


async def test_stream_unauthenticated_without_the_token(stack: RunningStack) -> None:
    channel, stub = raw_stub(stack)
    try:
        call = stub.StreamEpisodes(iter([pb.StreamEpisodesRequest()]), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    finally:
        await channel.close()
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


# --- INVALID_ARGUMENT rows ---


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"episode_id": "../../etc/passwd"}, "invalid_episode"),
        ({"episode_id": "a" * 129}, "invalid_episode"),
        ({"episode_id": "short"}, "invalid_episode"),
        ({"policy_checkpoint_id": "ckpt/../../x"}, "invalid_episode"),
        ({"runtime_signal": RuntimeSignal.RUNTIME_SIGNAL_UNSPECIFIED}, "invalid_episode"),
        ({"metadata": {"screenshot": "data:image/png;base64,AAAA"}}, "invalid_episode"),
        ({"metadata": {"nested": {"prompt": "hello"}}}, "invalid_episode"),
        ({"reward_contract_digest": "sha256:" + "0" * 64}, "contract_mismatch"),
        ({"task_id": "another.task.entirely"}, "contract_mismatch"),
        ({"environment_id": "another.environment.x"}, "contract_mismatch"),
        ({"oracle_identity": {}}, "identity_missing"),
        ({"oracle_identity": {"pid": "patient-x-0001"}}, "identity_mismatch"),
        ({"oracle_identity": {"patient_id": "p-1", "extra": "x"}}, "identity_mismatch"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, dict) else v,
)
async def test_invalid_argument_rows(stack: RunningStack, change: dict, reason: str) -> None:
    fields = {"oracle_identity": {"patient_id": "patient-invalid-0001"}, **change}
    episode_id = fields.pop("episode_id", "episode.invalid.0001")
    request = pb.ScoreEpisodeRequest(descriptor=descriptor(stack.digest, episode_id, **fields))
    code, got, _ = await wire_error(stack, "ScoreEpisode", request)
    assert (code, got) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    # Nothing was stored for the refused episode.
    assert count_receipts(stack.app.store) == 0


async def test_identity_conflict_with_registration(stack: RunningStack) -> None:
    await stack.client.begin(
        "episode.conflict.0001", stack.digest, {"patient_id": "patient-a-0001"}
    )
    request = pb.ScoreEpisodeRequest(
        descriptor=descriptor(
            stack.digest, "episode.conflict.0001", oracle_identity={"patient_id": "patient-b-0002"}
        )
    )
    code, reason, _ = await wire_error(stack, "ScoreEpisode", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "identity_conflict")


async def test_policy_update_regressed(stack: RunningStack) -> None:
    first = descriptor(
        stack.digest,
        "episode.ledger.0001",
        update=10,
        oracle_identity={"patient_id": "patient-ledger-0001"},
    )
    await stack.client.score(first)
    # Below the default window (10 less the default lag of 2: 8 is the lowest accepted).
    late = descriptor(
        stack.digest,
        "episode.ledger.0002",
        update=7,
        oracle_identity={"patient_id": "patient-ledger-0002"},
    )
    code, reason, window = await wire_error(
        stack, "ScoreEpisode", pb.ScoreEpisodeRequest(descriptor=late)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "policy_update_regressed")
    assert window == {"highest": "10", "max_policy_lag": "2", "lowest_accepted": "8"}
    assert stack.app.store.receipt_by_episode("episode.ledger.0002") is None


# --- ALREADY_EXISTS, FAILED_PRECONDITION, NOT_FOUND ---


async def test_duplicate_episode_carries_the_existing_receipt_id(stack: RunningStack) -> None:
    identity = {"patient_id": "patient-dupe-0001"}
    await stack.client.begin("episode.dupe.0001", stack.digest, identity)
    write_triage(stack.database, "patient-dupe-0001")
    first = await stack.client.score(descriptor(stack.digest, "episode.dupe.0001"))
    code, reason, meta = await wire_error(
        stack,
        "ScoreEpisode",
        pb.ScoreEpisodeRequest(descriptor=descriptor(stack.digest, "episode.dupe.0001")),
    )
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "duplicate_episode")
    assert meta["receipt_id"] == first.receipt.receipt_id
    again = await stack.client.get_receipt(receipt_id=meta["receipt_id"])
    assert again.receipt == first.receipt


async def test_begin_on_scored_episode_is_already_exists(stack: RunningStack) -> None:
    await stack.client.score(
        descriptor(
            stack.digest, "episode.scored.0001", oracle_identity={"patient_id": "p-scored-01"}
        )
    )
    request = pb.BeginEpisodeRequest(
        episode_id="episode.scored.0001",
        reward_contract_digest=stack.digest,
        oracle_identity={"patient_id": "p-scored-01"},
    )
    code, reason, meta = await wire_error(stack, "BeginEpisode", request)
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "duplicate_episode")
    assert meta["receipt_id"].startswith("rcpt.")


async def test_identity_busy(stack: RunningStack) -> None:
    await stack.client.begin("episode.busy.0001", stack.digest, {"patient_id": "patient-busy-01"})
    request = pb.BeginEpisodeRequest(
        episode_id="episode.busy.0002",
        reward_contract_digest=stack.digest,
        oracle_identity={"patient_id": "patient-busy-01"},
    )
    code, reason, _ = await wire_error(stack, "BeginEpisode", request)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "identity_busy")


@pytest.mark.parametrize(
    "request_message",
    [
        pb.GetReceiptRequest(receipt_id="rcpt.0000000000000000"),
        pb.GetReceiptRequest(episode_id="episode.never.0001"),
    ],
    ids=["by-receipt-id", "by-episode-id"],
)
async def test_unknown_receipt_not_found(stack: RunningStack, request_message: object) -> None:
    code, reason, _ = await wire_error(stack, "GetReceipt", request_message)
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")


@pytest.mark.parametrize(
    "request_message",
    [
        pb.GetReceiptRequest(receipt_id="../../../../etc/passwd"),
        pb.GetReceiptRequest(episode_id="x" * 200),
        pb.GetReceiptRequest(),
    ],
    ids=["path-like", "over-long", "empty"],
)
async def test_get_receipt_refuses_bad_ids(stack: RunningStack, request_message: object) -> None:
    code, _, _ = await wire_error(stack, "GetReceipt", request_message)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_begin_refuses_path_like_episode_id(stack: RunningStack) -> None:
    request = pb.BeginEpisodeRequest(
        episode_id="../../../tmp/x",
        reward_contract_digest=stack.digest,
        oracle_identity={"patient_id": "p-path-0001"},
    )
    code, reason, _ = await wire_error(stack, "BeginEpisode", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")


# --- GradeOpenAI ---


def grader_item(digest: str, episode_id: str, patient: str) -> pb.GradeOpenAIRequest:
    request = pb.GradeOpenAIRequest()
    json_format.ParseDict({"output_text": "done"}, request.sample)
    json_format.ParseDict(
        {
            "episode_id": episode_id,
            "policy_checkpoint_id": "policy_checkpoint_mockmed_0",
            "policy_update": 0,
            "reward_contract_digest": digest,
            "metadata": {"oracle_identity": {"patient_id": patient}},
        },
        request.item,
    )
    return request


async def test_grader_unscored_is_failed_precondition_and_does_not_burn_the_id(
    stack: RunningStack,
) -> None:
    # No BeginEpisode: no baseline, so the episode is RECONCILIATION_REQUIRED (unscored).
    request = grader_item(stack.digest, "episode.grade.0001", "patient-grade-0001")
    code, reason, meta = await wire_error(stack, "GradeOpenAI", request)
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "unscored")
    assert meta["reward_outcome"] == "REWARD_OUTCOME_RECONCILIATION_REQUIRED"
    assert stack.app.store.receipt_by_episode("episode.grade.0001") is None
    # The id is still usable: begin, write, grade again -> 1.0.
    await stack.client.begin(
        "episode.grade.0001", stack.digest, {"patient_id": "patient-grade-0001"}
    )
    write_triage(stack.database, "patient-grade-0001")
    score = await stack.client.grade_openai(
        json_format.MessageToDict(request.sample), json_format.MessageToDict(request.item)
    )
    assert score == 1.0


async def test_grader_wrong_effect_scores_zero(stack: RunningStack) -> None:
    await stack.client.begin(
        "episode.grade.0002", stack.digest, {"patient_id": "patient-grade-0002"}
    )
    request = grader_item(stack.digest, "episode.grade.0002", "patient-grade-0002")
    score = await stack.client.grade_openai(
        json_format.MessageToDict(request.sample), json_format.MessageToDict(request.item)
    )
    assert score == 0.0


# --- Batch and stream share one code path ---


async def test_score_episodes_answers_each_in_order(stack: RunningStack) -> None:
    patients = [f"patient-batch-{i:04d}" for i in range(6)]
    for i, patient in enumerate(patients):
        await stack.client.begin(f"episode.batch.{i:04d}", stack.digest, {"patient_id": patient})
    write_triage(stack.database, patients[0])
    descriptors = [descriptor(stack.digest, f"episode.batch.{i:04d}") for i in range(6)]
    descriptors.append(descriptor(stack.digest, "bad/id"))
    results = await stack.client.score_many(descriptors)
    assert len(results) == 7
    assert results[0].receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    for result in results[1:6]:
        assert result.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    assert getattr(results[6], "reason", None) == "invalid_episode"


async def test_stream_episodes_pipelines(stack: RunningStack) -> None:
    for i in range(5):
        await stack.client.begin(
            f"episode.stream.{i:04d}", stack.digest, {"patient_id": f"patient-stream-{i:04d}"}
        )
        write_triage(stack.database, f"patient-stream-{i:04d}")
    descriptors = [descriptor(stack.digest, f"episode.stream.{i:04d}") for i in range(5)]
    descriptors.append(descriptor(stack.digest, "episode.stream.0000"))
    results = [r async for r in stack.client.stream(descriptors)]
    assert [r.receipt.episode_id for r in results[:5]] == [d.episode_id for d in descriptors[:5]]
    assert all(
        r.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED for r in results[:5]
    )
    assert getattr(results[5], "reason", None) == "duplicate_episode"


async def test_receipts_parse_and_hold_no_record_contents(stack: RunningStack) -> None:
    await stack.client.begin(
        "episode.privacy.0001", stack.digest, {"patient_id": "patient-privacy-01"}
    )
    write_triage(stack.database, "patient-privacy-01", note="secret follow-up note 12345")
    got = await stack.client.score(descriptor(stack.digest, "episode.privacy.0001"))
    assert b"secret follow-up" not in got.envelope.payload
    assert b"patient-privacy-01" not in got.envelope.payload
    assert RewardEvidenceReceipt.FromString(got.envelope.payload) == got.receipt


async def test_sixty_four_concurrent_calls_one_episode_one_receipt(stack: RunningStack) -> None:
    await stack.client.begin("episode.race.0001", stack.digest, {"patient_id": "patient-race-0001"})
    write_triage(stack.database, "patient-race-0001")
    desc = descriptor(stack.digest, "episode.race.0001")
    results = await asyncio.gather(
        *(stack.client.score(desc) for _ in range(64)), return_exceptions=True
    )
    receipts = [r for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(receipts) == 1
    assert len(errors) == 63
    assert {getattr(e, "reason", None) for e in errors} == {"duplicate_episode"}
    assert {e.metadata["receipt_id"] for e in errors} == {receipts[0].receipt.receipt_id}
    assert count_receipts(stack.app.store) == 1
