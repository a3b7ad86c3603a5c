"""T6 costs of each trained head: parameters, predict latency, update latency and extraction overhead.

`measure_costs(runs, sample, ...)` measures; `write_costs(doc, path)` writes `costs.json` as
`{"meta": ..., "rows": [...]}` (rows: `head, n_parameters, extraction_overhead_pct, predict_latency_ms[,
update_latency_ms]`, read by lengthpred/eval/inputs.py `read_costs`). The stage,
`lengthpred.stages.costs.costs_from_config(cfg)` (scripts/measure_costs.py), finds an experiment's saved
heads (`lengthpred.stages.runs.find_head_runs`: `<experiment>/train/<head>/head`,
`<experiment>/train_proxy/<head>/head`), loads their real inputs and the serving model, and calls it.

Modules: `timing` (the timing primitives), `measure` (`HeadRun`, `CostSettings`, `measure_costs`,
`write_costs`).

- predict latency: one request at a time (batch size 1) on stored inputs (the feature store's column for
  feature heads, the prompt text for proxies, which so pay their own tokenizer + encoder forward here);
  median over `predict_repeats` passes over `predict_prompts` prompts, wall clock.
- extraction overhead: what capturing a head's input adds to a plain prefill of the same prompts, as
  benchmarks/bench_extract.py measures it but per capture kind and for one layer only: hidden states of
  that layer (linear, probe, rls: `last`/`mean`), + next-token entropy over the prompt (egtp: `entropy`),
  + attention received (estp: `fused_*`; `attn` alone: + attention). Plain prefill = the decoder forward
  (no LM head, no KV cache), each variant the same forward under the capture hooks, so the difference is
  the capture alone (a serving engine's last-position logits, the same for both, are left out of both).
  Prompts run one at a time (batch size 1), variants interleaved per repetition; the medians over
  repetitions of the summed time are compared. Heads that read no prefill state (baselines, proxies) have
  overhead 0.
- update latency of the online `rls@λ` heads: the online stage's summary.csv `update_ms` (mean over pairs)
  when it exists, else `RLSRegressor.partial_fit` on one stored row at a time (median).
"""

from lengthpred.costs.measure import (
    CostSettings,
    HeadRun,
    Sample,
    capture_kind,
    capture_settings,
    measure_costs,
    write_costs,
)
from lengthpred.costs.timing import PREFILL, extraction_times, overhead_pct

__all__ = [
    "PREFILL",
    "CostSettings",
    "HeadRun",
    "Sample",
    "capture_kind",
    "capture_settings",
    "extraction_times",
    "measure_costs",
    "overhead_pct",
    "write_costs",
]
