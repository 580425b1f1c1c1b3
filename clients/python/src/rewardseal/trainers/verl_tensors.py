"""Where a verl batch's tensors meet rewardseal: each sample's valid response, its decoded text
(what integrity capture digests) and the reward tensor with each reward on the sample's last
valid response token. torch is imported only when a reward tensor is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rewardseal.core.errors import ValidationError

__all__ = ["last_token_rewards", "response_lengths", "response_texts"]


def response_lengths(data: Any) -> Any:
    """Each sample's count of valid response tokens (a tensor)."""
    if "response_mask" in data.batch.keys():  # noqa: SIM118 (a TensorDict, not a dict)
        return data.batch["response_mask"].sum(dim=-1)
    prompt_len = data.batch["prompts"].shape[-1]
    return data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)


def response_texts(data: Any, tokenizer: Any) -> list[str]:
    """Each sample's valid response tokens, decoded (what the capture digests)."""
    if tokenizer is None:
        raise ValidationError("integrity capture needs the tokenizer to read each response")
    responses = data.batch["responses"]
    lengths = response_lengths(data)
    return [
        str(tokenizer.decode(responses[row, : int(lengths[row])], skip_special_tokens=True))
        for row in range(responses.shape[0])
    ]


def last_token_rewards(data: Any, rewards: Sequence[float]) -> Any:
    """Zeros like ``responses`` with each reward at its sample's last valid response token."""
    import torch

    responses = data.batch["responses"]
    lengths = response_lengths(data)
    reward_tensor = torch.zeros_like(responses, dtype=torch.float32)
    positions = torch.clamp(lengths.long() - 1, min=0)
    rows = torch.arange(reward_tensor.shape[0], device=reward_tensor.device)
    reward_tensor[rows, positions] = torch.tensor(
        list(rewards), dtype=torch.float32, device=reward_tensor.device
    )
    return reward_tensor
