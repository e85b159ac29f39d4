"""A tiny word-level tokenizer and a tiny Llama, built and saved locally (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

WORDS = ["the", "answer", "is", "4", "5", "what", "2+2", "?", "yes", "no"]


def tiny_tokenizer(directory: Path) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(directory)
    return tokenizer


def tiny_model(directory: Path, vocab_size: int) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory)
    return model
