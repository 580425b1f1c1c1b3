"""Integrity capture through verl's batch hook on a real ``DataProto`` (R-I-3, R-I-5): the reward
tensor is the same with and without capture, and each row digests the sample's valid response
tokens decoded by the trainer's tokenizer (needs verl, torch and tokenizers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import create_binding, make_capture, trainer_client
from support.verl_episodes import manager_kwargs, play_batch, start_default_scoring_stack
from support.worker_stack import RunningStack, stop_stack

from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.verl import CertifiedRewardManager

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")
from support.integrity_trainer import integrity_control  # noqa: E402
from support.verl_batches import RESPONSE_LENGTHS, verl_batch  # noqa: E402

from rewardseal_kit.tiny_models import char_tokenizer  # noqa: E402

__all__ = ["integrity_control"]

RESPONSE = "abcdef"


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_default_scoring_stack(data_dir)
    yield running
    await stop_stack(running)


async def test_the_batch_hook_captures_decoded_responses_and_pays_the_same(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    tokenizer = char_tokenizer()
    binding = await create_binding(integrity_control)
    manager = CertifiedRewardManager(tokenizer, 0, None, **manager_kwargs(stack))
    try:
        plain_batch = verl_batch(await play_batch(stack, "plain"), global_steps=4)
        plain = await asyncio.to_thread(manager, plain_batch)
        with trainer_client(integrity_control) as client:
            manager.capture = make_capture(client, binding, tmp_path / "buffer")
            batch = verl_batch(await play_batch(stack, "capt"), global_steps=4)
            # Readable responses, padded with more letters: only the valid ones may be read.
            letters = tokenizer.convert_tokens_to_ids(list(RESPONSE))
            batch.batch["responses"][:, :] = torch.tensor(
                letters[: batch.batch["responses"].shape[1]]
            )
            captured = await asyncio.to_thread(manager, batch)
            rows = manager.capture.last_rows
    finally:
        manager.close()
    assert torch.equal(plain, captured)
    expected = [output_digest(RESPONSE[:length]) for length in RESPONSE_LENGTHS]
    assert [row.output_digest for row in rows] == expected
    assert [row.policy_update for row in rows] == [4] * 4
