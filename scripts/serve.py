"""Serve test prompts on a real vLLM engine under FCFS / predicted-SJF / oracle priorities, and check the
simulator against it.

    make serve                                                     # the default comparison, from .venv-vllm
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=2 OMP_WAIT_POLICY=ACTIVE \
      .venv-vllm/bin/python scripts/serve.py experiment=demo       # the same, by hand
    .venv-vllm/bin/python scripts/serve.py serve=smoke             # ≈2 min: does the engine serve and time?
    python scripts/serve.py serve.engine.kind=fake                 # the fake engine (known step times), any venv

Writes into the run dir (schemas in lengthpred/serve/experiment.py): serve_runs.csv (tidy, T5 format: real
and simulated), serve_results.csv (means over repeats with 95% CIs), serve_gains.csv (vs FCFS),
serve_fidelity.csv + fidelity_summary.csv (simulated vs real on the calibration profile),
fidelity_in_sample_summary.csv (on a profile refitted on every run), step_residuals.csv (step-time model vs
measured per regime), serve_requests.parquet, serve_steps.parquet, calibration_steps.parquet, profile.json,
serve.json, serve_latency_cdf.png, serve_queue.png, serve_paired.csv (paired gains over FCFS: exact sign-flip
p over repeats, an interval only with >= 10 repeats, the leave-one-request-out range), serve_drift.csv (each
run's step-time drift from the profile), serve_starvation.csv (every stored workload under FCFS, SJF and SJF
with aging in the simulator), calibration_check.json, serve_paired_prefill_first.csv (with `fcfs-pf` among the
policies: every gain over FCFS that also serves prefills first, i.e. what the predictions alone buy); prints the
tables. Workloads: `serve.arrival=gamma|trace` (`serve.trace_name=azure2023_conv`), `serve.answers=natural`
(answers end at their own EOS), `serve.engine.max_num_seqs`, `experiment=bench` (the bench test pool);
`serve.profile_path=<run>/profile.json` replays them on one calibration. `scripts/serve_merge.py` joins stored
runs that pair; `scripts/serve_workloads.py` tables fidelity across workload folders.
The stage: lengthpred/stages/serve.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.outputs import run_dir
from lengthpred.stages.serve import run_serve


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_serve(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
