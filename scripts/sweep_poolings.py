"""Pooling × head at one layer: every readout head on every pooling, with paired differences against the
last token (same head) and against the reference head (same pooling)
(`lengthpred.stages.readout_sweep.sweep_poolings`).

    .venv/bin/python scripts/sweep_poolings.py experiment=demo sweep=pooling_heads \
        sweep.layer_choice=outputs/demo/layers/layer_choice.json
    .venv/bin/python scripts/sweep_poolings.py experiment=demo sweep=pooling_heads sweep.layers=[20]

Writes poolings.csv, pooling_diffs.csv and poolings.md into the run directory.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.readout_sweep import run_sweep_poolings


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_sweep_poolings(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
