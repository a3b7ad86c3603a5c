"""Fit heads over a grid of stored prefill features (layer × pooling) and table each with a bootstrap CI.

    .venv/bin/python scripts/sweep_features.py experiment=demo                 # which ESTP fusion wins
    .venv/bin/python scripts/sweep_features.py experiment=demo sweep=layers    # linear readout: layer × pooling
    .venv/bin/python scripts/sweep_features.py sweep.heads=[egtp] sweep.layers=[10,20] sweep.poolings=[entropy]

Writes sweep.csv and sweep.md into the run directory; features are extracted first when missing.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.sweep import run_sweep_features


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_sweep_features(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
