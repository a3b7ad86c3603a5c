"""Scheduling simulator: what a length predictor buys a continuous-batching LLM server (numpy only).

    from lengthpred.sched import Workload, get_profile, make_policy, simulate, summarize
    res = simulate(workload, get_profile("a100-llama2-7b"), make_policy("sjf"), predictions)
    summarize(res)["per_token_latency_mean"]

Modules: `hardware` (step-time cost model, profiles), `workload` (requests, arrivals, capacity),
`predictors` (array / callable / online-adapted predictors), `policies` (registry POLICIES: fcfs, sjf,
rank, srpt, oracle-sjf, oracle-srpt, mlfq/las, laps-sd; `bounds`: amin), `simulator` (event-jump simulation), `runset`
(the running batch and which request to preempt, in lazy heaps), `metrics`, `pool` (the prompts requests
are drawn from, each request with one of its prompt's sampled lengths), `sources` (predictions.parquet,
CASTILLO, synthetic, trace), `experiment` (grids and the results files; their schemas are in its
docstring), `summary` (means with bootstrap intervals over seeds, gains over FCFS, the short T5).
Real serving traces (scripts/simulate_traces.py, simulate_batching.py): `trace_windows` (a trace's windows,
one per seed, scaled to a load), `noisy_oracle` (predictions of a set Spearman), `head_pool` (where the
heads' predictions are; `lengthpred.stages.simulate` reads them with the config's targets) and
`head_mapping` (our heads matched into a trace by length quantile), `trace_experiment` (the grid, gains,
gain against Spearman), `batching` (static batches: padding, useful throughput), `trace_report`,
`batching_report`, `trace_plots`. Never imports torch.
"""

from lengthpred.sched import bounds  # noqa: F401  (registers amin)
from lengthpred.sched.hardware import HARDWARE, HardwareProfile, get_profile
from lengthpred.sched.metrics import summarize, t_interval
from lengthpred.sched.policies import POLICIES, Policy, make_policy
from lengthpred.sched.predictors import (
    ArrayPredictor,
    CallablePredictor,
    OnlineScaledPredictor,
    OraclePredictor,
    Predictor,
)
from lengthpred.sched.simulator import OverloadWarning, SimResult, simulate
from lengthpred.sched.workload import Workload, arrival_times, capacity, noisy_prediction, synthetic_lengths

__all__ = [
    "HARDWARE", "HardwareProfile", "get_profile", "summarize", "t_interval", "POLICIES", "Policy",
    "make_policy", "ArrayPredictor", "CallablePredictor", "OnlineScaledPredictor", "OraclePredictor",
    "Predictor", "OverloadWarning", "SimResult", "simulate", "Workload", "arrival_times", "capacity",
    "noisy_prediction", "synthetic_lengths",
]
