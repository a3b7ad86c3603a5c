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
from lengthpred.models.device import (
    choose_device_map,
    free_gpu_bytes,
    resolve_device,
    resolve_dtype,
    weights_bytes,
)
from lengthpred.models.specs import ModelSpec, package_dir
from lengthpred.models.tiny import build_tiny_llama

log = logging.getLogger(__name__)
_checkpoint_dir = checkpoint_dir  # the name benchmarks and tests use

__all__ = [
    "ModelSpec", "checkpoint_dir", "convert_gguf", "load_causal_lm", "load_tokenizer", "max_context",
    "package_dir", "serving_tokenizer",
]


def load_causal_lm(spec: ModelSpec, device: str | torch.device = "cpu"):
    """(model, tokenizer) in eval mode on `device` (a name or a `torch.device`; `lengthpred.models.device`):
    `dtype: auto` resolved for it; on a GPU the weights load straight onto it, or spread over several GPUs
    (`spec.device_map`, or when they do not fit one)."""
    from transformers import AutoModelForCausalLM

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    dtype = getattr(torch, resolve_dtype(spec.dtype, dev))
    if spec.tiny:
        model = build_tiny_llama(attn_implementation=spec.attn_implementation)
        return model.to(device=dev, dtype=dtype).eval(), load_tokenizer(spec)
    tok = load_tokenizer(spec)
    ckpt = checkpoint_dir(spec)
    n_gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    device_map = choose_device_map(spec.device_map, dev, weights=weights_bytes(ckpt), free=free_gpu_bytes(dev),
                                   n_gpus=n_gpus)
    extra = {} if device_map is None else {"device_map": device_map}
    try:
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation=spec.attn_implementation,
                                                     **extra)
    except OSError as e:
        raise ModelError(f"model {spec.name!r}: cannot load weights ({e.__class__.__name__}: {e})") from None
    if device_map is None:
        model = model.to(dev)
    return model.eval(), tok


def max_context(spec: ModelSpec, model) -> int:
    """The prompt+output token budget: the spec's override or the model config's."""
    return int(spec.max_context or model.config.max_position_embeddings)
