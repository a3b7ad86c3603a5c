"""Distributional heads and scores (issue 26): pinball, CRPS, coverage and PIT of one sampled length, capped
samples as censored observations, and the censored head checked against a known truth.

    .venv/bin/python scripts/evaluate_dist.py experiment=demo                       # hs.L20.last features
    .venv/bin/python scripts/evaluate_dist.py experiment=bench distribution.features=trace  # no extraction needed

Writes dist.md, dist_*.csv and dist_pit.png into the run directory (lengthpred/stages/dist.py); with
distribution.features=hs the feature store is extracted first when missing.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.dist import run_evaluate_dist
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_evaluate_dist(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
