"""The model stage (scripts/prepare_model.py): the configured serving model loaded once, its safetensors cache
written (a GGUF is dequantised) and declared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from lengthpred.models.serving import load_causal_lm
from lengthpred.paths import resolve
from lengthpred.stages.outputs import declare_outputs


def run_prepare_model(cfg: Any, out: str | Path) -> Path:
    """Load `cfg.model` (which writes its cache), declare the cache and print the model's size. Returns the
    cache folder (`out` when the model has none)."""
    spec = instantiate(cfg.model)
    model, tok = load_causal_lm(spec)
    cache = resolve(spec.cache_dir) if spec.cache_dir else None
    if cache is not None:
        declare_outputs(cfg, cache)
    n = sum(p.numel() for p in model.parameters())
    print(
        f"{spec.name}: {model.config.num_hidden_layers} layers, d={model.config.hidden_size}, "
        f"{n / 1e6:.1f}M parameters, vocab {len(tok)}; cached at {spec.cache_dir or spec.path or spec.hf_id}"
    )
    return cache or Path(out)
