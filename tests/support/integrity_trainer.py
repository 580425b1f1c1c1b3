"""The trainer side of reward integrity on real parts: a control plane over a SQLite file that can
be stopped and restarted on the same port and data, a reward-system revision created by the
admin, a capture over a buffer directory, and a sentinel's receipts for SoR episodes.

The servers serve on the test's event loop and the capture's clients block, so every capture
call runs in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rewardseal.core.errors import IntegrityHalted
from rewardseal.core.integrity import RewardMapping
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.integrity.buffer import SignalBuffer
from rewardseal.trainers.integrity.capture import CapturedSample, IntegrityCapture
from rewardseal.trainers.integrity.gate import BoundaryGate, StepGate
from rewardseal.trainers.integrity.monitor import IntegrityBinding, IntegrityMonitor
from rewardseal.trainers.verl.loop_gate import LoopGate, install_loop_gate
from rewardseal_kit.mockmed import IDENTITY_KEY
from rewardseal_server.sqlstore import sqlite_url
from support.control import ADMIN_TOKEN, CLIENT_TOKEN, ControlStack, start_control, stop_control
from support.integrity_specs import spec

PROTOCOL = "exhaustive"
PROFILE = "human_aligned_integrity"
RUNTIME = "python3.11 test-trainer"
MAPPING = RewardMapping.from_json(spec()["mapping"])


async def control_on_file(path: Path) -> ControlStack:
    """A control plane over the SQLite file ``path`` on a free port."""
    return await start_control(sqlite_url(path))


@pytest.fixture
async def integrity_control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    """A control plane over ``tmp_path / "control.sqlite"`` for one test, stopped after it."""
    stack = await control_on_file(tmp_path / "control.sqlite")
    yield stack
    await stop_control(stack)


async def restart_control(stopped: ControlStack, path: Path) -> ControlStack:
    """Start control again on the same file, key and port a stopped stack had."""
    return await start_control(
        sqlite_url(path), key=stopped.key, register_key=False, port=stopped.running.port
    )


async def stop(stack: ControlStack) -> None:
    await stop_control(stack)


def trainer_client(stack: ControlStack, *, timeout: float = 5.0) -> IntegrityClient:
    """The trainer's blocking integrity client (a short deadline: outages show fast)."""
    return IntegrityClient(stack.target, token=CLIENT_TOKEN, timeout=timeout, retries=0)


def admin_client(stack: ControlStack) -> IntegrityClient:
    return IntegrityClient(stack.target, token=ADMIN_TOKEN, timeout=20.0)


async def create_binding(stack: ControlStack, **spec_options: Any) -> IntegrityBinding:
    """Create the reward system ``spec(**spec_options)`` as the admin; the run's binding."""

    def create() -> str:
        with admin_client(stack) as admin:
            return admin.create_reward_system(spec(**spec_options)).revision.revision_id

    system_id = await asyncio.to_thread(create)
    return IntegrityBinding(system_id, PROTOCOL, PROFILE)


def make_capture(
    control: IntegrityClient,
    binding: IntegrityBinding,
    buffer_dir: Path,
    *,
    run_id: str = "run-capture-0001",
    sentinel: WorkerClient | None = None,
    sentinel_digest: str | None = None,
    max_rows: int = 100_000,
    retry_after_s: float = 0.0,
) -> IntegrityCapture:
    """A capture for ``binding`` buffering under ``buffer_dir``."""
    return IntegrityCapture(
        control,
        run_id=run_id,
        system_revision_id=binding.system_revision_id,
        protocol_revision_id=binding.protocol_revision_id,
        mapping=MAPPING,
        buffer=SignalBuffer(buffer_dir, max_rows=max_rows),
        runtime_identity=RUNTIME,
        checkpoint="policy_checkpoint_0000",
        sentinel=sentinel,
        sentinel_contract_digest=sentinel_digest,
        retry_after_s=retry_after_s,
    )


def samples(
    records: Sequence[int],
    *,
    raw: Sequence[float | None],
    prefix: str = "episode",
    patients: bool = False,
) -> list[CapturedSample]:
    """One sample per record; ``patients`` gives each the oracle identity of its own patient
    (what a sentinel SoR episode is opened and scored with)."""
    return [
        CapturedSample(
            record_id=f"rec-{record}",
            candidate=0,
            episode_id=f"{prefix}-{record}",
            output_text=f"completion for record {record}",
            optimizer_raw=value,
            group_id=f"group-{record}",
            identity={IDENTITY_KEY: patient_for(prefix, record)} if patients else None,
        )
        for record, value in zip(records, raw, strict=True)
    ]


async def deliver_when_back(capture: IntegrityCapture, *, within: float = 30.0) -> None:
    """Deliver what waits on disk as later training steps would: again and again until control
    (just restarted; the channel may still be backing off its reconnect) takes all of it."""
    async with asyncio.timeout(within):
        delivered = False
        while not delivered:
            delivered = await asyncio.to_thread(capture.deliver, force=True)
            await asyncio.sleep(0 if delivered else 0.2)


def patient_for(prefix: str, record: int) -> str:
    return f"patient-{prefix}-{record}"


def check_paused(
    gate: BoundaryGate,
    caught: pytest.ExceptionInfo[IntegrityHalted],
    audits: Sequence[Any],
    *,
    boundary: int,
) -> None:
    """``gate`` halted at ``boundary`` on the one audit listed: a pause for incomplete evidence,
    and the exception names the audit, the action and the review command."""
    halted = gate.halted
    assert halted is not None
    outcome = (halted.action, halted.outcome, halted.boundary)
    assert outcome == ("pause", "incomplete_evidence", boundary)
    assert [audit.audit_id for audit in audits] == [halted.audit_id]
    assert caught.value.reason == "integrity_halted"
    assert caught.value.metadata == {"action": "pause", "audit_id": halted.audit_id}
    assert halted.audit_id is not None
    assert halted.audit_id in str(caught.value)
    assert halted.review_command is not None
    assert halted.review_command in str(caught.value)


@dataclass(frozen=True)
class DriverGate:
    """A verl reward loop's driver-side gate over a capture, with the trainer's client."""

    client: IntegrityClient
    capture: IntegrityCapture
    gate: LoopGate


@contextmanager
def driver_gate(
    stack: ControlStack,
    binding: IntegrityBinding,
    buffer_dir: Path,
    *,
    tokenizer: Any = None,
    boundary_every: int = 1,
    policy_update: int | None = None,
    install: bool = False,
) -> Iterator[DriverGate]:
    """A ``LoopGate`` over a fresh capture (audits answered within a minute); ``install``: the
    one ``assemble_rm_scores`` and ``generate_sequences`` run in this process while open."""
    with trainer_client(stack, timeout=20.0) as client:
        capture = make_capture(client, binding, buffer_dir)
        capture.boundary_every = boundary_every
        monitor = IntegrityMonitor(client, binding, capture=capture, audit_timeout_s=60.0)
        gate = LoopGate(
            capture, StepGate(monitor), tokenizer=tokenizer, policy_update=policy_update
        )
        if install:
            install_loop_gate(gate)
        try:
            yield DriverGate(client, capture, gate)
        finally:
            if install:
                install_loop_gate(None)
