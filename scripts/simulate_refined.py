"""Refined SRPT/SJF on T5's workloads (issue 27 item 4; lengthpred.stages.refined).

    python scripts/simulate_refined.py sched.source.predictions_path=outputs/demo
    python scripts/simulate_refined.py sched.refined.checkpoints=<decode curve run>/checkpoints.parquet

The first keys the refined rows on a noise model fitted to a curve's Spearman; the second replays a decode
curve's test answers with every head's own per-checkpoint predictions. Writes refined_runs.csv,
refined_results.csv, refined_gains.csv, refined.md and refined.json into the run folder.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.refined import run_refined_sched


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_refined_sched(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
