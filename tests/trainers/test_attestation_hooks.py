"""The trainer side of reward attestations (R-A-5, R-A-6): the TRL callback's ``on_save`` and
the verl hook attest a checkpoint directory against a real control plane (port 0, SQLite),
receipts recorded through RecordReceipts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.attestation import CHECKPOINT, DIGEST, FIRST, LAST, sealed, seeded
from support.control import CLIENT_TOKEN, ControlStack, start_control, stop_control

from rewardseal.core.attestation import ATTESTATION_FILE, verify_attestation
from rewardseal.core.errors import NothingToAttest, ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.control_client import AttestationScope, ControlClient
from rewardseal.trainers.attestation import CheckpointAttester
from rewardseal.trainers.trl.attestation import AttestationCore
from rewardseal.trainers.verl.attestation import attest_verl_checkpoint, verl_checkpoint_step


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.db'}")
    await seeded(stack)
    yield stack
    await stop_control(stack)


def client(stack: ControlStack) -> ControlClient:
    return ControlClient(stack.target, token=CLIENT_TOKEN, timeout=10)


def checkpoint(root: Path, name: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"weights")
    (directory / "trainer_state.json").write_text('{"global_step": 1}')
    return directory


def verified(stack: ControlStack, directory: Path) -> dict[str, object]:
    document = json.loads((directory / ATTESTATION_FILE).read_text())
    org = TrustSet([stack.key.public_key])
    return verify_attestation(document, checkpoint=directory, org_keys=org).predicate.to_json()


async def test_on_save_attests_checkpoint_n_over_the_updates_before_n(
    control: ControlStack, tmp_path: Path
) -> None:
    reward = SimpleNamespace(reward_contract_digest=DIGEST, policy_checkpoint_id=CHECKPOINT)
    with client(control) as control_client:
        callback = AttestationCore.for_rewards(
            control_client, reward, first_update=FIRST, settle_seconds=0.05
        )
        # transformers saved checkpoint-<global_step>; the receipts scored at steps before it.
        directory = checkpoint(tmp_path / "out", f"checkpoint-{LAST + 1}")
        args = SimpleNamespace(output_dir=str(tmp_path / "out"))
        state = SimpleNamespace(global_step=LAST + 1, is_world_process_zero=True)
        flags = SimpleNamespace()
        assert await asyncio.to_thread(callback.on_save, args, state, flags) is flags
    predicate = verified(control, directory)
    assert (predicate["policy_update_first"], predicate["policy_update_last"]) == (FIRST, LAST)
    assert predicate["policy_checkpoint_ids"] == [CHECKPOINT]
    assert predicate["receipts"]["total"] == 5  # type: ignore[index]
    assert [a.path for a in callback.attested] == [directory / ATTESTATION_FILE]
    assert callback.unattested == []


async def test_only_the_main_process_attests(control: ControlStack, tmp_path: Path) -> None:
    with client(control) as control_client:
        callback = AttestationCore(control_client, contracts=[DIGEST], settle_seconds=0)
        directory = checkpoint(tmp_path, f"checkpoint-{LAST + 1}")
        state = SimpleNamespace(global_step=LAST + 1, is_world_process_zero=False)
        await asyncio.to_thread(
            callback.on_save, SimpleNamespace(output_dir=str(tmp_path)), state, SimpleNamespace()
        )
    assert not (directory / ATTESTATION_FILE).exists()


async def test_a_checkpoint_with_no_receipts_is_left_unattested_or_raises_when_required(
    control: ControlStack, tmp_path: Path
) -> None:
    directory = checkpoint(tmp_path, "checkpoint-3")
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=3, is_world_process_zero=True)
    with client(control) as control_client:
        lenient = AttestationCore(control_client, contracts=[DIGEST], timeout_seconds=0)
        await asyncio.to_thread(lenient.on_save, args, state, SimpleNamespace())
        assert [path for path, _ in lenient.unattested] == [directory]
        assert "no receipt" in lenient.unattested[0][1]
        assert not (directory / ATTESTATION_FILE).exists()
        strict = AttestationCore(
            control_client, contracts=[DIGEST], timeout_seconds=0, required=True
        )
        with pytest.raises(NothingToAttest):
            await asyncio.to_thread(strict.on_save, args, state, SimpleNamespace())


async def test_the_attester_waits_for_receipts_still_on_their_way(
    control: ControlStack, tmp_path: Path
) -> None:
    """A receipt the outbox delivers between two looks is in the attestation kept."""
    late = [sealed("episode.0099", policy_update=LAST)]
    sleeps: list[float] = []

    with client(control) as control_client:

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if late:
                assert control_client.record_receipts([late.pop()])[0].recorded

        attester = CheckpointAttester(
            control_client,
            contracts=[DIGEST],
            checkpoint_ids=[CHECKPOINT],
            first_update=FIRST,
            sleep=sleep,
        )
        directory = checkpoint(tmp_path, "checkpoint-late")
        written = await asyncio.to_thread(attester.attest, directory, LAST)
    assert written is not None
    assert written.receipt_count == 6
    assert len(sleeps) == 2  # 5 receipts, then 6, then 6 again: settled
    assert verified(control, directory)["merkle"]["size"] == 6  # type: ignore[index]


async def test_the_verl_hook_attests_global_step_n_over_updates_up_to_n(
    control: ControlStack, tmp_path: Path
) -> None:
    directory = checkpoint(tmp_path, f"global_step_{LAST}")
    (directory / "actor").mkdir()
    (directory / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    with client(control) as control_client:
        attester = CheckpointAttester(
            control_client, contracts=[DIGEST], checkpoint_ids=[CHECKPOINT], settle_seconds=0
        )
        written = await asyncio.to_thread(attest_verl_checkpoint, attester, directory)
    assert written is not None
    predicate = verified(control, directory)
    assert (predicate["policy_update_first"], predicate["policy_update_last"]) == (0, LAST)
    assert predicate["receipts"]["total"] == 5  # type: ignore[index]


def test_a_directory_that_is_not_a_verl_checkpoint_is_refused(tmp_path: Path) -> None:
    assert verl_checkpoint_step(tmp_path / "global_step_12") == 12
    for name in ("checkpoint-12", "global_step_", "global_step_1x"):
        with pytest.raises(ValidationError, match="global_step_<N>"):
            verl_checkpoint_step(tmp_path / name)


def test_a_subject_without_a_sha256_is_refused_before_anything_is_sent() -> None:
    scope = AttestationScope(contracts=[DIGEST], first=0, last=1)
    request = scope.request([{"name": "a.bin", "digest": {"sha256": "ab" * 32}}])
    assert [(s.name, s.sha256) for s in request.subjects] == [("a.bin", "ab" * 32)]
    for subject in ({"name": "a.bin"}, {"name": "a.bin", "digest": {"sha512": "00"}}, {}):
        with pytest.raises(ValidationError, match="needs a name and a digest"):
            scope.request([subject])
