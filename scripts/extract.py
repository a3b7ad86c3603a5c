"""Extract prefill features (hidden states pooled per layer, entropy, attention importance) for a data config.

    python scripts/extract.py                                   # embedded SmolLM2, data=demo, all layers
    python scripts/extract.py features.layers=[10,20,30] features.fused=[]  # fewer columns
    python scripts/extract.py shard=0/4                         # one slice of four (resumes what exists)
    torchrun --nproc-per-node 4 scripts/extract.py device=cuda  # one shard per process (RANK/WORLD_SIZE)

Writes `${paths.data_dir}/features/<model.name>/<cache-key>/` and prints that path; a rerun resumes.
The stage: lengthpred/stages/features.py (`run_extract`).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.features import run_extract
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_extract(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
