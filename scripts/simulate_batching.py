"""Length-aware static batching (ESTP's and ForeLen's end-to-end metric): batches of B requests run until their
longest member finishes; formed by arrival order, at random, by each head's predicted length, or by true length.

    python scripts/simulate_batching.py                       # the heads' test pool (if trained) + the 3 traces
    python scripts/simulate_batching.py experiment=demo       # the demo's heads, after its train stage
    python scripts/simulate_batching.py 'sched.batching.traces=[]' 'sched.batching.batch_sizes=[16]'

Workloads: the heads' pooled test prompts (each request one sampled length, `sched.batching.n_requests` per
seed, the profile `sched.hardware`), and windows of each trace (`sched.traces`: the same windows as
scripts/simulate_traces.py, on `sched.traces.hardware`) with the heads matched by length quantile and noisy
oracles of set Spearman. With `sched.batching.pool_bootstrap` (default: `sched.traces.pool_bootstrap`, true) each
seed uses its own resample of the heads' test prompts, so the intervals cover that finite pool too
(lengthpred/sched/batching/batches.py). Writes into the run dir: batching_runs.csv, batching_results.csv,
batching_spearman.csv, batching.md, padding_B<B>.png (schemas in lengthpred/sched/batching/batches.py).
The stage: lengthpred/stages/batching.py.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lengthpred.cli import stage
from lengthpred.stages.batching import run_static_batching
from lengthpred.stages.outputs import run_dir


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    run_static_batching(cfg, run_dir(cfg))


if __name__ == "__main__":
    main()
