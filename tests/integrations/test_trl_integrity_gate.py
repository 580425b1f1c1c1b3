"""The integrity gate in a real ``trl.GRPOTrainer`` run (docs/spec.md §12, R-I-3, R-I-8, R-I-9).

Real parts throughout: MockMed over a seeded SQLite system of record, the tier-2 ``sql`` worker
as the optimizer (the reward TRL is paid, through ``CertifiedRewardFunction`` and the MockMed
actor), the ``rest``-channel worker as the independent sentinel (its own key and contract,
reading MockMed's HTTP API), a control plane with ``RewardIntegrityService`` on port 0, and the
capture, monitor and gate of ``rewardseal.trainers``. The servers serve on an event loop in a
thread of their own; the trainer runs in the test's thread.

The policy is a random two-layer Llama: its completions are noise, the actor writes nothing, and
both workers refuse every episode. So with the identity mapping the two judges agree (the audit
continues the run), and with the reward's direction *inverted* (a mis-specified mapping: the
optimizer accepts exactly what the sentinel refuses) the audit fails on asymmetric acceptance
and the gate pauses the run with a checkpoint.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support.control import ADMIN_TOKEN, CLIENT_TOKEN, ControlStack, start_control, stop_control
from support.loop_thread import LoopThread
from support.mockmed_service import RunningMockMed, running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import IntegrityHalted
from rewardseal.core.integrity import RewardMapping, RewardSource
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.integrity.buffer import SignalBuffer
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.monitor import (
    UNMONITORED_MESSAGE,
    IntegrityBinding,
    IntegrityMonitor,
)
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal_kit.actors import MockMedActor
from rewardseal_kit.proof.integrity.case import reward_source
from rewardseal_kit.tiny_models import char_tokenizer, tiny_grpo_config, tiny_llama
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_server.sqlstore import sqlite_url
from rewardseal_worker.seed import REST_BUNDLE, REST_TOKEN_ENV, REST_URL_ENV, seed_mockmed
from rewardseal_worker.settings import KEY_FILE

# Only the integrations venv has trl (and torch, transformers, datasets, tokenizers).
pytest.importorskip("trl")

T = TypeVar("T")
NUM_GENERATIONS = 2
PROTOCOL, PROFILE = "balanced_256", "human_aligned_integrity"
IDENTITY_MAPPING = {"normalization": {"min": 0, "max": 1}, "threshold": 0.5}
INVERTED_MAPPING = {
    "normalization": {"min": 0, "max": 1, "direction": "minimize"},
    "threshold": 0.5,
}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub: everything is built in code, and a download attempt fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


@dataclass
class Servers:
    """What lives for the whole module: MockMed, control, the workers' data directories."""

    loop: LoopThread
    mockmed: RunningMockMed
    control: ControlStack
    sql_dir: Path
    rest_dir: Path
    trainer_control: IntegrityClient
    admin_control: IntegrityClient


@dataclass
class World:
    """The servers, this test's workers and the clients a training script holds."""

    servers: Servers
    sql: RunningStack
    rest: RunningStack
    optimizer: WorkerClient
    sentinel: WorkerClient
    sources: dict[str, RewardSource]

    @property
    def mockmed(self) -> RunningMockMed:
        return self.servers.mockmed

    @property
    def trainer_control(self) -> IntegrityClient:
        return self.servers.trainer_control

    @property
    def admin_control(self) -> IntegrityClient:
        return self.servers.admin_control

    def create_system(self, mapping: dict[str, Any]) -> tuple[str, RewardMapping]:
        """The revision of ``sql`` audited by ``rest`` under ``mapping`` (admin)."""
        spec = {
            "optimizer": self.sources["sql"].to_json(),
            "auditors": [{"role": "primary_sentinel", **self.sources["rest"].to_json()}],
            "mapping": mapping,
        }
        created = self.admin_control.create_reward_system(spec)
        return created.revision.revision_id, RewardMapping.from_json(mapping)


def _source(name: str, stack: RunningStack, client: WorkerClient) -> RewardSource:
    health = client.health()
    return reward_source(
        f"{name} worker",
        contract_digest=health.reward_contract_digest,
        worker_key_id=health.issuer_key_id,
        recipe_digest=stack.app.bundle.contract.oracle.oracle_recipe_digest,
    )


@pytest.fixture(scope="module")
def servers(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("integrity-gate")
    sql_dir, rest_dir = root / "sql", root / "rest"
    shutil.copytree(seeded_template, sql_dir)
    # The sentinel is another operator's worker: its own data directory, key and certificate.
    seed_mockmed(rest_dir, key=SigningKey.load_or_create(rest_dir / KEY_FILE), trials=300)
    loop = LoopThread()
    database = sql_dir / "mockmed" / "mockmed.sqlite"
    with (
        running_mockmed(f"sqlite:///{database}", root) as mockmed,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv(REST_URL_ENV, mockmed.url)
        env.setenv(REST_TOKEN_ENV, mockmed.token)
        control = loop.run(start_control(sqlite_url(root / "control.sqlite")))
        trainer_control = IntegrityClient(control.target, token=CLIENT_TOKEN, timeout=20.0)
        admin_control = IntegrityClient(control.target, token=ADMIN_TOKEN, timeout=20.0)
        try:
            yield Servers(loop, mockmed, control, sql_dir, rest_dir, trainer_control, admin_control)
        finally:
            trainer_control.close()
            admin_control.close()
            loop.run(stop_control(control))
            loop.close()


@pytest.fixture
def world(servers: Servers, tmp_path: Path) -> Iterator[World]:
    """Both workers, each on a fresh receipt store: a worker's policy updates per contract
    never go backwards (R-W-7), and every test's run starts at update 0."""
    run = servers.loop.run
    sql = run(start_stack(servers.sql_dir, db_url=sqlite_url(tmp_path / "sql-receipts.sqlite")))
    rest = run(
        start_stack(
            servers.rest_dir,
            contract=REST_BUNDLE.name,
            db_url=sqlite_url(tmp_path / "rest-receipts.sqlite"),
        )
    )
    clients = {
        name: WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0)
        for name, stack in (("sql", sql), ("rest", rest))
    }
    try:
        yield World(
            servers,
            sql,
            rest,
            clients["sql"],
            clients["rest"],
            {
                name: _source(name, stack, clients[name])
                for name, stack in (("sql", sql), ("rest", rest))
            },
        )
    finally:
        for client in clients.values():
            client.close()
        run(stop_stack(rest))
        run(stop_stack(sql))


def grpo_trainer(
    reward: Any, gate: Any, *, run_id: str, prompts: int, max_steps: int, output: Path
) -> Any:
    """A GRPOTrainer over ``prompts`` distinct patients, every prompt in every step."""
    from datasets import Dataset
    from trl import GRPOTrainer

    tokenizer = char_tokenizer(padding_side="left")
    dataset = Dataset.from_list(
        [
            {
                "prompt": f"Create one Triage encounter for patient-{run_id}-{i:04d}. JSON:",
                "oracle_identity": {IDENTITY_KEY: f"patient-{run_id}-{i:04d}"},
                "episode_id": run_id,  # the prefix the reward function mints episode ids from
            }
            for i in range(prompts)
        ]
    )
    args = tiny_grpo_config(  # saves nothing: the gate's pause is the only save
        output,
        max_steps=max_steps,
        batch=prompts * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
    )
    return GRPOTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[gate],
    )


@dataclass
class GatedRun:
    reward: CertifiedRewardFunction
    gate: Any
    monitor: IntegrityMonitor
    trainer: Any


def gated_run(
    world: World,
    tmp_path: Path,
    *,
    run_id: str,
    mapping: dict[str, Any],
    prompts: int,
    max_steps: int,
    boundary_every: int,
) -> GatedRun:
    from rewardseal.trainers.trl import IntegrityGate

    system_id, parsed = world.create_system(mapping)
    # A checkpoint per run: a worker refuses a policy update below one it already saw for it.
    checkpoint = f"policy.checkpoint.{run_id}"
    capture = IntegrityCapture(
        world.trainer_control,
        run_id=run_id,
        system_revision_id=system_id,
        protocol_revision_id=PROTOCOL,
        mapping=parsed,
        buffer=SignalBuffer(tmp_path / "signal-buffer"),
        runtime_identity="tests/integrations",
        checkpoint=checkpoint,
        sentinel=world.sentinel,
        sentinel_contract_digest=world.rest.digest,
        boundary_every=boundary_every,
    )
    monitor = IntegrityMonitor(
        world.trainer_control,
        IntegrityBinding(system_id, PROTOCOL, PROFILE),
        capture=capture,
        audit_timeout_s=60.0,
    )
    reward = CertifiedRewardFunction(
        world.optimizer,
        reward_contract_digest=world.sql.digest,
        policy_checkpoint_id=checkpoint,
        num_generations=NUM_GENERATIONS,
        actor=MockMedActor(world.mockmed.url, world.mockmed.token),
        capture=capture,
        name="mockmed_certified",
    )
    gate = IntegrityGate(monitor)
    trainer = grpo_trainer(
        reward, gate, run_id=run_id, prompts=prompts, max_steps=max_steps, output=tmp_path / "out"
    )
    return GatedRun(reward, gate, monitor, trainer)


@pytest.mark.slow
def test_a_failing_audit_pauses_the_run_with_a_checkpoint_until_reviewed(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 24 distinct records per boundary: enough evidence to fail (>= 20), not incomplete.
    run = gated_run(
        world,
        tmp_path,
        run_id="gate-fail",
        mapping=INVERTED_MAPPING,
        prompts=24,
        max_steps=6,
        boundary_every=2,
    )
    with caplog.at_level(logging.INFO, logger="rewardseal"):
        run.trainer.train()

    # Boundary 0 (the first step's outputs) is audited at the end of step 1: fail -> pause.
    assert run.trainer.state.global_step == 1
    halted = run.gate.halted
    assert halted is not None
    assert (halted.action, halted.outcome, halted.boundary) == ("pause", "fail", 0)
    assert "optimizer_only_rate_above_maximum" in halted.reasons
    assert halted.audit_id == run.monitor.audits[0]
    assert halted.review_command is not None
    assert halted.audit_id in halted.review_command
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert run.gate.checkpoint == str(checkpoint)
    assert (checkpoint / "trainer_state.json").is_file()
    pause_lines = [
        r.getMessage() for r in caplog.records if "REWARD INTEGRITY PAUSE" in r.getMessage()
    ]
    assert len(pause_lines) == 1
    assert halted.audit_id in pause_lines[0]
    assert "optimizer_only_rate_above_maximum" in pause_lines[0]
    assert halted.review_command in pause_lines[0]
    assert any(str(checkpoint) in r.getMessage() for r in caplog.records)

    # Resuming before anyone reviewed it: refused before a single step.
    with pytest.raises(IntegrityHalted) as caught:
        run.trainer.train(resume_from_checkpoint=str(checkpoint))
    assert caught.value.metadata["audit_id"] == halted.audit_id
    assert run.trainer.state.global_step == 1

    # A reviewer reads the samples and lets it go on: the resumed run trains past the reviewed
    # boundary, and the gate keeps watching: boundary 2 fails too, paused after step 3.
    world.admin_control.review_decision(
        halted.audit_id, ipb.ReviewAction.REVIEW_ACTION_CONTINUE, reason="reviewed in the test"
    )
    run.trainer.train(resume_from_checkpoint=str(checkpoint))
    assert run.trainer.state.global_step == 3
    assert run.gate.halted is not None
    assert (run.gate.halted.action, run.gate.halted.boundary) == ("pause", 2)
    assert run.gate.halted.audit_id not in (None, halted.audit_id)
    assert (tmp_path / "out" / "checkpoint-3" / "trainer_state.json").is_file()


@pytest.mark.slow
def test_an_audit_that_passes_lets_the_run_finish(world: World, tmp_path: Path) -> None:
    # 100 distinct records at the boundary: the evidence rule's minimum for a pass.
    run = gated_run(
        world,
        tmp_path,
        run_id="gate-pass",
        mapping=IDENTITY_MAPPING,
        prompts=100,
        max_steps=2,
        boundary_every=1,
    )
    run.trainer.train()

    assert run.trainer.state.global_step == 2
    assert run.gate.halted is None
    # Boundary u is scored in step u + 1 and audited at its end: both boundaries, both pass.
    assert sorted(run.gate.outcomes) == [0, 1]
    for outcome in run.gate.outcomes.values():
        assert (outcome.action, outcome.outcome, outcome.reasons) == ("continue", "pass", ())
    assert not list((tmp_path / "out").glob("checkpoint-*"))
    audits = world.trainer_control.list_audits(run_id="gate-pass")
    assert sorted(audit.boundary for audit in audits) == [0, 1]
    assert all(audit.core_rows == 2 * 100 for audit in audits)


@pytest.mark.slow
def test_an_unmonitored_run_says_so_once_and_trains(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rewardseal.trainers.trl import IntegrityGate

    def length_reward(completions: list[Any], **_: Any) -> list[float]:
        return [float(len(str(completion))) for completion in completions]

    gate = IntegrityGate(None)
    trainer = grpo_trainer(
        length_reward, gate, run_id="unmonitored", prompts=2, max_steps=2, output=tmp_path / "out"
    )
    with caplog.at_level(logging.WARNING, logger="rewardseal"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert gate.halted is None
    assert [r.getMessage() for r in caplog.records if "UNMONITORED" in r.getMessage()] == [
        UNMONITORED_MESSAGE
    ]
