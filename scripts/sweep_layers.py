"""Per-layer sweep of the readout heads: validation and test Spearman at every layer, the layer chosen on
validation per head (`lengthpred.stages.readout_sweep.sweep_layers`).

    .venv/bin/python scripts/sweep_layers.py experiment=demo sweep=layer_curve
    .venv/bin/python scripts/sweep_layers.py experiment=bench sweep=layer_curve hydra.run.dir=outputs/bench/layers

Writes layers.csv, layers.md, layer_choice.json (head → layer, read by scripts/sweep_poolings.py through
sweep.layer_choice) and layer_curves.png into the run directory.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.readout_sweep import run_sweep_layers


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_sweep_layers(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
