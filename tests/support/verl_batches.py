"""A real ``verl.DataProto`` shaped like a verl rollout batch (needs verl and torch: only the
tests in tests/integrations import this)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import verl

from support.verl_episodes import Played

PROMPT_LEN = 4
RESPONSE_LEN = 6
RESPONSE_LENGTHS = [3, 6, 1, 4]
PAD = 0


def verl_batch(played: Played, *, global_steps: int | None) -> Any:
    """A DataProto shaped like a verl rollout batch for the samples of ``played``."""
    count = len(played.uids)
    prompts = torch.full((count, PROMPT_LEN), PAD, dtype=torch.long)
    responses = torch.full((count, RESPONSE_LEN), PAD, dtype=torch.long)
    attention_mask = torch.zeros((count, PROMPT_LEN + RESPONSE_LEN), dtype=torch.long)
    for row, length in enumerate(RESPONSE_LENGTHS[:count]):
        prompt_tokens = 2 + row % 3  # left padding, as verl's rollout leaves it
        prompts[row, PROMPT_LEN - prompt_tokens :] = torch.arange(10, 10 + prompt_tokens)
        responses[row, :length] = torch.arange(100, 100 + length)
        attention_mask[row, PROMPT_LEN - prompt_tokens : PROMPT_LEN + length] = 1
    meta_info = {} if global_steps is None else {"global_steps": global_steps}
    return verl.DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=-1),
            "attention_mask": attention_mask,
        },
        non_tensors={
            "uid": np.array(played.uids, dtype=object),
            "extra_info": np.array(played.extra_infos, dtype=object),
            "data_source": np.array(["mockmed"] * count, dtype=object),
        },
        meta_info=meta_info,
    )
