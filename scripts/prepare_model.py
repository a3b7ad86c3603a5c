"""Dequantise the configured GGUF serving model once and cache it as safetensors.

    python scripts/prepare_model.py                 # the embedded SmolLM2-135M-Instruct
    python scripts/prepare_model.py model=local model.path=... model.gguf_file=... model.cache_dir=...
"""

from __future__ import annotations

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.models.serving import load_causal_lm
from lengthpred.paths import resolve
from lengthpred.stages.outputs import declare_outputs


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    spec = instantiate(cfg.model)
    model, tok = load_causal_lm(spec)
    if spec.cache_dir:
        declare_outputs(cfg, resolve(spec.cache_dir))
    n = sum(p.numel() for p in model.parameters())
    print(
        f"{spec.name}: {model.config.num_hidden_layers} layers, d={model.config.hidden_size}, "
        f"{n / 1e6:.1f}M parameters, vocab {len(tok)}; cached at {spec.cache_dir or spec.path or spec.hf_id}"
    )


if __name__ == "__main__":
    main()
