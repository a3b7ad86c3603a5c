"""Online adaptation stage: stream each cross-domain target split through RLS and its baselines.

    .venv/bin/python scripts/adapt.py experiment=demo                      # every pair, conf/online/rls.yaml
    .venv/bin/python scripts/adapt.py online=sweep "online.pairs=['chat->math','summarization->qa']"
    .venv/bin/python scripts/adapt.py online/completion=instant online.forgetting=[1.0,0.99]

Writes curves.csv, summary.csv, gains.csv, predictions.parquet, plots/*.png and adapt.json into the run
directory (outputs/<experiment>/runs/<time>/) and logs them to W&B (offline by default).
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.online.experiment import run_adaptation
from lengthpred.tracking import tracked

log = logging.getLogger("lengthpred.adapt")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    with tracked(cfg, "adapt") as tracker:
        res = run_adaptation(cfg, cfg.paths.output_dir, tracker=tracker)
    log.info("adapt: %s", res)


if __name__ == "__main__":
    main()
