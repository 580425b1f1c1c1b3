"""Tiny models built in code for the trainer examples and integration tests: nothing comes
from a hub, so a GRPO run works offline on a CPU in seconds.

Used by examples/trl_grpo.py and tests/integrations. It needs transformers and tokenizers (the
integrations venv, or ``pip install trl``); both are imported only when a function is called.
"""

from __future__ import annotations

import string
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


def tiny_llama(tokenizer: Any) -> Any:
    """A randomly initialised two-layer Llama, hidden size 32 (seeded, CPU, float32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)
