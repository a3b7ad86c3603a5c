"""LAPS-SD, SJF/SRPT, MLFQ and FCFS under speculative decoding: measured n-gram acceptance beside Beta models.

    make spec                                                   # measure (if its file is missing), then this
    python scripts/simulate_spec.py data=bench                  # on data/reference/smollm2-135m/spec_ngram_bench.parquet
    python scripts/simulate_spec.py data=bench sched.spec.predictions_path=outputs/bench   # + the heads' sjf/srpt/laps-sd

Requests are drawn from the measured answers (`sched.spec.path`, made by scripts/measure_acceptance.py), each with
its measured length; the acceptance regimes (measured, measured-rate, beta-matched, beta-7-3) are described in
lengthpred/sched/spec/experiment.py. Profile `sched.spec.hardware` with n_draft = the drafter's k and t_draft =
`sched.spec.t_draft`. Writes into the run dir: spec_runs.csv (tidy, per seed), spec_results.csv (means with
bootstrap CIs), spec_gains.csv (vs FCFS and vs MLFQ), spec_table.csv + spec_table.md (the comparison),
acceptance.md + acceptance.csv + acceptance_requests.csv (how variable acceptance is), spec_latency.png, spec.json.
The stage: lengthpred/stages/spec.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.spec import run_spec


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_spec(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
