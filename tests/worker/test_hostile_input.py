"""Hostile input on a real worker (port 0) and a real control plane: oversized keys and values
in every map field are refused INVALID_ARGUMENT with their docs/spec.md §8 reason, and the error
quotes at most a short preview of them (issue 10: a 5 kB key used to come back
RESOURCE_EXHAUSTED, its echo outgrowing the gRPC trailer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from support.control import TRAINER, ControlStack, start_control, stop_control
from support.control import wire_error as control_wire_error
from support.mockmed_episodes import descriptor
from support.worker_store import count_receipts, open_episode
from worker.conftest import RunningStack
from worker.test_worker_contract import auth, raw_stub, wire_error

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import preview
from rewardseal.core.validation import MAX_IDENTITY_VALUE_LENGTH
from rewardseal.v1 import control_service_pb2 as control_pb
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

HUGE = 20_000
"""Characters in a hostile key or value: far over gRPC's 8 kB default trailer budget."""

SHORT_MESSAGE = 600
"""Longest error message a test accepts (a preview is 64 characters plus the sentence)."""

BIG_KEY = "k" * HUGE
BIG_VALUE = "v" * HUGE
PATIENT = "patient-hostile-0001"


def test_preview_cuts_and_states_the_length() -> None:
    assert preview("short") == "'short'"
    shown = preview("x" * HUGE)
    assert len(shown) < 100
    assert shown.endswith(f"({HUGE} characters)")
    assert preview("a.b", quoted=False) == "a.b"


async def wire_message(stack: RunningStack, method: str, request: object) -> tuple[Any, str, str]:
    """(code, ErrorInfo.reason, message) of a failing call, off the wire."""
    code, reason, metadata = await wire_error(stack, method, request)
    assert all(len(value) <= 256 for value in metadata.values())
    channel, stub = raw_stub(stack)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await getattr(stub, method)(request, metadata=auth(stack), timeout=20)
    finally:
        await channel.close()
    return code, reason, caught.value.details() or ""


def _descriptor(stack: RunningStack, episode: str, **fields: Any) -> Any:
    fields.setdefault("oracle_identity", {"patient_id": PATIENT})
    return descriptor(stack.digest, episode, **fields)


DESCRIPTOR_CASES = [
    pytest.param({"oracle_identity": {BIG_KEY: PATIENT}}, id="identity-key"),
    pytest.param({"oracle_identity": {"patient_id": BIG_VALUE}}, id="identity-value"),
    pytest.param(
        {"oracle_identity": {"patient_id": "p" * (MAX_IDENTITY_VALUE_LENGTH + 1)}},
        id="identity-value-257",
    ),
    pytest.param(
        {"oracle_identity": {f"k{i:03d}": "v" for i in range(200)}}, id="identity-many-keys"
    ),
    pytest.param({"metadata": {BIG_KEY: "x"}}, id="metadata-key"),
    pytest.param({"metadata": {"nested": {"deeper": {BIG_KEY: 1}}}}, id="metadata-nested-key"),
    pytest.param({"metadata": {"prompt": BIG_VALUE}}, id="metadata-forbidden-key-big-value"),
    pytest.param(
        {"oracle_identity": {}, "metadata": {"oracle_identity": {BIG_KEY: PATIENT}}},
        id="metadata-identity-key",
    ),
    pytest.param(
        {"oracle_identity": {}, "metadata": {"oracle_identity": {"patient_id": BIG_VALUE}}},
        id="metadata-identity-value",
    ),
]


@pytest.mark.parametrize("change", DESCRIPTOR_CASES)
async def test_score_refuses_hostile_maps_briefly(
    stack: RunningStack, change: dict[str, Any]
) -> None:
    request = pb.ScoreEpisodeRequest(
        descriptor=_descriptor(stack, "episode.hostile.0001", **change)
    )
    code, reason, message = await wire_message(stack, "ScoreEpisode", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")
    assert len(message) < SHORT_MESSAGE
    assert count_receipts(stack.app.store) == 0


async def test_big_metadata_value_under_an_allowed_key_is_not_echoed(stack: RunningStack) -> None:
    """A long free-form value is no error, but nothing of it comes back or is kept."""
    request = pb.ScoreEpisodeRequest(
        descriptor=_descriptor(stack, "episode.hostile.0002", metadata={"run": BIG_VALUE})
    )
    channel, stub = raw_stub(stack)
    try:
        answer = await stub.ScoreEpisode(request, metadata=auth(stack), timeout=20)
    finally:
        await channel.close()
    assert BIG_VALUE[:100].encode() not in answer.SerializeToString()


@pytest.mark.parametrize(
    "identity",
    [
        pytest.param({BIG_KEY: PATIENT}, id="key"),
        pytest.param({"patient_id": BIG_VALUE}, id="value"),
        pytest.param({"patient_id": "p" * (MAX_IDENTITY_VALUE_LENGTH + 1)}, id="value-257"),
        pytest.param({"patient_id": ""}, id="value-empty"),
        pytest.param({f"k{i:03d}": "v" for i in range(200)}, id="many-keys"),
    ],
)
async def test_begin_refuses_what_descriptors_refuse(
    stack: RunningStack, identity: dict[str, str]
) -> None:
    """BeginEpisode applies the identity limits of descriptors (it used to store any size)."""
    request = pb.BeginEpisodeRequest(
        episode_id="episode.hostile.0003",
        reward_contract_digest=stack.digest,
        oracle_identity=identity,
    )
    code, reason, message = await wire_message(stack, "BeginEpisode", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")
    assert len(message) < SHORT_MESSAGE
    assert open_episode(stack.app.store, stack.digest, "episode.hostile.0003") is None


async def test_begin_accepts_the_longest_allowed_value(stack: RunningStack) -> None:
    longest = "p" * MAX_IDENTITY_VALUE_LENGTH
    await stack.client.begin("episode.hostile.0004", stack.digest, {"patient_id": longest})
    assert open_episode(stack.app.store, stack.digest, "episode.hostile.0004") is not None


async def test_batch_and_stream_results_carry_short_errors(stack: RunningStack) -> None:
    hostile = [
        _descriptor(stack, f"episode.hostile.1{index:03d}", **param.values[0])
        for index, param in enumerate(DESCRIPTOR_CASES)
    ]
    channel, stub = raw_stub(stack)
    try:
        batch = await stub.ScoreEpisodes(
            pb.ScoreEpisodesRequest(descriptors=hostile), metadata=auth(stack), timeout=20
        )
        stream = stub.StreamEpisodes(
            iter([pb.StreamEpisodesRequest(descriptor=d) for d in hostile]),
            metadata=auth(stack),
            timeout=20,
        )
        streamed = [answer.result async for answer in stream]
    finally:
        await channel.close()
    for result in [*batch.results, *streamed]:
        assert result.WhichOneof("result") == "error", result.episode_id
        assert result.error.reason == "invalid_episode"
        assert result.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert len(result.error.message) < SHORT_MESSAGE
    assert count_receipts(stack.app.store) == 0


def _grader_item(stack: RunningStack, **fields: Any) -> Struct:
    item: dict[str, Any] = json_format.MessageToDict(
        _descriptor(stack, "episode.hostile.0005"), preserving_proto_field_name=True
    )
    item.update(fields)
    struct = Struct()
    struct.update(item)
    return struct


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"oracle_identity": {BIG_KEY: PATIENT}}, id="identity-key"),
        pytest.param({"oracle_identity": {"patient_id": BIG_VALUE}}, id="identity-value"),
        pytest.param({"metadata": {BIG_KEY: 1}}, id="metadata-key"),
        pytest.param({"policy_update": BIG_VALUE}, id="unparsable-field"),
        pytest.param({"runtime_signal": BIG_VALUE}, id="unparsable-enum"),
    ],
)
async def test_grader_refuses_hostile_items_briefly(
    stack: RunningStack, fields: dict[str, Any]
) -> None:
    request = pb.GradeOpenAIRequest(item=_grader_item(stack, **fields))
    code, reason, message = await wire_message(stack, "GradeOpenAI", request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")
    assert len(message) < SHORT_MESSAGE


# --- the control plane ---


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    running = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    yield running
    await stop_control(running)


async def test_control_refuses_a_contract_with_a_huge_identity_key(control: ControlStack) -> None:
    contract = mockmed_contract()
    contract.oracle.identity_keys.append(BIG_KEY)
    request = control_pb.RegisterContractRequest(
        contract=contract, reward_contract_digest=contract_digest(contract)
    )
    code, reason, _, message = await control_wire_error(
        control, "RegisterContract", request, metadata=TRAINER
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    assert len(message) < SHORT_MESSAGE


async def test_control_refuses_a_huge_payload_type_briefly(control: ControlStack) -> None:
    envelope = SignedEnvelope(payload_type=BIG_VALUE, payload=b"x")
    answer = await control.stub().RecordReceipts(
        control_pb.RecordReceiptsRequest(receipts=[envelope]), metadata=TRAINER, timeout=20
    )
    (result,) = answer.results
    assert result.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert len(result.error.message) < SHORT_MESSAGE
