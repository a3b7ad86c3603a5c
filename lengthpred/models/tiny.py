"""A tiny random-weight Llama built from a config in code, for fast tests (no download).

It borrows the embedded SmolLM2 tokenizer so chat templates and token ids are real.
"""

from __future__ import annotations

import torch

from lengthpred.models.checkpoint import serving_tokenizer

TINY_LAYERS = 4
TINY_HIDDEN = 64


def build_tiny_llama(seed: int = 0, attn_implementation: str = "sdpa", vocab_size: int | None = None):
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = vocab_size or len(serving_tokenizer())
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=TINY_HIDDEN,
        intermediate_size=128,
        num_hidden_layers=TINY_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()
