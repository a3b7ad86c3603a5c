"""Scheduling simulator: what a length predictor buys a continuous-batching LLM server (numpy only).

    from lengthpred.sched import Workload, get_profile, make_policy, simulate, summarize
    res = simulate(workload, get_profile("a100-llama2-7b"), make_policy("sjf"), predictions)
    summarize(res)["per_token_latency_mean"]

Sub-packages, each importing only those below it (pyproject.toml's import-linter contracts):
`core` (the simulator: `hardware` step-time profiles, `workload` requests and arrivals, `predictors`,
`policies` (registry POLICIES: fcfs, sjf, rank, srpt, oracle-sjf, oracle-srpt, mlfq/las, laps-sd, refined-srpt,
refined-sjf; `bounds`: amin; `early`: LAPS-SD's Â), `refine` (predictions refreshed at decode checkpoints), `runset` (the running batch and which request to preempt, in lazy heaps),
`simulator` (event-jump simulation), `metrics`); `sweep` (grids over request pools, T5: `pool`, `sources`
(predictions.parquet, CASTILLO, synthetic, trace), `experiment` (grids and the results files; their schemas
are in its docstring), `refined` (refined SRPT/SJF on T5's requests, scripts/simulate_refined.py), `summary` (means with bootstrap intervals over seeds, gains over FCFS, the short T5),
`plots`); `spec` (speculative decoding: measured n-gram acceptance, LAPS-SD regimes); `traces` (real serving
traces, scripts/simulate_traces.py: `windows`, `noisy_oracle` (predictions of a set Spearman),
`head_mapping` (our heads matched into a trace by length quantile), `experiment` (the grid, gains, gain
against Spearman), `report`, `plots`); `batching` (static batches: padding, useful throughput;
scripts/simulate_batching.py). Never imports torch.
"""

from lengthpred.sched.core import bounds  # noqa: F401  (registers amin)
from lengthpred.sched.core.hardware import HARDWARE, HardwareProfile, get_profile
from lengthpred.sched.core.metrics import summarize, t_interval
from lengthpred.sched.core.policies import POLICIES, Policy, make_policy
from lengthpred.sched.core.predictors import (
    ArrayPredictor,
    CallablePredictor,
    OnlineScaledPredictor,
    OraclePredictor,
    Predictor,
)
from lengthpred.sched.core.simulator import OverloadWarning, SimResult, simulate
from lengthpred.sched.core.workload import (
    Workload,
    arrival_times,
    capacity,
    noisy_prediction,
    synthetic_lengths,
)

__all__ = [
    "HARDWARE", "HardwareProfile", "get_profile", "summarize", "t_interval", "POLICIES", "Policy",
    "make_policy", "ArrayPredictor", "CallablePredictor", "OnlineScaledPredictor", "OraclePredictor",
    "Predictor", "OverloadWarning", "SimResult", "simulate", "Workload", "arrival_times", "capacity",
    "noisy_prediction", "synthetic_lengths",
]
