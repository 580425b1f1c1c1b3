"""A control plane on a real ``grpc.aio`` server (port 0) for contract and CLI tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from rewardseal.core.calibration import METHOD
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1 import control_service_pb2_grpc as pb_grpc
from rewardseal.v1 import integrity_pb2_grpc
from rewardseal.v1.certificate_pb2 import CalibrationSummary, FaultClassCount
from rewardseal_control.app import ensure_organization_key
from rewardseal_control.domain import ControlPlane
from rewardseal_control.integrity.runner import AuditFunction
from rewardseal_control.integrity.service import RewardIntegrityServicer
from rewardseal_control.roles import control_tokens
from rewardseal_control.server import start_control_server
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_control.store import ControlStore
from rewardseal_mockmed.contract import CALIBRATION_CORPUS, CORPUS_DIGEST, THRESHOLD
from rewardseal_server.bearer import BearerTokens
from rewardseal_server.serving import RunningServer

ADMIN_TOKEN = "admin-token-" + "a" * 24
CLIENT_TOKEN = "client-token-" + "c" * 24
WORKER_TOKEN = "worker-token-" + "w" * 24
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TEST_RESAMPLES = 1_000
"""Bootstrap resamples of the audits in tests (production runs R-I-6's 10,000)."""


@dataclass
class Clock:
    """A clock the test moves by hand (the servicer reads it for every decision)."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class ControlStack:
    """A started control plane, its store, its organization key and its clock."""

    running: RunningServer
    servicer: ControlPlaneServicer
    store: ControlStore
    key: SigningKey
    clock: Clock
    ttl: timedelta
    integrity: RewardIntegrityServicer
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    @property
    def plane(self) -> ControlPlane:
        """The domain layer the servicer (and a console) calls."""
        return self.servicer.plane

    @property
    def tokens(self) -> BearerTokens:
        """The credentials this control plane accepts (what a console signs in with)."""
        return control_tokens(
            admin_token=ADMIN_TOKEN, token=CLIENT_TOKEN, worker_token=WORKER_TOKEN
        )

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.running.port}"

    @property
    def trust(self) -> TrustSet:
        """What a follower pins: the organization key."""
        return TrustSet([self.key.public_key])

    def stub(self) -> pb_grpc.ControlPlaneServiceStub:
        """A raw stub on a fresh channel (closed by :func:`stop_control`)."""
        channel = grpc.aio.insecure_channel(self.target)
        self.channels.append(channel)
        return pb_grpc.ControlPlaneServiceStub(channel)

    def integrity_stub(self) -> integrity_pb2_grpc.RewardIntegrityServiceStub:
        """A raw RewardIntegrityService stub on a fresh channel."""
        channel = grpc.aio.insecure_channel(self.target)
        self.channels.append(channel)
        return integrity_pb2_grpc.RewardIntegrityServiceStub(channel)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


ADMIN = bearer(ADMIN_TOKEN)
TRAINER = bearer(CLIENT_TOKEN)
WORKER = bearer(WORKER_TOKEN)


async def start_control(
    url: str,
    *,
    register_key: bool = True,
    ttl: timedelta = timedelta(hours=24),
    refresh_interval: timedelta | None = None,
    reflection: bool = False,
    key: SigningKey | None = None,
    audit: AuditFunction | None = None,
    port: int = 0,
) -> ControlStack:
    """A control plane over ``url`` with a fresh organization key (or ``key``) and a hand-moved
    clock; its audits use :data:`TEST_RESAMPLES` (``audit`` may wrap ``audit_boundary``).
    ``port`` 0 takes a free one; a given port restarts control where a client still points."""
    store = ControlStore(url)
    key = key or SigningKey.generate()
    clock = Clock()
    if register_key:
        ensure_organization_key(store, key, at=clock.now - timedelta(days=1))
    servicer = ControlPlaneServicer(
        store, key, revocation_ttl=ttl, clock=clock, refresh_interval=refresh_interval
    )
    integrity = RewardIntegrityServicer(
        store, key, clock=clock, resamples=TEST_RESAMPLES, audit=audit
    )
    running = await start_control_server(
        servicer,
        integrity=integrity,
        admin_token=ADMIN_TOKEN,
        token=CLIENT_TOKEN,
        worker_token=WORKER_TOKEN,
        port=port,
        reflection=reflection,
    )
    return ControlStack(
        running=running,
        servicer=servicer,
        store=store,
        key=key,
        clock=clock,
        ttl=ttl,
        integrity=integrity,
    )


async def stop_control(stack: ControlStack) -> None:
    for channel in stack.channels:
        await channel.close()
    await stack.running.stop(grace=None)
    stack.store.close()


async def wire_error(
    stack: ControlStack,
    method: str,
    request: Message,
    *,
    metadata: tuple[tuple[str, str], ...] = ADMIN,
) -> tuple[grpc.StatusCode, str, dict[str, str], str]:
    """Call ``method`` expecting failure; (code, ErrorInfo.reason, ErrorInfo.metadata, message)
    read straight off the wire, not through a client's decoder."""
    stub: object = stack.stub()
    if not hasattr(stub, method):  # an RPC of RewardIntegrityService
        stub = stack.integrity_stub()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _drain(getattr(stub, method)(request, metadata=metadata, timeout=20))
    error = caught.value
    details = dict(error.trailing_metadata() or ()).get(rpc_status.GRPC_DETAILS_METADATA_KEY)
    assert details is not None, "every error carries google.rpc.Status details"
    status = status_pb2.Status.FromString(details)
    assert status.code == error.code().value[0]
    info = error_details_pb2.ErrorInfo()
    assert status.details
    assert status.details[0].Unpack(info)
    assert info.domain == "rewardseal"
    return error.code(), info.reason, dict(info.metadata), status.message


async def _drain(call: object) -> None:
    """Await a unary call, or read a server stream to its end (where a stream's error shows)."""
    if hasattr(call, "__aiter__"):
        async for _ in call:
            pass
    else:
        await call  # type: ignore[misc]


def calibration_summary(
    contract_digest: str,
    *,
    trials: int = 300,
    false_accepts: int = 0,
    corpus_digest: str = CORPUS_DIGEST,
    held_out: bool = False,
    confidence: float = 0.95,
) -> CalibrationSummary:
    """A summary for the MockMed contract's corpus that yields a certificate its policy takes."""
    names = CALIBRATION_CORPUS["fault_classes"]
    per_class = trials // len(names)
    classes = [FaultClassCount(name=name, trials=per_class, false_accepts=0) for name in names]
    classes[0].trials += trials - per_class * len(names)
    classes[0].false_accepts = false_accepts
    return CalibrationSummary(
        reward_contract_digest=contract_digest,
        calibration_corpus_digest=corpus_digest,
        checker_configuration_digest="sha256:" + "c" * 64,
        trials=trials,
        false_accepts=false_accepts,
        fault_classes=classes,
        generator_seed=7,
        method=METHOD,
        confidence=confidence,
        threshold=THRESHOLD,
        gold_trials=10,
        gold_refused=0,
        held_out=held_out,
    )
