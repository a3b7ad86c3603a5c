"""Real serving traces as workloads: FCFS / SJF / SRPT / MLFQ / oracles on the Azure 2023 and Mooncake traces,
with noisy oracles of set Spearman and our heads matched by length quantile; gain against Spearman.

    python scripts/simulate_traces.py                                   # 3 traces × 10 windows of 800 × 2 loads
    python scripts/simulate_traces.py experiment=demo                   # with the demo's heads (after its train stage)
    python scripts/simulate_traces.py 'sched.traces.names=[azure2023_conv]' sched.traces.n_requests=1900

Each seed replays one window of each trace (`sched.traces`), arrivals scaled by one constant to the offered
load on `sched.traces.hardware`. With `sched.traces.pool_bootstrap` (default true) each seed maps the heads
from its own resample of their test prompts, so the intervals cover that finite pool as well as the
windows (lengthpred/sched/traces/head_mapping.py). Heads come from the train stage's predictions files
(`sched.source.predictions_path`); without any, only the noisy oracles run. Writes into the run dir
(schemas in lengthpred/sched/traces/experiment.py): trace_runs.csv, trace_results.csv, trace_gains.csv,
trace_predictors.csv, trace_windows.csv, quality_curve.csv, spearman_needed.csv, trace_latencies.parquet,
trace_policies.md, predictor_quality.md, trace_windows.md, quality_curve_load<L>.png, traces.json.
The stage: lengthpred/stages/traces.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.traces import run_traces


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_traces(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
