"""Simulate a continuous-batching server under policies × predictors × loads; write the T5 inputs.

    python scripts/simulate.py                                   # demo scale (sched=default)
    python scripts/simulate.py sched.source.kind=synthetic sched.hardware=a100-llama2-7b
    python scripts/simulate.py sched=paper                       # paper scale

Writes into the run dir (schemas in lengthpred/sched/sweep/experiment.py): sched_runs.csv, sched_results.csv,
sched_gains.csv, sched_latencies.parquet, latency_vs_load.png, sched.json; prints a small T5.

A predictions source takes each prompt's sampled lengths and prompt token count from the same targets the
heads were fitted on (the merged generations, else the committed reference trace): every simulated request
draws one sampled length. `sched.source.samples=false` falls back to each prompt's y_true (a smoothed truth).
The stage: lengthpred/stages/simulate.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.simulate import run_simulate


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_simulate(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
