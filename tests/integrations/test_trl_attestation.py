"""A checkpoint saved by the TRL example carries a reward attestation that verifies (R-A-6).

Real parts throughout: MockMed over the seeded SQLite system of record, a control plane with
its organization key, the seeded tier-2 worker joined to it (enrolled, certified under an
organization certificate control issued, forwarding its receipts through its outbox), and
examples/trl_grpo.py's ``train`` (TRL's ``GRPOTrainer`` on the tiny policy, paid through the
MockMed actor) with ``RewardAttestationCallback`` saving a checkpoint every step. The servers
serve on an event loop in a thread of their own; the trainer runs in the test's thread.

Each ``checkpoint-N`` must carry ``reward-attestation.dsse.json`` that ``rewardseal attest
verify`` (a subprocess, exit 0) and securesystemslib's DSSE verifier accept, over the receipts
of updates 0..N-1 (the receipts control indexed), and that fails for a changed file.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from securesystemslib.dsse import Envelope
from support.attestation import sslib_key
from support.linked_stack import (
    CLIENT_TOKEN,
    control_receipts,
    issue_certificate,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.loop_thread import LoopThread
from support.mockmed_service import running_mockmed
from support.worker_stack import RunningStack

from rewardseal.core.attestation import ATTESTATION_FILE
from rewardseal.rpc.connection import WorkerConnection
from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal_control.app import ControlApp
from rewardseal_server.sqlstore import sqlite_url

pytest.importorskip("trl")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 2
BATCH = 4  # the example's two prompts times two generations


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hub: everything is built in code, and a download attempt fails loudly."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def example() -> ModuleType:
    """examples/trl_grpo.py as a module (it is a script, not a package)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import trl_grpo
    finally:
        sys.path.remove(str(EXAMPLES))
    return trl_grpo


@dataclass
class Stack:
    loop: LoopThread
    control: ControlApp
    worker: RunningStack
    mockmed_url: str
    mockmed_token: str


@pytest.fixture
def stack(seeded_template: Path, tmp_path: Path) -> Iterator[Stack]:
    data_dir = tmp_path / "worker"
    shutil.copytree(seeded_template, data_dir)
    loop = LoopThread()
    database = data_dir / "mockmed" / "mockmed.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path) as mockmed:
        control = loop.run(start_control_plane(tmp_path))
        worker = loop.run(
            start_linked_worker(
                data_dir,
                control.target,
                control.key,
                db_url=sqlite_url(tmp_path / "receipts.sqlite"),
            )
        )
        try:
            certificate_id = loop.run(issue_certificate(control, data_dir, worker.digest))
            loop.run(scoring_under(worker, certificate_id))
            yield Stack(loop, control, worker, mockmed.url, mockmed.token)
        finally:
            loop.run(worker.app.stop())
            loop.run(control.stop())
            loop.close()


def verify(attestation: Path, org_key: str) -> subprocess.CompletedProcess[str]:
    """``rewardseal attest verify FILE --checkpoint DIR --org-key KEY`` as a user runs it (the
    console script installed beside this interpreter)."""
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("rewardseal")),
            "attest",
            "verify",
            str(attestation),
            "--checkpoint",
            str(attestation.parent),
            "--org-key",
            org_key,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_checkpoint_saved_by_the_trl_example_carries_a_verifiable_attestation(
    stack: Stack, tmp_path: Path
) -> None:
    trl_grpo = example()
    worker = stack.worker
    connection = WorkerConnection(
        target=worker.target,
        token=worker.token,
        worker_public_key=worker.app.key.public_key,
        reward_contract_digest=worker.digest,
    )
    output = tmp_path / "grpo"
    with (
        WorkerClient.connect(connection, timeout=30.0) as worker_client,
        ControlClient(stack.control.target, token=CLIENT_TOKEN, timeout=30.0) as control,
    ):
        found = trl_grpo.Services(worker_client, stack.mockmed_url, stack.mockmed_token)
        steps, attest = trl_grpo.train(found, STEPS, output, control=control, save_steps=1)
    assert [step["certified"] for step in steps] == [BATCH] * STEPS
    assert attest.unattested == []
    assert [a.path.parent.name for a in attest.attested] == ["checkpoint-1", "checkpoint-2"]
    # checkpoint-N is attested over the receipts of updates 0..N-1: BATCH per step.
    assert [a.receipt_count for a in attest.attested] == [BATCH, 2 * BATCH]
    indexed = stack.loop.run(control_receipts(stack.control, worker.digest))
    assert len(indexed) == STEPS * BATCH

    org_key = stack.control.key.public_key.hex()
    for written in attest.attested:
        assert written.path == written.path.parent / ATTESTATION_FILE
        done = verify(written.path, org_key)
        assert done.returncode == 0, done.stdout + done.stderr
        document = json.loads(written.path.read_text())
        accepted = Envelope.from_dict(copy.deepcopy(document)).verify(
            [sslib_key(stack.control.key)], 1
        )
        assert set(accepted) == {stack.control.key.key_id}
    # A changed weight file no longer matches its attestation.
    last = attest.attested[-1].path
    weights = next(p for p in last.parent.iterdir() if p.name.endswith(".safetensors"))
    weights.write_bytes(weights.read_bytes() + b"\0")
    done = verify(last, org_key)
    assert done.returncode == 1
    assert "subject_mismatch" in done.stdout + done.stderr
