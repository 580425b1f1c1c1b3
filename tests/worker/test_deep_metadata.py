"""Metadata nesting is bounded on every face (R-MSG-9): a real worker serving gRPC and HTTP on
port 0 refuses metadata deeper than MAX_METADATA_DEPTH as ``invalid_episode``, at any depth,
with a bounded log (finding 7: ~500 deep used to answer HTTP 500 with a two-thousand-line
traceback per request, 5,000 deep a 400 and gRPC past protobuf's limit ``invalid_argument``).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from support.http_worker import HttpWorker, http_worker
from support.mockmed_episodes import CHECKPOINT, descriptor, write_triage

from rewardseal.core.validation import MAX_METADATA_DEPTH
from rewardseal.rpc import status as rpc_status
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_worker.http.guards import nests_deeper_than

TOO_DEEP = [MAX_METADATA_DEPTH + 1, MAX_METADATA_DEPTH + 2, 500, 5_000, 100_000]
MOST_LOG_RECORDS = 2
"""Log records one refused request may cost (none of them a traceback)."""
SCORE = "/rewardseal.v1.RewardWorkerService/ScoreEpisode"
GRADE = "/rewardseal.v1.RewardWorkerService/GradeOpenAI"


@pytest.fixture(scope="module")
def worker(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpWorker]:
    with http_worker(seeded_template, tmp_path_factory.mktemp("deep") / "data") as running:
        yield running


def nested_json(depth: int) -> str:
    """An object ``depth`` levels deep (the outermost is level 1), as JSON text."""
    return '{"k":' * depth + "1" + "}" * depth


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def nested_struct(depth: int) -> bytes:
    """The wire bytes of a Struct ``depth`` levels deep, built without protobuf (which refuses
    to build what it could not parse): ``{"k": {"k": ... 1}}``."""
    value = b"\x11" + struct.pack("<d", 1.0)  # Value.number_value
    level = b""
    for _ in range(depth):
        level = _field(1, b"\x0a\x01k" + _field(2, value))  # Struct.fields entry
        value = _field(5, level)  # Value.struct_value
    return level


def score_request(worker: HttpWorker, episode: str, depth: int) -> bytes:
    base = descriptor(worker.digest, episode, oracle_identity={"patient_id": "patient-deep-0001"})
    metadata = EpisodeDescriptor.DESCRIPTOR.fields_by_name["metadata"].number
    return _field(1, base.SerializeToString() + _field(metadata, nested_struct(depth)))


def grpc_refusal(worker: HttpWorker, method: str, request: bytes) -> tuple[Any, str]:
    """(code, ErrorInfo.reason) of a raw call expected to fail."""
    with grpc.insecure_channel(worker.target) as channel:
        call = channel.unary_unary(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(request, metadata=(("authorization", f"Bearer {worker.token}"),), timeout=20)
    refusal = rpc_status.from_rpc_error(caught.value)
    return caught.value.code(), refusal.reason


def http_post(worker: HttpWorker, path: str, text: str) -> httpx.Response:
    headers = {**worker.auth, "content-type": "application/json"}
    return httpx.post(f"{worker.url}{path}", content=text, headers=headers, timeout=30)


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    records = [r for r in caplog.records if not r.name.startswith("httpx")]
    assert len(records) <= MOST_LOG_RECORDS, [r.getMessage()[:200] for r in records]
    assert not any(r.exc_info or r.exc_text for r in records), "no traceback is logged"


def reward_body(worker: HttpWorker, episode: str, metadata: str) -> str:
    return (
        f'{{"episode_id":"{episode}","policy_checkpoint_id":"{CHECKPOINT}","policy_update":0,'
        f'"reward_contract_digest":"{worker.digest}",'
        f'"oracle_identity":{{"patient_id":"patient-deep-0001"}},"metadata":{metadata}}}'
    )


@pytest.mark.parametrize("depth", TOO_DEEP)
def test_deeply_nested_metadata_is_422_not_500(
    worker: HttpWorker, caplog: pytest.LogCaptureFixture, depth: int
) -> None:
    episode = f"episode.deep.{depth:06d}"
    caplog.set_level(logging.INFO)
    answer = http_post(worker, "/v1/rewards", reward_body(worker, episode, nested_json(depth)))
    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["error"] == "invalid_episode"
    assert len(answer.text) < 600
    # The grader's item carries the same metadata one level further in.
    item = reward_body(worker, episode, nested_json(depth))
    answer = http_post(worker, "/v1/graders/openai", f'{{"sample":{{}},"item":{item}}}')
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_episode"), answer.text
    # gRPC: the Struct is checked after parsing, or refused by the decoding guard past
    # protobuf's own limit; both invalid_episode, never invalid_argument or INTERNAL.
    code, reason = grpc_refusal(worker, SCORE, score_request(worker, episode, depth))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")
    item_field = pb.GradeOpenAIRequest.DESCRIPTOR.fields_by_name["item"].number
    grade = _field(item_field, nested_struct(depth + 1))
    code, reason = grpc_refusal(worker, GRADE, grade)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_episode")
    assert_quiet(caplog)


def test_metadata_at_the_bound_is_scored_on_both_faces(worker: HttpWorker) -> None:
    deepest = nested_json(MAX_METADATA_DEPTH)
    with worker.grpc() as client:
        for index, face in enumerate(("http", "grpc")):
            episode, patient = f"episode.deep.bound.{index}", f"patient-deep-bound-{index}"
            client.begin(episode, worker.digest, {"patient_id": patient})
            write_triage(worker.database, patient)
            if face == "http":
                text = reward_body(worker, episode, deepest).replace("patient-deep-0001", patient)
                answer = http_post(worker, "/v1/rewards", text)
                assert answer.status_code == 200, answer.text[:300]
                assert answer.json()["receipt"]["reward_outcome"] == "verified"
            else:
                scored = client.score(
                    descriptor(worker.digest, episode, metadata=json.loads(deepest))
                )
                assert scored.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED


@pytest.mark.parametrize(
    ("text", "limit", "deeper"),
    [
        (b'{"a":[1]}', 1, True),
        (b'{"a":[1]}', 2, False),
        (b'{"a":"[[[["}', 1, False),  # brackets in a string do not count
        (b'{"a":"\\"[[","b":1}', 1, False),  # nor after an escaped quote
        (b'{"a":"\\\\","b":[[1]]}', 2, True),  # an escaped backslash ends no string
        (b'"' + b'\\"' * 10_000, 1, False),  # unterminated: the parser's to refuse, quickly
        (b"[" * 100_000, 40, True),
        (b"[]" * 100_000, 1, False),
    ],
)
def test_the_depth_prescan_skips_strings(text: bytes, limit: int, deeper: bool) -> None:
    assert nests_deeper_than(text, limit) is deeper
