"""Load the serving causal LM: an embedded GGUF (cached once as safetensors), a local checkpoint,
an HF id the user's machine can reach, or the tiny random-weight model used by tests.

Nothing here reaches a model hub unless the spec names an HF id. `ModelSpec` lives in `specs`, checkpoints
and tokenizers in `checkpoint`, the tiny model in `tiny`; they are re-exported here.
"""

from __future__ import annotations

import logging

import torch

from lengthpred.errors import ModelError
from lengthpred.models.checkpoint import checkpoint_dir, convert_gguf, load_tokenizer, serving_tokenizer
from lengthpred.models.specs import ModelSpec, package_dir
from lengthpred.models.tiny import build_tiny_llama

log = logging.getLogger(__name__)
_checkpoint_dir = checkpoint_dir  # the name benchmarks and tests use

__all__ = [
    "ModelSpec", "checkpoint_dir", "convert_gguf", "load_causal_lm", "load_tokenizer", "max_context",
    "package_dir", "serving_tokenizer",
]


def load_causal_lm(spec: ModelSpec, device: str | torch.device = "cpu"):
    """(model, tokenizer) in eval mode on `device`."""
    from transformers import AutoModelForCausalLM

    if spec.tiny:
        model = build_tiny_llama(attn_implementation=spec.attn_implementation)
        return model.to(device).eval(), load_tokenizer(spec)
    tok = load_tokenizer(spec)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint_dir(spec), dtype=spec.torch_dtype, attn_implementation=spec.attn_implementation
        )
    except OSError as e:
        raise ModelError(f"model {spec.name!r}: cannot load weights ({e.__class__.__name__}: {e})") from None
    return model.to(device).eval(), tok


def max_context(spec: ModelSpec, model) -> int:
    """The prompt+output token budget: the spec's override or the model config's."""
    return int(spec.max_context or model.config.max_position_embeddings)
