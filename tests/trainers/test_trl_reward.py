"""CertifiedRewardFunction (the TRL reward function) against a real worker and a real MockMed.

TRL is not installed here: the function is called exactly as TRL 1.16 calls it (keyword
``prompts``/``completions``, every dataset column as a per-completion list, ``trainer_state``,
``log_extra``, ``log_metric``). tests/integrations/test_trl_grpo.py runs it inside a real
GRPOTrainer.

The worker serves on the test's event loop, so the blocking reward function runs in a thread
(``asyncio.to_thread``); the asyncio variant is awaited on the loop itself.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import CertificationRefused, Unauthenticated, ValidationError
from rewardseal.rpc.worker_client import AsyncWorkerClient, VerifiedReceipt, WorkerClient
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.trainers.groups import DEVELOPMENT_ONLY, METADATA_COLUMNS, BatchTally
from rewardseal.trainers.trl import (
    PAID_SHARE_METRIC,
    SCORED_SHARE_METRIC,
    UNSCORED_SHARE_METRIC,
    CertifiedRewardFunction,
)
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_kit.actors import MockMedActor
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import CONTROL, mockmed_write_spec, scripted_completion
from rewardseal_mockmed.seeding import count_encounters
from rewardseal_worker.server import SERVICE_NAME

SCORE_MANY = f"/{SERVICE_NAME}/ScoreEpisodes"
KINDS = ["sync", "async"]


@dataclass
class TrainerState:
    """The one field of transformers.TrainerState the reward function reads."""

    global_step: int = 0


@dataclass
class Logs:
    """What the reward function pushed through TRL's log_extra and log_metric."""

    extra: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    metrics: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def log_extra(self, name: str, values: list[Any]) -> None:
        self.extra[name].extend(values)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics[name].append(value)


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
def sync_client(stack: RunningStack) -> Iterator[WorkerClient]:
    with WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0) as client:
        yield client


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    """MockMed serving the worker's own seeded SQLite system of record."""
    with running_mockmed(f"sqlite:///{stack.database}", tmp_path) as service:
        yield service


def reward_function(
    stack: RunningStack, client: WorkerClient, num_generations: int, **options: Any
) -> CertifiedRewardFunction:
    return CertifiedRewardFunction(
        client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=num_generations,
        **options,
    )


async def call(
    kind: str, function: CertifiedRewardFunction, stack: RunningStack, **kwargs: Any
) -> list[float | None]:
    """Call like TRL does: sync in a thread, or the asyncio variant over the stack's client."""
    count = len(kwargs["completions"])
    kwargs.setdefault("prompts", ["Create the triage encounter."] * count)
    kwargs.setdefault("completion_ids", [[1, 2, 3]] * count)
    kwargs.setdefault("trainer_state", TrainerState())
    if kind == "sync":
        return await asyncio.to_thread(lambda: function(**kwargs))
    return await function.as_async(stack.client)(**kwargs)


async def begin(stack: RunningStack, episode_id: str, patient: str) -> None:
    answer = await stack.client.begin(episode_id, stack.digest, {IDENTITY_KEY: patient})
    assert answer.baseline_recorded


def assert_aligned(columns: dict[str, list[Any]], count: int) -> None:
    assert tuple(columns) == METADATA_COLUMNS
    assert all(len(values) == count for values in columns.values()), columns


# --------------------------------------------------------------------------------------------
# Rollouts done by the caller: scoring, group fill, logging (R-T-1, R-T-3)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_mixed_group_pays_receipts_and_fills_unscored_with_the_group_mean(
    kind: str, stack: RunningStack, sync_client: WorkerClient
) -> None:
    ids = [f"episode.trl.mixed.{kind}.{i}" for i in range(4)]
    patients = [f"patient-trl-mixed-{kind}-{i}" for i in range(4)]
    await begin(stack, ids[0], patients[0])
    write_triage(stack.database, patients[0])  # VERIFIED
    await begin(stack, ids[1], patients[1])  # nothing written: WRONG_EFFECT, seeded 0.0
    await begin(stack, ids[2], patients[2])
    write_triage(stack.database, patients[2])  # written, but the platform failed: unscored
    # ids[3] is never begun: no baseline, RECONCILIATION_REQUIRED (unscored).
    logs = Logs()
    function = reward_function(stack, sync_client, 4)
    rewards = await call(
        kind,
        function,
        stack,
        completions=["done"] * 4,
        episode_id=ids,
        oracle_identity=[{IDENTITY_KEY: patient} for patient in patients],
        runtime_signal=["COMPLETED", "COMPLETED", "FAILED_PLATFORM", "COMPLETED"],
        log_extra=logs.log_extra,
        log_metric=logs.log_metric,
    )
    assert rewards == [1.0, 0.0, 0.5, 0.5]
    columns = function.metadata_columns()
    assert_aligned(columns, 4)
    assert columns["reward_outcome"] == [
        "VERIFIED",
        "WRONG_EFFECT",
        "FAILED_PLATFORM",
        "RECONCILIATION_REQUIRED",
    ]
    assert columns["reward_unscored"] == [False, False, True, True]
    assert columns["reward_certified"] == [True, True, True, True]
    assert columns["reward_episode_id"] == ids
    # Every column reached TRL's completions table, one entry per sample (R-T-3).
    assert dict(logs.extra) == columns
    # "Paid" is one thing: a receipt with a positive scalar. The wrong effect's 0.0 is scored
    # and not paid, so a quarter of the batch is paid and half of it scored.
    assert logs.metrics == {
        PAID_SHARE_METRIC: [0.25],
        SCORED_SHARE_METRIC: [0.5],
        UNSCORED_SHARE_METRIC: [0.5],
    }
    assert function.last_tally() == BatchTally(
        completions=4, paid=1, scored=2, unscored=2, certified=4
    )
    assert function.last_tally().line() == (
        "4 completions: 1 paid (reward > 0), 2 scored, 2 unscored, 4 certified"
    )
    # The paid receipts are the worker's own, verified (R-T-5) and stored.
    stored = await stack.client.get_receipt(episode_id=ids[0])
    assert isinstance(stored, VerifiedReceipt)
    assert stored.scalar == 1.0


@pytest.mark.parametrize("kind", KINDS)
async def test_all_unscored_group_is_none_never_zero(
    kind: str, stack: RunningStack, sync_client: WorkerClient
) -> None:
    ids = [f"episode.trl.none.{kind}.{i}" for i in range(4)]
    function = reward_function(stack, sync_client, 2)
    await begin(stack, ids[0], "patient-trl-none-0")
    write_triage(stack.database, "patient-trl-none-0")
    await begin(stack, ids[1], "patient-trl-none-1")
    rewards = await call(
        kind,
        function,
        stack,
        completions=["done"] * 4,
        episode_id=ids,
        oracle_identity=[{IDENTITY_KEY: f"patient-trl-none-{i}"} for i in range(4)],
    )
    # Group 0 was played; group 1 was never begun (both RECONCILIATION_REQUIRED).
    assert rewards == [1.0, 0.0, None, None]
    assert function.metadata_columns()["reward_unscored"] == [False, False, True, True]


# --------------------------------------------------------------------------------------------
# require_certified (R-T-2)
# --------------------------------------------------------------------------------------------


async def test_certificate_expired_at_the_trainers_step(
    stack: RunningStack, sync_client: WorkerClient
) -> None:
    certificate = stack.app.bundle.certificate
    assert certificate is not None
    expired = certificate.issued_at_policy_update + certificate.expiry_policy_updates
    state = TrainerState(global_step=expired)

    async def played(name: str) -> dict[str, Any]:
        episode_id, patient = f"episode.trl.expired.{name}", f"patient-trl-expired-{name}"
        await begin(stack, episode_id, patient)
        write_triage(stack.database, patient)
        return {
            "completions": ["done"],
            "episode_id": [episode_id],
            "oracle_identity": [{IDENTITY_KEY: patient}],
            "trainer_state": state,
        }

    strict = reward_function(stack, sync_client, 1, require_certified=True)
    with pytest.raises(CertificationRefused, match="EXPIRED"):
        await call("sync", strict, stack, **await played("strict"))
    # The batch that stopped the run is still there to inspect.
    assert strict.metadata_columns()["reward_certificate_state"] == ["EXPIRED"]

    relaxed = reward_function(stack, sync_client, 1, require_certified=False)
    rewards = await call("sync", relaxed, stack, **await played("relaxed"))
    assert rewards == [1.0]
    columns = relaxed.metadata_columns()
    assert columns["reward_calibration_scope"] == [DEVELOPMENT_ONLY]
    assert columns["reward_certified"] == [False]
    assert columns["reward_certificate_state"] == ["EXPIRED"]


# --------------------------------------------------------------------------------------------
# A worker lost between two chunks of one batch (R-T-3)
# --------------------------------------------------------------------------------------------


class StopAfterFirstScore(grpc.UnaryUnaryClientInterceptor):
    """Stops the worker (on its event loop) once the first ScoreEpisodes call has answered."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self.stop = stop
        self.score_calls = 0

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        answer = continuation(details, request)
        if details.method == SCORE_MANY:
            self.score_calls += 1
            if self.score_calls == 1:
                answer.result()  # the first chunk's answer is in hand before the worker goes
                self.stop()
        return answer


async def test_metadata_stays_aligned_when_the_worker_goes_away_mid_batch(data_dir: Path) -> None:
    stack = await start_stack(data_dir)
    loop = asyncio.get_running_loop()

    def stop_worker() -> None:
        asyncio.run_coroutine_threadsafe(stack.app.stop(), loop).result(timeout=30)

    interceptor = StopAfterFirstScore(stop_worker)
    channel = grpc.intercept_channel(grpc.insecure_channel(stack.target), interceptor)
    client = WorkerClient(
        stack.target, token=stack.token, trust=stack.trust, retries=1, channel=channel
    )
    try:
        ids = [f"episode.trl.outage.{i}" for i in range(4)]
        for index, episode_id in enumerate(ids):
            await begin(stack, episode_id, f"patient-trl-outage-{index}")
            if index % 2 == 0:
                write_triage(stack.database, f"patient-trl-outage-{index}")
        function = reward_function(stack, client, 2, max_batch=2)
        logs = Logs()
        rewards = await call(
            "sync",
            function,
            stack,
            completions=["done"] * 4,
            episode_id=ids,
            log_extra=logs.log_extra,
        )
        # One call per chunk of max_batch; the second chunk is retried once (retries=1).
        assert interceptor.score_calls == 1 + 2
        assert rewards == [1.0, 0.0, None, None]
        columns = function.metadata_columns()
        assert_aligned(columns, 4)
        assert columns["reward_outcome"] == ["VERIFIED", "WRONG_EFFECT", "ERROR", "ERROR"]
        assert columns["reward_error"] == ["", "", "unavailable", "unavailable"]
        # R-MSG-12: the receipt's findings, aligned like every column ("" without a receipt).
        assert columns["reward_findings"] == ["", "triage_encounter_created:missing_record", "", ""]
        assert columns["reward_unscored"] == [False, False, True, True]
        assert columns["reward_episode_id"] == ids
        assert dict(logs.extra) == columns
    finally:
        client.close()
        await stack.client.close()


# --------------------------------------------------------------------------------------------
# The actor runs the rollout: MockMed writes into the worker's SoR (R-T-4, R-W-3)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_actor_mode_end_to_end_over_mockmed(
    kind: str, stack: RunningStack, sync_client: WorkerClient, mockmed: RunningMockMed
) -> None:
    patient = f"patient-trl-actor-{kind}"
    spec = mockmed_write_spec(patient)
    # One prompt, num_generations=4: TRL copies the row (and its identity) to all four.
    completions = [scripted_completion(family, spec) for family in (CONTROL, "dup", "claim")]
    completions.append(scripted_completion("wrong_record", spec))
    # A second prompt's group: an unparseable report and a halted one that wrote nothing.
    completions += ["I saved it, trust me", '{"actions": [], "submitted": true, "halted": true}']
    completions += [scripted_completion(CONTROL, spec), scripted_completion("extra", spec)]
    rows = [{IDENTITY_KEY: patient}] * 8
    actor = MockMedActor(mockmed.url, mockmed.token)
    function = reward_function(stack, sync_client, 4, actor=actor)
    rewards = await call(
        kind,
        function,
        stack,
        completions=completions,
        oracle_identity=rows,
        episode_id=[f"row-{kind}-0001"] * 4 + [f"row-{kind}-0002"] * 4,
        trainer_state=TrainerState(global_step=3),
    )
    columns = function.metadata_columns()
    assert_aligned(columns, 8)
    # No two completions collided on one identity: every episode opened and was scored.
    assert columns["reward_error"] == [""] * 8
    assert columns["reward_outcome"][:4] == ["VERIFIED"] + ["WRONG_EFFECT"] * 3
    assert rewards[:4] == [1.0, 0.0, 0.0, 0.0]
    assert columns["reward_certified"][0]
    assert columns["reward_calibration_scope"][0] == "synthetic"
    assert columns["reward_outcome"][4] == "WRONG_EFFECT"  # the policy's fault, read as such
    assert columns["reward_outcome"][5] == "HALTED_BEFORE_EFFECT"
    assert columns["reward_outcome"][6:] == ["VERIFIED", "WRONG_EFFECT"]
    # Which hack each sample tried, per sample (R-MSG-12).
    effect = "triage_encounter_created"
    assert columns["reward_findings"][:4] == [
        "",
        f"{effect}:duplicate_record",
        f"{effect}:missing_record",
        f"{effect}:missing_record",
    ]
    assert columns["reward_findings"][5:7] == [f"{effect}:not_committed", ""]
    assert columns["reward_findings"][7] == (
        f"{effect}:extra_field(priority) stat_priority_set:forbidden_present"
    )
    # Minted ids: per completion, prefixed by the row's id, at the trainer's step (R-T-4).
    ids = columns["reward_episode_id"]
    assert len(set(ids)) == 8
    assert all(episode_id.startswith(f"row-{kind}-000") for episode_id in ids)
    assert all(".u3." in episode_id for episode_id in ids)
    # The writes went through MockMed into the sandbox patients, never the row's own patient.
    sandboxes = [sandbox_identity(patient, episode_id) for episode_id in ids]
    assert count_encounters(stack.database, patient_id=sandboxes[0]) == 1
    assert count_encounters(stack.database, patient_id=sandboxes[1]) == 2  # dup
    assert count_encounters(stack.database, patient_id=sandboxes[2]) == 0  # claim
    assert count_encounters(stack.database, patient_id=sandboxes[3]) == 0  # wrong_record ...
    assert count_encounters(stack.database, patient_id=f"{patient}-decoy") == 1  # ... went here
    assert count_encounters(stack.database, patient_id=patient) == 0


async def test_actor_with_mockmed_unreachable_is_failed_platform_not_zero(
    stack: RunningStack, sync_client: WorkerClient
) -> None:
    # A bound socket that never listens: connections to its port are refused, and no other
    # process can take the port while the test runs.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        spec = mockmed_write_spec("patient-trl-down")
        actor = MockMedActor(url, "token", timeout=2.0)
        function = reward_function(stack, sync_client, 2, actor=actor)
        rewards = await call(
            "sync",
            function,
            stack,
            completions=[scripted_completion(CONTROL, spec)] * 2,
            oracle_identity=['{"patient_id": "patient-trl-down"}'] * 2,  # JSON text works too
        )
    assert rewards == [None, None]
    assert function.metadata_columns()["reward_outcome"] == ["FAILED_PLATFORM"] * 2


# --------------------------------------------------------------------------------------------
# Episode ids without an actor (R-T-4)
# --------------------------------------------------------------------------------------------


async def test_duplicate_episode_ids_without_an_actor_are_refused(
    stack: RunningStack, sync_client: WorkerClient
) -> None:
    function = reward_function(stack, sync_client, 2)
    with pytest.raises(ValidationError, match=r"R-T-4"):
        await call("sync", function, stack, completions=["a", "b"], episode_id=["row-1"] * 2)
    with pytest.raises(ValidationError, match="episode_id"):
        await call("sync", function, stack, completions=["a", "b"])
    assert function.metadata_columns() == {}  # nothing was scored


async def test_chat_completions_and_trl_naming(
    stack: RunningStack, sync_client: WorkerClient
) -> None:
    function = reward_function(stack, sync_client, 1, name="mockmed_certified")
    assert function.__name__ == "mockmed_certified"
    assert function.as_async(stack.client).__name__ == "mockmed_certified"
    await begin(stack, "episode.trl.chat.0001", "patient-trl-chat")
    write_triage(stack.database, "patient-trl-chat")
    rewards = await call(
        "sync",
        function,
        stack,
        prompts=[[{"role": "user", "content": "Create it."}]],
        completions=[[{"role": "assistant", "content": "done"}]],
        episode_id=["episode.trl.chat.0001"],
    )
    assert rewards == [1.0]


@pytest.mark.parametrize("kind", KINDS)
async def test_actor_with_a_wrong_worker_token_raises_instead_of_filling(
    kind: str, stack: RunningStack, mockmed: RunningMockMed
) -> None:
    # Every BeginEpisode would be refused: that is a setup bug, not a batch of unscored samples
    # (which would quietly train on fills and Nones).
    spec = mockmed_write_spec("patient-trl-bad-token")
    with WorkerClient(stack.target, token="not-the-token", trust=stack.trust) as client:
        function = reward_function(stack, client, 2, actor=MockMedActor(mockmed.url, mockmed.token))
        wrong = AsyncWorkerClient(stack.target, token="not-the-token", trust=stack.trust)
        kwargs: dict[str, Any] = {
            "completions": [scripted_completion(CONTROL, spec)] * 2,
            "oracle_identity": [{IDENTITY_KEY: "patient-trl-bad-token"}] * 2,
        }

        async def run() -> None:
            if kind == "sync":
                await call(kind, function, stack, **kwargs)
            else:
                kwargs.update(prompts=["p"] * 2, trainer_state=TrainerState())
                await function.as_async(wrong)(**kwargs)

        try:
            with pytest.raises(Unauthenticated):
                await run()
        finally:
            await wrong.close()
    assert count_encounters(stack.database, patient_id="patient-trl-bad-token") == 0


# --------------------------------------------------------------------------------------------
# Actor mode begins the whole batch in one BeginEpisodes call
# --------------------------------------------------------------------------------------------


class CountCalls(grpc.UnaryUnaryClientInterceptor):
    """Counts the unary calls a client makes, by method."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        self.calls[details.method.rsplit("/", 1)[-1]] += 1
        return continuation(details, request)


@dataclass
class RowActor:
    """Opens every completion under the row's own patient (no sandbox), and writes the honest
    triage for it: completions of one row then compete for one identity (R-W-3)."""

    database: Path
    acted: list[str] = field(default_factory=list)

    def identity_for(self, row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
        return dict(row_identity)

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
    ) -> RuntimeSignal.ValueType:
        self.acted.append(episode_id)
        write_triage(self.database, identity[IDENTITY_KEY])
        return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED


@pytest.mark.parametrize("kind", KINDS)
async def test_actor_mode_begins_the_batch_at_once_and_a_refused_begin_is_its_sample_alone(
    kind: str, stack: RunningStack
) -> None:
    counter = CountCalls()
    channel = grpc.intercept_channel(grpc.insecure_channel(stack.target), counter)
    with WorkerClient(
        stack.target, token=stack.token, trust=stack.trust, channel=channel
    ) as client:
        actor = RowActor(stack.database)
        function = reward_function(stack, client, 2, actor=actor)
        patients = [f"patient-trl-row-{kind}-1", f"patient-trl-row-{kind}-2"]
        rewards = await call(
            kind,
            function,
            stack,
            completions=["done"] * 4,
            oracle_identity=[{IDENTITY_KEY: p} for p in patients for _ in range(2)],
        )
    columns = function.metadata_columns()
    # The first completion of each row opened its episode; its group-mate met a busy identity,
    # was never acted on, and is filled with its group's mean rather than paid 0 (R-T-1).
    assert columns["reward_error"] == ["", "identity_busy"] * 2
    assert columns["reward_outcome"] == ["VERIFIED", "ERROR"] * 2
    assert rewards == [1.0, 1.0, 1.0, 1.0]
    ids = columns["reward_episode_id"]
    assert sorted(actor.acted) == sorted([ids[0], ids[2]])
    if kind == "sync":
        assert counter.calls == {"BeginEpisodes": 1, "ScoreEpisodes": 1}
