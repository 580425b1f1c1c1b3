"""The Python clients (sync WorkerClient, asyncio AsyncWorkerClient) against a real worker.

Happy paths run on both clients through one adapter, so the two transports cannot drift. Retry,
lost-answer and deadline behaviour is driven by a second ``grpc.aio`` server that serves the same
``Scorer`` behind a counting interceptor which can refuse, lose or delay answers on cue: the
number of attempts is counted, never inferred from timing.

The sync client's calls run in a thread (``asyncio.to_thread``): the worker serves on this test's
event loop, which a blocking call made on the loop would starve.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from support.mockmed_episodes import CHECKPOINT, descriptor, write_triage
from support.worker_store import count_receipts
from worker.conftest import RunningStack

from rewardseal.core.errors import (
    DuplicateEpisode,
    InvalidEpisode,
    NotFound,
    RewardSealError,
    SignatureError,
    Unavailable,
    Unscored,
)
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import (
    AsyncWorkerClient,
    VerifiedReceipt,
    WorkerClient,
    make_descriptor,
)
from rewardseal.v1 import worker_service_pb2_grpc as pb_grpc
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_server.auth import BearerAuthInterceptor
from rewardseal_worker.server import HEALTH_RPC, SERVICE_NAME
from rewardseal_worker.service import RewardWorkerServicer

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
SCORE = f"/{SERVICE_NAME}/ScoreEpisode"
GET_RECEIPT = f"/{SERVICE_NAME}/GetReceipt"
BEGIN = f"/{SERVICE_NAME}/BeginEpisode"


# --------------------------------------------------------------------------------------------
# One adapter over both clients
# --------------------------------------------------------------------------------------------


class Either:
    """Awaitable calls on a sync or an asyncio client (the sync one runs in a thread)."""

    def __init__(self, client: WorkerClient | AsyncWorkerClient) -> None:
        self.client = client
        self.sync = isinstance(client, WorkerClient)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.client, name)
        if self.sync:
            return await asyncio.to_thread(method, *args, **kwargs)
        return await method(*args, **kwargs)

    async def stream(self, descriptors: list[EpisodeDescriptor]) -> list[Any]:
        if isinstance(self.client, WorkerClient):
            sync_client = self.client
            return await asyncio.to_thread(lambda: list(sync_client.stream(descriptors)))
        return [result async for result in self.client.stream(descriptors)]

    async def close(self) -> None:
        if isinstance(self.client, WorkerClient):
            self.client.close()
        else:
            await self.client.close()


def make_client(
    kind: str,
    target: str,
    *,
    token: str,
    trust: TrustSet,
    timeout: float = 20.0,
    retries: int = 3,
    interceptor: Any = None,
) -> Either:
    """A ``kind`` ("sync" | "async") client; ``interceptor`` wraps its channel (client side)."""
    if kind == "sync":
        channel: Any = None
        if interceptor is not None:
            channel = grpc.intercept_channel(grpc.insecure_channel(target), interceptor)
        return Either(
            WorkerClient(
                target, token=token, trust=trust, timeout=timeout, retries=retries, channel=channel
            )
        )
    aio_channel = None
    if interceptor is not None:
        aio_channel = grpc.aio.insecure_channel(target, interceptors=[interceptor])
    return Either(
        AsyncWorkerClient(
            target,
            token=token,
            trust=trust,
            timeout=timeout,
            retries=retries,
            channel=aio_channel,
        )
    )


KINDS = ["sync", "async"]


@pytest.fixture(params=KINDS)
async def client(request: pytest.FixtureRequest, stack: RunningStack) -> AsyncIterator[Either]:
    """Each test twice: through the sync client and through the asyncio client."""
    either = make_client(request.param, stack.target, token=stack.token, trust=stack.trust)
    yield either
    await either.close()


async def play(stack: RunningStack, either: Either, episode_id: str, *, write: bool) -> None:
    """Begin ``episode_id`` on its own patient; write the honest row when ``write``."""
    patient = f"patient-{episode_id}"
    begun = await either.call("begin", episode_id, stack.digest, {"patient_id": patient})
    assert begun.episode_id == episode_id
    assert begun.baseline_recorded
    if write:
        write_triage(stack.database, patient)


def grader_args(digest: str, episode_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    item = {
        "episode_id": episode_id,
        "policy_checkpoint_id": CHECKPOINT,
        "policy_update": 0,
        "reward_contract_digest": digest,
        "metadata": {"oracle_identity": {"patient_id": f"patient-{episode_id}"}},
    }
    return {"output_text": "done"}, item


# --------------------------------------------------------------------------------------------
# Happy paths on both clients
# --------------------------------------------------------------------------------------------


async def test_health(stack: RunningStack, client: Either) -> None:
    answer = await client.call("health")
    assert answer.issuer_key_id == stack.app.key.key_id
    assert answer.reward_contract_digest == stack.digest
    assert answer.oracle_tier == 2


async def test_begin_score_get_receipt(stack: RunningStack, client: Either) -> None:
    await play(stack, client, "episode.client.one", write=True)
    got = await client.call("score", descriptor(stack.digest, "episode.client.one"))
    assert isinstance(got, VerifiedReceipt)
    assert got.receipt.reward_outcome == VERIFIED
    assert got.scalar == 1.0
    assert got.receipt.episode_id == "episode.client.one"
    by_id = await client.call("get_receipt", receipt_id=got.receipt.receipt_id)
    by_episode = await client.call("get_receipt", episode_id="episode.client.one")
    assert by_id.envelope == got.envelope
    assert by_episode.envelope == got.envelope
    with pytest.raises(NotFound):
        await client.call("get_receipt", episode_id="episode.client.never")


async def test_score_many_in_order(stack: RunningStack, client: Either) -> None:
    ids = [f"episode.client.many.{i}" for i in range(4)]
    for index, episode_id in enumerate(ids):
        await play(stack, client, episode_id, write=index % 2 == 0)
    descriptors = [descriptor(stack.digest, e) for e in ids]
    descriptors.append(descriptor(stack.digest, ids[0]))  # repeated in one batch
    results = await client.call("score_many", descriptors)
    assert len(results) == 5
    outcomes = [r.receipt.reward_outcome for r in results[:4]]
    assert outcomes == [VERIFIED, WRONG_EFFECT, VERIFIED, WRONG_EFFECT]
    assert [r.receipt.episode_id for r in results[:4]] == ids
    assert isinstance(results[4], DuplicateEpisode)
    assert results[4].metadata["receipt_id"] == results[0].receipt.receipt_id


async def test_stream(stack: RunningStack, client: Either) -> None:
    ids = [f"episode.client.stream.{i}" for i in range(3)]
    for episode_id in ids:
        await play(stack, client, episode_id, write=True)
    descriptors = [descriptor(stack.digest, e) for e in ids]
    descriptors.append(descriptor(stack.digest, "no/such/id"))
    results = await client.stream(descriptors)
    assert len(results) == 4
    assert [r.receipt.episode_id for r in results[:3]] == ids
    assert all(r.receipt.reward_outcome == VERIFIED for r in results[:3])
    assert isinstance(results[3], InvalidEpisode)


async def test_grade_openai(stack: RunningStack, client: Either) -> None:
    await play(stack, client, "episode.client.grade.pay", write=True)
    paid = await client.call("grade_openai", *grader_args(stack.digest, "episode.client.grade.pay"))
    assert paid == 1.0
    await play(stack, client, "episode.client.grade.zero", write=False)
    zero = await client.call(
        "grade_openai", *grader_args(stack.digest, "episode.client.grade.zero")
    )
    assert zero == 0.0
    # No BeginEpisode: unscored, which the grader shape cannot carry, so the client raises.
    with pytest.raises(Unscored):
        await client.call("grade_openai", *grader_args(stack.digest, "episode.client.grade.none"))
    assert stack.app.store.receipt_by_episode("episode.client.grade.none") is None


async def test_unscored_receipt_has_no_scalar_in_the_client(
    stack: RunningStack, client: Either
) -> None:
    await play(stack, client, "episode.client.failed", write=True)
    got = await client.call(
        "score",
        descriptor(
            stack.digest,
            "episode.client.failed",
            runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM,
        ),
    )
    assert got.unscored
    assert got.scalar is None


# --------------------------------------------------------------------------------------------
# R-T-5: a client pinned to the wrong key uses no receipt
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_wrong_pinned_key_refuses_every_receipt(stack: RunningStack, kind: str) -> None:
    impostor = TrustSet([SigningKey.generate().public_key])
    wrong = make_client(kind, stack.target, token=stack.token, trust=impostor)
    try:
        await play(stack, wrong, "episode.client.wrongkey.0", write=True)
        with pytest.raises(SignatureError):
            await wrong.call("score", descriptor(stack.digest, "episode.client.wrongkey.0"))
        # The worker did commit it; only the client refused to use it.
        stored = stack.app.store.receipt_by_episode("episode.client.wrongkey.0")
        assert stored is not None
        with pytest.raises(SignatureError):
            await wrong.call("get_receipt", receipt_id=stored.receipt_id)
        with pytest.raises(SignatureError):
            await wrong.call("get_receipt", episode_id="episode.client.wrongkey.0")
        await play(stack, wrong, "episode.client.wrongkey.1", write=True)
        batch = await wrong.call(
            "score_many",
            [
                descriptor(stack.digest, "episode.client.wrongkey.1"),
                descriptor(stack.digest, "episode.client.wrongkey.0"),
            ],
        )
        assert len(batch) == 2
        assert isinstance(batch[0], SignatureError)
        assert not isinstance(batch[0], VerifiedReceipt)
        assert isinstance(batch[1], DuplicateEpisode)
        await play(stack, wrong, "episode.client.wrongkey.2", write=True)
        streamed = await wrong.stream([descriptor(stack.digest, "episode.client.wrongkey.2")])
        assert len(streamed) == 1
        assert isinstance(streamed[0], SignatureError)
        await play(stack, wrong, "episode.client.wrongkey.3", write=True)
        with pytest.raises(SignatureError):
            await wrong.call(
                "grade_openai", *grader_args(stack.digest, "episode.client.wrongkey.3")
            )
    finally:
        await wrong.close()
    # The rightly pinned client reads the very same stored receipt.
    good = await stack.client.get_receipt(episode_id="episode.client.wrongkey.0")
    assert good.receipt.reward_outcome == VERIFIED


# --------------------------------------------------------------------------------------------
# Retry only on UNAVAILABLE: a flaky front for the same Scorer, counting every call
# --------------------------------------------------------------------------------------------

Behaviour = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


@dataclass
class Flaky(grpc.aio.ServerInterceptor):
    """Counts calls per method; on cue refuses, loses the answer of, or delays a call.

    ``refuse[method]`` = (code, times): the first ``times`` calls answer ``code`` without
    reaching the worker. ``lose[method]`` = times: the first calls run in the worker (and
    commit) but the client is told UNAVAILABLE. ``delay[method]`` = seconds before delegating.
    """

    refuse: dict[str, tuple[grpc.StatusCode, int]] = field(default_factory=dict)
    lose: dict[str, int] = field(default_factory=dict)
    delay: dict[str, float] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        method: str = details.method
        self.calls[method] += 1
        number = self.calls[method]
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner: Behaviour = handler.unary_unary
        code, times = self.refuse.get(method, (grpc.StatusCode.OK, 0))
        lose = number <= self.lose.get(method, 0)
        pause = self.delay.get(method, 0.0)

        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if number <= times:
                await context.abort(code, f"injected {code.name} #{number}")
            if pause:
                await asyncio.sleep(pause)
            self.reached[method] += 1
            answer = await inner(request, context)
            if lose:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the answer was lost")
            return answer

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


@dataclass
class Front:
    """A second server over the stack's Scorer, behind ``Flaky`` and the bearer check."""

    server: grpc.aio.Server
    target: str
    flaky: Flaky


@pytest.fixture
async def front(stack: RunningStack) -> AsyncIterator[Front]:
    flaky = Flaky()
    server = grpc.aio.server(
        interceptors=[
            flaky,
            BearerAuthInterceptor({stack.token: "trainer"}, open_methods={HEALTH_RPC}),
        ]
    )
    pb_grpc.add_RewardWorkerServiceServicer_to_server(
        RewardWorkerServicer(stack.app.scorer), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield Front(server=server, target=f"127.0.0.1:{port}", flaky=flaky)
    await server.stop(0)


def front_client(kind: str, stack: RunningStack, front: Front, **options: Any) -> Either:
    return make_client(kind, front.target, token=stack.token, trust=stack.trust, **options)


@pytest.mark.parametrize("kind", KINDS)
async def test_unavailable_is_retried_until_it_succeeds(
    stack: RunningStack, front: Front, kind: str
) -> None:
    front.flaky.refuse[SCORE] = (grpc.StatusCode.UNAVAILABLE, 2)
    either = front_client(kind, stack, front, retries=2)
    try:
        await play(stack, either, f"episode.retry.ok.{kind}", write=True)
        got = await either.call("score", descriptor(stack.digest, f"episode.retry.ok.{kind}"))
    finally:
        await either.close()
    assert got.receipt.reward_outcome == VERIFIED
    assert front.flaky.calls[SCORE] == 3
    assert front.flaky.reached[SCORE] == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_unavailable_past_the_retry_budget_raises(
    stack: RunningStack, front: Front, kind: str
) -> None:
    front.flaky.refuse[SCORE] = (grpc.StatusCode.UNAVAILABLE, 10)
    either = front_client(kind, stack, front, retries=2)
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call(
                "score",
                descriptor(
                    stack.digest, "episode.retry.gone", oracle_identity={"patient_id": "p-gone-01"}
                ),
            )
    finally:
        await either.close()
    assert front.flaky.calls[SCORE] == 3
    assert front.flaky.reached[SCORE] == 0
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    # A bare transport status (no ErrorInfo) still surfaces as the class callers catch.
    assert isinstance(caught.value, Unavailable), type(caught.value).__name__


@dataclass
class CountingClientInterceptor(
    grpc.UnaryUnaryClientInterceptor, grpc.aio.UnaryUnaryClientInterceptor
):
    """Counts the unary calls a client channel sends (sync and asyncio).

    For asyncio the continuation returns an awaitable that grpc.aio awaits; passing it through
    unchanged serves both shapes.
    """

    calls: Counter[str] = field(default_factory=Counter)

    def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        method = client_call_details.method
        # grpc.aio hands the method name over as bytes, the sync channel as str.
        self.calls[method.decode() if isinstance(method, bytes) else method] += 1
        return continuation(client_call_details, request)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("kind", KINDS)
async def test_closed_port_is_unavailable_after_three_attempts(kind: str) -> None:
    counter = CountingClientInterceptor()
    either = make_client(
        kind,
        f"127.0.0.1:{closed_port()}",
        token="t" * 32,
        trust=TrustSet([SigningKey.generate().public_key]),
        timeout=5.0,
        retries=2,
        interceptor=counter,
    )
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call(
                "score",
                make_descriptor(
                    episode_id="episode.closed.0001",
                    policy_checkpoint_id=CHECKPOINT,
                    policy_update=0,
                    reward_contract_digest="sha256:" + "0" * 64,
                ),
            )
    finally:
        await either.close()
    assert sum(counter.calls.values()) == 3
    assert counter.calls[SCORE] == 3
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert isinstance(caught.value, Unavailable), type(caught.value).__name__


@pytest.mark.parametrize("kind", KINDS)
async def test_not_found_and_invalid_argument_are_not_retried(
    stack: RunningStack, front: Front, kind: str
) -> None:
    either = front_client(kind, stack, front, retries=3)
    try:
        with pytest.raises(NotFound):
            await either.call("get_receipt", receipt_id="rcpt.0000000000000000")
        with pytest.raises(InvalidEpisode):
            await either.call("score", descriptor(stack.digest, "bad/episode/id"))
    finally:
        await either.close()
    assert front.flaky.calls[GET_RECEIPT] == 1
    assert front.flaky.calls[SCORE] == 1


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED],
    ids=lambda c: c.name,
)
@pytest.mark.parametrize("kind", KINDS)
async def test_other_codes_are_not_retried(
    stack: RunningStack, front: Front, kind: str, code: grpc.StatusCode
) -> None:
    front.flaky.refuse[BEGIN] = (code, 10)
    either = front_client(kind, stack, front, retries=3)
    try:
        with pytest.raises(RewardSealError) as caught:
            await either.call("begin", "episode.noretry.0001", stack.digest, {"patient_id": "p-nr"})
    finally:
        await either.close()
    assert caught.value.code == code
    assert front.flaky.calls[BEGIN] == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_lost_answer_is_recovered_as_the_stored_receipt(
    stack: RunningStack, front: Front, kind: str
) -> None:
    episode_id = f"episode.lost.{kind}"
    front.flaky.lose[SCORE] = 1
    either = front_client(kind, stack, front, retries=2)
    try:
        await play(stack, either, episode_id, write=True)
        got = await either.call("score", descriptor(stack.digest, episode_id))
        # The first attempt committed; the retry met ALREADY_EXISTS; the client fetched it.
        stored = stack.app.store.receipt_by_episode(episode_id)
        assert stored is not None
        assert got.receipt.receipt_id == stored.receipt_id
        assert got.receipt.reward_outcome == VERIFIED
        assert front.flaky.calls[SCORE] == 2
        assert front.flaky.reached[SCORE] == 2
        assert front.flaky.calls[GET_RECEIPT] == 1
        assert count_receipts(stack.app.store) == 1
        # Without a lost answer, scoring a scored episode is the caller's mistake: it surfaces.
        with pytest.raises(DuplicateEpisode) as caught:
            await either.call("score", descriptor(stack.digest, episode_id))
        assert caught.value.metadata["receipt_id"] == stored.receipt_id
        assert front.flaky.calls[SCORE] == 3
    finally:
        await either.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_deadline_is_passed_and_mapped(stack: RunningStack, front: Front, kind: str) -> None:
    front.flaky.delay[GET_RECEIPT] = 1.5
    either = front_client(kind, stack, front, timeout=0.3, retries=3)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        with pytest.raises(RewardSealError) as caught:
            await either.call("get_receipt", receipt_id="rcpt.0000000000000000")
        elapsed = loop.time() - started
    finally:
        await either.close()
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert not isinstance(caught.value, NotFound)
    assert elapsed < 1.2
    assert front.flaky.calls[GET_RECEIPT] == 1


# --------------------------------------------------------------------------------------------
# make_descriptor
# --------------------------------------------------------------------------------------------


def test_make_descriptor_leaves_absent_optionals_absent() -> None:
    bare = make_descriptor(
        episode_id="episode.md.0001",
        policy_checkpoint_id=CHECKPOINT,
        policy_update=3,
        reward_contract_digest="sha256:" + "a" * 64,
    )
    for name in ("task_id", "environment_id", "runtime_signal", "metadata"):
        assert not bare.HasField(name), name
    assert dict(bare.oracle_identity) == {}
    assert bare.policy_update == 3
    # Absent stays distinguishable from a zero value on the wire.
    assert EpisodeDescriptor.FromString(bare.SerializeToString()) == bare
    assert not EpisodeDescriptor.FromString(bare.SerializeToString()).HasField("runtime_signal")

    full = make_descriptor(
        episode_id="episode.md.0002",
        policy_checkpoint_id=CHECKPOINT,
        policy_update=4,
        reward_contract_digest="sha256:" + "a" * 64,
        oracle_identity={"patient_id": "p-md-0002"},
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
        task_id="task.x",
        environment_id="env.x",
        metadata={"run": "r1", "step": 7},
    )
    for name in ("task_id", "environment_id", "runtime_signal", "metadata"):
        assert full.HasField(name), name
    assert full.runtime_signal == RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
    assert json_format.MessageToDict(full.metadata) == {"run": "r1", "step": 7.0}
    assert dict(full.oracle_identity) == {"patient_id": "p-md-0002"}
