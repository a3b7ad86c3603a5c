"""Costs of the experiment's trained heads for table T6: parameters, predict latency (batch size 1),
update latency of the online rls@λ heads and extraction overhead relative to a plain prefill.

    .venv/bin/python scripts/measure_costs.py experiment=demo
    .venv/bin/python scripts/measure_costs.py experiment=demo costs.extract_prompts=8 costs.extract_repeats=5

Reads outputs/<experiment>/train*/<head>/head (scripts/train.py), the feature store and the serving model;
writes costs.json into the run directory (outputs/<experiment>/runs/<time>/), which scripts/make_tables.py
picks up (lengthpred.stages.locations.costs_file). Keys: conf/costs/default.yaml.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.costs import run_measure_costs
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_measure_costs(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
