"""Score every predictions file of an experiment into one tidy results.csv (metrics with bootstrap CIs).

    .venv/bin/python scripts/evaluate.py experiment=demo
    .venv/bin/python scripts/evaluate.py eval.input_dir=outputs/demo/runs/<time> eval.n_boot=200

Reads `predictions.parquet` files under `eval.input_dir` (docs/DESIGN.md), the reference trace for the
noise ceiling and splits.json for shift sizes; writes `eval.results_file` and logs it to W&B.
The stage: lengthpred/stages/evaluate.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.evaluate import run_evaluate
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_evaluate(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
