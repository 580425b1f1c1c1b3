"""Bad input: random bytes and random well-typed descriptors at every worker RPC (docs/spec.md §8).

One real worker process serves the whole module. Every answer must be OK or one of the refusals
the error model names (never INTERNAL, UNKNOWN or UNAVAILABLE), the process must stay up, and a
refused call must leave the receipt store exactly as it was.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.control import TRAINER, start_control, stop_control
from support.worker_process import WorkerProcess, worker_process

from rewardseal.core.certificates import MAX_POLICY_UPDATE
from rewardseal.core.validation import FORBIDDEN_METADATA_KEYS
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_kit.mockmed import IDENTITY_KEY
from rewardseal_worker.server import SERVICE_NAME

ALLOWED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)
ALLOWED_VALUES = frozenset(code.value[0] for code in ALLOWED)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    # The one function-scoped fixture is the channel, which every example may share.
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
UNARY = (
    "Health",
    "BeginEpisode",
    "BeginEpisodes",
    "ScoreEpisode",
    "ScoreEpisodes",
    "GetReceipt",
    "GradeOpenAI",
)
STREAM = "StreamEpisodes"
CALL_TIMEOUT = 20.0


# --------------------------------------------------------------------------------------------
# The worker under fire and what its store holds
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker(
    seeded_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One worker process (SQLite store) over a private copy of the seeded data dir."""
    root = tmp_path_factory.mktemp("fuzz")
    data_dir = root / "data"
    shutil.copytree(seeded_template, data_dir)
    with worker_process(data_dir, root / "ready.json") as running:
        yield running


@pytest.fixture
async def channel(worker: WorkerProcess) -> AsyncIterator[grpc.aio.Channel]:
    """One channel to the worker for all the examples of a test."""
    async with grpc.aio.insecure_channel(worker.target) as opened:
        yield opened


def store_state(worker: WorkerProcess) -> tuple[Any, ...]:
    """Everything a call could store: receipts, credits, open episodes, outbox, the ledger."""
    path = Path(worker.banner["data_dir"]) / "worker.sqlite"
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as conn:
        counts = conn.execute(
            "SELECT (SELECT COUNT(*) FROM receipts), (SELECT COUNT(*) FROM credited_records),"
            " (SELECT COUNT(*) FROM open_episodes), (SELECT COUNT(*) FROM outbox)"
        ).fetchone()
        ledger = conn.execute(
            "SELECT contract_digest, highest_update FROM policy_ledger ORDER BY 1"
        ).fetchall()
    return (*counts, tuple(ledger))


CREDENTIALS = st.sampled_from(["token", "token", "wrong", "missing", "scheme"])
"""What a call presents: the worker's token (twice as likely), a wrong one, none, or the
token under another scheme."""


def auth(worker: WorkerProcess, credential: str = "token") -> tuple[tuple[str, str], ...]:
    header = {
        "token": f"Bearer {worker.token}",
        "wrong": "Bearer wrong-token-0123456789abcdef",
        "scheme": f"Basic {worker.token}",
    }.get(credential)
    return () if header is None else (("authorization", header),)


def assert_refusal(error: grpc.aio.AioRpcError, what: str) -> None:
    assert error.code() in ALLOWED, f"{what}: {error.code()} {error.details()!r}"


async def assert_still_serving(worker: WorkerProcess, channel: grpc.aio.Channel) -> None:
    """The process is alive and both health services answer."""
    assert worker.proc.poll() is None, worker.log_text()
    standard = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT
    )
    assert standard.status == health_pb2.HealthCheckResponse.SERVING
    ours = channel.unary_unary(
        f"/{SERVICE_NAME}/Health",
        request_serializer=pb.HealthRequest.SerializeToString,
        response_deserializer=pb.HealthResponse.FromString,
    )
    answer = await ours(pb.HealthRequest(), timeout=CALL_TIMEOUT)
    assert answer.reward_contract_digest == worker.digest


# --------------------------------------------------------------------------------------------
# Raw bytes
# --------------------------------------------------------------------------------------------


def _valid_request(method: str, digest: str) -> bytes:
    descriptor = EpisodeDescriptor(
        episode_id="episode.fuzz.seed.0001",
        policy_checkpoint_id="policy_checkpoint_fuzz_0",
        reward_contract_digest=digest,
        oracle_identity={IDENTITY_KEY: "patient-fuzz-seed"},
    )
    begin = pb.BeginEpisodeRequest(
        episode_id=descriptor.episode_id,
        reward_contract_digest=digest,
        oracle_identity=dict(descriptor.oracle_identity),
    )
    message: Any = {
        "Health": pb.HealthRequest(),
        "BeginEpisode": begin,
        "BeginEpisodes": pb.BeginEpisodesRequest(items=[begin, begin]),
        "ScoreEpisode": pb.ScoreEpisodeRequest(descriptor=descriptor),
        "ScoreEpisodes": pb.ScoreEpisodesRequest(descriptors=[descriptor, descriptor]),
        "StreamEpisodes": pb.StreamEpisodesRequest(descriptor=descriptor),
        "GetReceipt": pb.GetReceiptRequest(episode_id=descriptor.episode_id),
        "GradeOpenAI": pb.GradeOpenAIRequest(),
    }[method]
    if method == "GradeOpenAI":
        json_format.ParseDict(json_format.MessageToDict(descriptor), message.item)
    data: bytes = message.SerializeToString()
    return data


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """A valid request, then bit flips, truncation, splices and appended junk."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 6))):
        if not data:
            break
        where = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        if action == "flip":
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            data[where] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[where:]
        else:
            data[where:where] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data) + draw(st.binary(max_size=8))


def payloads(method: str, digest: str) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=1024), mutated(_valid_request(method, digest)))


async def _raw_unary(
    channel: grpc.aio.Channel, method: str, payload: bytes, metadata: Any
) -> grpc.aio.AioRpcError | None:
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        f"/{SERVICE_NAME}/{method}", request_serializer=None, response_deserializer=None
    )
    try:
        await call(payload, metadata=metadata, timeout=CALL_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        return error
    return None


async def _raw_stream(
    channel: grpc.aio.Channel, payloads: list[bytes], authorized: bool, metadata: Any
) -> tuple[grpc.aio.AioRpcError | None, list[pb.StreamEpisodesResponse]]:
    """Send ``payloads`` in lock step: each answer (or the end of the call) before the next.

    A grpc.aio client that writes after the server ended the call reports a local INTERNAL
    ("Internal error from Core") instead of the server's status; lock step never does.
    """
    call: grpc.aio.StreamStreamCall[bytes, bytes] = channel.stream_stream(
        f"/{SERVICE_NAME}/{STREAM}", request_serializer=None, response_deserializer=None
    )(metadata=metadata, timeout=CALL_TIMEOUT)
    answers: list[pb.StreamEpisodesResponse] = []
    try:
        if not authorized:
            # Refused before any message is read: writing would only race the refusal.
            raw = await call.read()
            raise AssertionError(f"an unauthenticated stream was answered: {raw!r}")
        for payload in payloads:
            await call.write(payload)
            raw = await call.read()
            if raw is grpc.aio.EOF:
                break
            answers.append(pb.StreamEpisodesResponse.FromString(cast(bytes, raw)))
        else:
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
        code = await call.code()
        if code != grpc.StatusCode.OK:
            raise grpc.aio.AioRpcError(
                code,
                await call.initial_metadata(),
                await call.trailing_metadata(),
                await call.details(),
            )
    except grpc.aio.AioRpcError as error:
        return error, answers
    return None, answers


@pytest.mark.parametrize("method", UNARY)
@FUZZ  # 150 per method
@given(data=st.data(), credential=CREDENTIALS)
async def test_random_bytes_to_every_unary_rpc(
    worker: WorkerProcess,
    channel: grpc.aio.Channel,
    method: str,
    data: st.DataObject,
    credential: str,
) -> None:
    payload = data.draw(payloads(method, worker.digest), label="payload")
    before = store_state(worker)
    error = await _raw_unary(channel, method, payload, auth(worker, credential))
    if credential != "token" and method != "Health":
        assert error is not None
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    if error is not None:
        assert_refusal(error, method)
        assert store_state(worker) == before, f"{method} was refused but stored something"
    await assert_still_serving(worker, channel)


@FUZZ
@given(data=st.data(), credential=CREDENTIALS)
async def test_random_bytes_to_the_stream(
    worker: WorkerProcess, channel: grpc.aio.Channel, data: st.DataObject, credential: str
) -> None:
    chunks = data.draw(st.lists(payloads(STREAM, worker.digest), min_size=1, max_size=4))
    before = store_state(worker)
    authorized = credential == "token"
    error, answers = await _raw_stream(channel, chunks, authorized, auth(worker, credential))
    if not authorized:
        assert error is not None
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    if error is not None:
        assert_refusal(error, STREAM)
    # A mutated tag may turn a descriptor into a begin: its answer is then a begin's.
    entries = [a.begin if a.HasField("begin") else a.result for a in answers]
    for entry in entries:
        if entry.HasField("error"):
            assert entry.error.code in ALLOWED_VALUES, entry.error
    if all(entry.HasField("error") for entry in entries):
        assert store_state(worker) == before, "a refused stream stored something"
    await assert_still_serving(worker, channel)


# --------------------------------------------------------------------------------------------
# Well-typed but wrong descriptors
# --------------------------------------------------------------------------------------------

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
VALID_IDS = st.builds(
    str.__add__,
    st.sampled_from(_ALNUM),
    st.text(alphabet=_ALNUM + "._:-", min_size=7, max_size=40),
)
ODD_IDS = st.sampled_from(
    [
        "",
        "short",
        "../../../../etc/passwd",
        "/etc/passwd",
        "episode/../../worker.sqlite",
        "..\\..\\windows\\system32",
        "episode.%2e%2e%2f.0001",
        "épisode-ünïcode-0001",
        "episode\x00nul.0001",
        "episode.\n.0001",
        " episode.0001",
        "episode.0001 ",
        "a" * 128,
        "a" * 129,
        "a" * 5000,
        "-leading-dash-0001",
        "episode.fuzz.seed.0001",
    ]
)
IDS = st.one_of(
    VALID_IDS,
    ODD_IDS,
    st.text(max_size=40),
    st.builds(str.__mul__, st.sampled_from(["a", "é", ".", "ab/"]), st.integers(129, 3000)),
    VALID_IDS.map(lambda value: f"{value}/x"),
)
POLICY_UPDATES = st.one_of(
    st.integers(0, 3),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-1, MAX_POLICY_UPDATE, MAX_POLICY_UPDATE + 1, 2**63 - 1, -(2**63)]),
)
SIGNALS = st.one_of(
    st.none(),
    st.sampled_from(RuntimeSignal.values()),
    st.integers(-(2**31), 2**31 - 1),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers(-(2**70), 2**70) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.one_of(st.sampled_from(sorted(FORBIDDEN_METADATA_KEYS)), st.text(max_size=12)),
            inner,
            max_size=3,
        )
    ),
    max_leaves=5,
)
METADATA_KEYS = st.one_of(
    st.sampled_from(sorted(FORBIDDEN_METADATA_KEYS)),
    st.sampled_from(["oracle_identity", "Prompt", "NOTE", "Screenshot", "run", "step"]),
    st.text(max_size=20),
)


def identities() -> st.SearchStrategy[dict[str, str]]:
    patient = st.one_of(
        st.integers(0, 10**6).map(lambda n: f"patient-fuzz-{n:06d}"),
        st.text(max_size=300),
    )
    return st.one_of(
        st.just({}),
        st.fixed_dictionaries({IDENTITY_KEY: patient}),
        st.dictionaries(
            st.one_of(st.just(IDENTITY_KEY), st.text(max_size=70)), patient, max_size=3
        ),
    )


@st.composite
def descriptor_fields(draw: st.DrawFn, digest: str) -> dict[str, Any]:
    """Every EpisodeDescriptor field, drawn from right and wrong values alike."""
    fields: dict[str, Any] = {
        "episode_id": draw(IDS),
        "policy_checkpoint_id": draw(st.one_of(st.just("policy_checkpoint_fuzz_0"), IDS)),
        "policy_update": draw(POLICY_UPDATES),
        "reward_contract_digest": draw(
            st.one_of(
                st.just(digest),
                st.binary(min_size=32, max_size=32).map(lambda raw: f"sha256:{raw.hex()}"),
                st.sampled_from([digest.upper(), digest + "0", digest[:-1], "", "sha256:"]),
                st.text(max_size=80),
            )
        ),
        "oracle_identity": draw(identities()),
        "runtime_signal": draw(SIGNALS),
        "metadata": draw(
            st.one_of(
                st.none(),
                st.dictionaries(METADATA_KEYS, JSON, max_size=4),
                st.fixed_dictionaries({"oracle_identity": st.one_of(JSON, identities())}),
            )
        ),
    }
    for name, right in (
        ("task_id", "mockmed.task.create-triage-encounter"),
        ("environment_id", "mockmed.environment.synthetic-emr"),
    ):
        fields[name] = draw(st.one_of(st.none(), st.just(right), IDS))
    return fields


def to_descriptor(fields: dict[str, Any]) -> EpisodeDescriptor:
    descriptor = EpisodeDescriptor(
        episode_id=fields["episode_id"],
        policy_checkpoint_id=fields["policy_checkpoint_id"],
        policy_update=fields["policy_update"],
        reward_contract_digest=fields["reward_contract_digest"],
        oracle_identity=fields["oracle_identity"],
    )
    for name in ("task_id", "environment_id", "runtime_signal"):
        if fields[name] is not None:
            setattr(descriptor, name, fields[name])
    if fields["metadata"] is not None:
        descriptor.metadata.update(fields["metadata"])
    return descriptor


def to_grader_item(fields: dict[str, Any]) -> dict[str, Any]:
    """The descriptor as a grader item (a JSON object): absent fields left out."""
    return {k: v for k, v in fields.items() if v is not None}


DESCRIPTOR_RPCS = (
    "BeginEpisode",
    "ScoreEpisode",
    "ScoreEpisodes",
    "StreamEpisodes",
    "GradeOpenAI",
    "GetReceipt",
)


def _stub_call(channel: grpc.aio.Channel, method: str, request_type: Any, answer: Any) -> Any:
    return channel.unary_unary(
        f"/{SERVICE_NAME}/{method}",
        request_serializer=request_type.SerializeToString,
        response_deserializer=answer.FromString,
    )


def _descriptor_request(method: str, batch: list[dict[str, Any]]) -> tuple[Message, type[Message]]:
    """The typed request of a unary ``method`` built from the drawn fields, and its answer type."""
    first = batch[0]
    if method == "BeginEpisode":
        begin = pb.BeginEpisodeRequest(
            episode_id=first["episode_id"],
            reward_contract_digest=first["reward_contract_digest"],
            oracle_identity=first["oracle_identity"],
        )
        return begin, pb.BeginEpisodeResponse
    if method == "ScoreEpisode":
        return pb.ScoreEpisodeRequest(descriptor=to_descriptor(first)), pb.ScoreEpisodeResponse
    if method == "ScoreEpisodes":
        descriptors = [to_descriptor(fields) for fields in batch]
        return pb.ScoreEpisodesRequest(descriptors=descriptors), pb.ScoreEpisodesResponse
    if method == "GradeOpenAI":
        grade = pb.GradeOpenAIRequest()
        grade.sample.update({"output_text": "fuzz"})
        grade.item.update(to_grader_item(first))
        return grade, pb.GradeOpenAIResponse
    assert method == "GetReceipt", method
    return pb.GetReceiptRequest(episode_id=first["episode_id"]), pb.GetReceiptResponse


STORED_WHEN_ANSWERED = {"BeginEpisode": 0, "ScoreEpisode": 1, "GradeOpenAI": 1, "GetReceipt": 0}
"""Receipts a unary call adds to the store when it is answered OK."""


async def _send_descriptors(
    worker: WorkerProcess, channel: grpc.aio.Channel, method: str, batch: list[dict[str, Any]]
) -> tuple[grpc.aio.AioRpcError | None, int, list[pb.EpisodeResult]]:
    """Send ``batch`` through ``method``; (call error, receipts expected to be stored, results)."""
    metadata = auth(worker)
    if method == STREAM:
        payloads = [
            pb.StreamEpisodesRequest(descriptor=to_descriptor(fields)).SerializeToString()
            for fields in batch
        ]
        error, answers = await _raw_stream(channel, payloads, True, metadata)
        results = [answer.result for answer in answers]
        return error, sum(r.HasField("envelope") for r in results), results
    request, answer_type = _descriptor_request(method, batch)
    call = _stub_call(channel, method, type(request), answer_type)
    try:
        answer = await call(request, metadata=metadata, timeout=CALL_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        return error, 0, []
    if isinstance(answer, pb.ScoreEpisodesResponse):
        results = list(answer.results)
        assert len(results) == len(batch)
        return None, sum(r.HasField("envelope") for r in results), results
    return None, STORED_WHEN_ANSWERED[method], []


@FUZZ
@given(data=st.data(), method=st.sampled_from(DESCRIPTOR_RPCS))
async def test_random_descriptors_at_every_rpc(
    worker: WorkerProcess, channel: grpc.aio.Channel, data: st.DataObject, method: str
) -> None:
    size = 1 if method in ("BeginEpisode", "ScoreEpisode", "GradeOpenAI", "GetReceipt") else 3
    batch = data.draw(st.lists(descriptor_fields(worker.digest), min_size=1, max_size=size))
    before = store_state(worker)
    error, stored, results = await _send_descriptors(worker, channel, method, batch)
    after = store_state(worker)
    if error is not None:
        assert_refusal(error, method)
    for result in results:
        if result.HasField("error"):
            assert result.error.code in ALLOWED_VALUES, (method, result.error)
    if error is not None and not any(r.HasField("envelope") for r in results):
        assert after == before, f"{method} was refused but stored something"
    else:
        # Each answered receipt is stored once; nothing else is.
        assert after[0] - before[0] == stored, (method, before, after)
    await assert_still_serving(worker, channel)


DESCRIPTOR_FIELD_NAMES = sorted(f.name for f in EpisodeDescriptor.DESCRIPTOR.fields)


@st.composite
def grader_items(draw: st.DrawFn, digest: str) -> dict[str, Any]:
    """Grader items: descriptor-shaped, then with fields of the wrong JSON type or unknown."""
    item = to_grader_item(draw(descriptor_fields(digest)))
    wrong = draw(
        st.dictionaries(
            st.one_of(st.sampled_from(DESCRIPTOR_FIELD_NAMES), st.text(max_size=12)),
            JSON,
            max_size=3,
        )
    )
    item.update(wrong)
    return item


@FUZZ
@given(data=st.data())
async def test_random_grader_items(
    worker: WorkerProcess, channel: grpc.aio.Channel, data: st.DataObject
) -> None:
    item = data.draw(grader_items(worker.digest), label="item")
    sample = data.draw(st.dictionaries(st.text(max_size=12), JSON, max_size=3), label="sample")
    before = store_state(worker)
    call = _stub_call(channel, "GradeOpenAI", pb.GradeOpenAIRequest, pb.GradeOpenAIResponse)
    request = pb.GradeOpenAIRequest()
    request.item.update(item)
    request.sample.update(sample)
    try:
        await call(request, metadata=auth(worker), timeout=CALL_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        assert_refusal(error, "GradeOpenAI")
        assert store_state(worker) == before, "GradeOpenAI was refused but stored something"
    else:
        assert store_state(worker)[0] == before[0] + 1
    await assert_still_serving(worker, channel)


# --------------------------------------------------------------------------------------------
# Undecodable requests, on the wire: INVALID_ARGUMENT with ErrorInfo, on both servers
# --------------------------------------------------------------------------------------------

CORRUPT = b"\x0a\xff"
"""A length-delimited field that claims 255 bytes and carries none: no message parses it."""
CONTROL_SERVICE = "rewardseal.v1.ControlPlaneService"


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    details = dict(error.trailing_metadata() or ()).get(rpc_status.GRPC_DETAILS_METADATA_KEY)
    assert details is not None, "every error carries google.rpc.Status details"
    status = status_pb2.Status.FromString(details)
    assert status.code == error.code().value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info


async def corrupt_call(
    channel: grpc.aio.Channel, method: str, metadata: Any, *, streaming: bool
) -> grpc.aio.AioRpcError:
    """Send one corrupt request message to ``method``; return the error it is answered with."""
    try:
        if streaming:  # one request, a stream of answers
            stream = channel.unary_stream(
                method, request_serializer=None, response_deserializer=None
            )
            async for _ in stream(CORRUPT, metadata=metadata, timeout=CALL_TIMEOUT):
                pass
        else:
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            await call(CORRUPT, metadata=metadata, timeout=CALL_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError(f"{method} answered a corrupt request")


def assert_undecodable_refused(error: grpc.aio.AioRpcError | None) -> None:
    """INVALID_ARGUMENT (never UNKNOWN) with rewardseal's ErrorInfo, the bytes not echoed."""
    assert error is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    info = error_info(error)
    assert (info.domain, info.reason) == ("rewardseal", "invalid_argument")
    assert "\\x" not in (error.details() or "")


@pytest.mark.parametrize("method", [*UNARY, STREAM])
async def test_worker_refuses_undecodable_requests_invalid_argument(
    worker: WorkerProcess, channel: grpc.aio.Channel, method: str
) -> None:
    if method == STREAM:
        error, answers = await _raw_stream(channel, [CORRUPT], True, auth(worker))
        assert answers == []
    else:
        path = f"/{SERVICE_NAME}/{method}"
        error = await corrupt_call(channel, path, auth(worker), streaming=False)
    assert_undecodable_refused(error)


async def test_each_call_is_judged_on_its_own_bytes_and_token_as_calls_alternate(
    worker: WorkerProcess, channel: grpc.aio.Channel
) -> None:
    # The interceptor builds a method's guarded handler once and reuses it: the calls after the
    # first must still each be decoded, authenticated and refused or answered on their own.
    for method, metadata in (("Health", ()), ("GetReceipt", auth(worker))):
        path = f"/{SERVICE_NAME}/{method}"
        call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
        request = (
            b""
            if method == "Health"
            else pb.GetReceiptRequest(episode_id="episode.never-begun").SerializeToString()
        )
        for _ in range(2):
            if method == "Health":
                assert pb.HealthResponse.FromString(await call(request, timeout=CALL_TIMEOUT))
            else:
                with pytest.raises(grpc.aio.AioRpcError) as missing:
                    await call(request, metadata=metadata, timeout=CALL_TIMEOUT)
                assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            error = await corrupt_call(channel, path, metadata, streaming=False)
            assert_undecodable_refused(error)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await channel.unary_unary(
            f"/{SERVICE_NAME}/GetReceipt", request_serializer=None, response_deserializer=None
        )(b"", metadata=auth(worker, "wrong"), timeout=CALL_TIMEOUT)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("method", "streaming"), [("GetRevocationList", False), ("WatchRevocations", True)]
)
async def test_control_refuses_undecodable_requests_invalid_argument(
    tmp_path: Path, method: str, streaming: bool
) -> None:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.db'}")
    try:
        async with grpc.aio.insecure_channel(stack.target) as control:
            path = f"/{CONTROL_SERVICE}/{method}"
            assert_undecodable_refused(
                await corrupt_call(control, path, TRAINER, streaming=streaming)
            )
    finally:
        await stop_control(stack)
