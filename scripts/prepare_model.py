"""Dequantise the configured GGUF serving model once and cache it as safetensors.

    python scripts/prepare_model.py                 # the embedded SmolLM2-135M-Instruct
    python scripts/prepare_model.py model=local model.path=... model.gguf_file=... model.cache_dir=...
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.model import run_prepare_model
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_prepare_model(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
