"""Which within-bin shape CASTILLO's binned heads should read their median from, on validation and test:

    .venv/bin/python scripts/castillo_within_bin.py experiment=castillo    # probe and egtp, about 6 min

Writes within_bin.csv and within_bin.md (lengthpred.stages.castillo_within_bin) into the run directory.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.castillo_within_bin import run_castillo_within_bin
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_castillo_within_bin(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
