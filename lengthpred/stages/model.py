"""The serving model as every stage loads it, and the model stage (scripts/prepare_model.py).

`model_device(cfg)` is the config's `device` with this process's `LOCAL_RANK` applied (`lengthpred.models.device`);
`model_spec(cfg)` the model config with `dtype: auto` resolved for that device (so a store's key and manifest name
the dtype the model really ran in); `load_model(cfg)` loads it there. Every stage that loads the serving model goes
through `load_model`, so none can leave it on the CPU by forgetting the device.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from lengthpred.models.device import resolve_device, resolve_dtype
from lengthpred.models.serving import load_causal_lm
from lengthpred.models.specs import ModelSpec
from lengthpred.paths import resolve
from lengthpred.stages.outputs import declare_outputs


def model_device(cfg: Any) -> Any:
    """The `torch.device` this process runs the model on: `cfg.device` under its `LOCAL_RANK`."""
    return resolve_device(cfg.get("device", "cpu"))


def model_dtype(cfg: Any) -> str:
    """`cfg.model.dtype` with `auto` resolved for this process's device (a named dtype needs no device: a GPU run's
    config read on a CPU machine still finds its stores)."""
    dtype = str(cfg.model.dtype)
    return dtype if dtype != "auto" else resolve_dtype(dtype, model_device(cfg))


def model_spec(cfg: Any) -> ModelSpec:
    """The model config as a `ModelSpec`, its dtype resolved for this process's device."""
    return dataclasses.replace(instantiate(cfg.model), dtype=model_dtype(cfg))


def load_model(cfg: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of `cfg.model` on this process's device, in eval mode."""
    return load_causal_lm(model_spec(cfg), device=model_device(cfg))


def run_prepare_model(cfg: Any, out: str | Path) -> Path:
    """Load `cfg.model` on its device (which writes its cache), declare the cache and print the model's size.
    Returns the cache folder (`out` when the model has none)."""
    spec = model_spec(cfg)
    model, tok = load_model(cfg)
    cache = resolve(spec.cache_dir) if spec.cache_dir else None
    if cache is not None:
        declare_outputs(cfg, cache)
    n = sum(p.numel() for p in model.parameters())
    print(
        f"{spec.name}: {model.config.num_hidden_layers} layers, d={model.config.hidden_size}, "
        f"{n / 1e6:.1f}M parameters, vocab {len(tok)}, {spec.dtype} on {model_device(cfg)}; "
        f"cached at {spec.cache_dir or spec.path or spec.hf_id}"
    )
    return cache or Path(out)
