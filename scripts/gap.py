"""Where the gap to the noise ceiling is: learning curves (with the train size a fitted trend says would reach 0.90
of the ceiling), the test error by domain, prompt length, capped share and answer length, and the prompts every
head gets wrong against their own sampling noise.

    .venv/bin/python scripts/gap.py experiment=bench
    .venv/bin/python scripts/gap.py experiment=bench +gap.extra_predictions.lora=<train_run>/predictions.parquet

Writes gap.md, gap_*.csv and learning_curve.png into the run directory (lengthpred/stages/gap.py); features are
extracted first when missing.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.gap import run_gap_stage
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_gap_stage(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
