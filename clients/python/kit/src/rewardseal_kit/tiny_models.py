"""Tiny models built in code for the trainer examples and integration tests: nothing comes
from a hub, so a GRPO run works offline on a CPU in seconds.

Used by examples/trl_grpo.py and tests/integrations. It needs transformers and tokenizers (the
integrations venv, or ``pip install trl``); both are imported only when a function is called.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

SPECIAL = ["<pad>", "<unk>", "<bos>", "<eos>"]
"""The special tokens, ids 0..3, ahead of the printable-ASCII alphabet."""


def char_tokenizer(*, padding_side: str = "right") -> Any:
    """A character-level fast tokenizer over printable ASCII (a BPE with no merges)."""
    from tokenizers import (  # type: ignore[import-not-found]
        Tokenizer,
        decoders,
        models,
    )
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(set(string.printable) - set("\x0b\x0c\r"))
    vocab = {token: index for index, token in enumerate(SPECIAL + alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side=padding_side,
    )


def tool_calling_tokenizer(*, padding_side: str = "left") -> Any:
    """The character-level tokenizer with a tool-calling chat template: TRL's copy of
    Qwen2.5's, whose ``<tool_call>`` JSON TRL knows how to parse (``add_response_schema``) and
    which renders the same prefix turn after turn (TRL's multi-turn check). Needs trl."""
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = char_tokenizer(padding_side=padding_side)
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def tiny_llama(
    tokenizer: Any,
    *,
    max_position_embeddings: int = 256,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
) -> Any:
    """A randomly initialised two-layer Llama, hidden size 32 (seeded, CPU, float32).

    ``max_position_embeddings``: the longest sequence; a multi-turn tool episode on the
    character-level tokenizer (its chat template's tool schemas, the tools' answers) needs a few
    thousand. ``hidden_size`` (a multiple of 4; the MLP is twice as wide) and
    ``num_hidden_layers``: a larger policy, for the learning proof's warm start."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def tiny_grpo_config(
    output_dir: Path | str,
    *,
    max_steps: int,
    batch: int,
    num_generations: int,
    max_completion_length: int = 12,
    save_steps: int | None = None,
    learning_rate: float = 1e-3,
    seed: int = 0,
) -> Any:
    """TRL's ``GRPOConfig`` for a short, seeded CPU run of the tiny policy: ``batch``
    completions per step (whole groups of ``num_generations``), no KL term, no checkpoints
    (``save_steps``: a ``checkpoint-N`` every that many steps), no reporting, no progress
    bars."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=batch,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        beta=0.0,
        logging_steps=1,
        save_strategy="no" if save_steps is None else "steps",
        save_steps=save_steps or 500,
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
