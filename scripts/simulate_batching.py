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
(lengthpred/sched/batching.py). Writes into the run dir: batching_runs.csv, batching_results.csv,
batching_spearman.csv, batching.md, padding_B<B>.png (schemas in lengthpred/sched/batching.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lengthpred.cli import stage
from lengthpred.data.serving_traces import load_trace
from lengthpred.errors import DataError
from lengthpred.sched.batching import POOL_DATA, pool_draw, run_batching, summarize_batching, trace_draw
from lengthpred.sched.batching_report import batching_table
from lengthpred.sched.hardware import get_profile
from lengthpred.sched.trace_plots import plot_padding
from lengthpred.sched.trace_windows import trace_windows
from lengthpred.stages.simulate import has_predictions, load_head_pool
from lengthpred.tracking import tracked

log = logging.getLogger("lengthpred")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@stage
def main(cfg: DictConfig) -> None:
    with tracked(cfg, "simulate_batching") as tracker:
        sc, b, t = cfg.sched, cfg.sched.batching, cfg.sched.traces
        out = Path(sc.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        seeds = [int(s) for s in b.seeds]
        sizes = [int(x) for x in b.batch_sizes]
        s = sc.source
        pool = None
        if has_predictions(s.predictions_path):
            pool = load_head_pool(cfg, s.predictions_path, split=s.split, heads=list(s.heads) if s.heads else None,
                                  samples=bool(s.samples), prompt_tokens=int(s.prompt_tokens))
        else:
            log.warning("no predictions.parquet under %s: no heads (run the train stage first)", s.predictions_path)
        boot = bool(b.pool_bootstrap)
        runs, rho = [], []
        if pool is not None:
            r: list[tuple] = []
            runs.append(run_batching(pool_draw(pool, int(b.n_requests), r, pool_bootstrap=boot), data=POOL_DATA,
                                     profile=get_profile(sc.hardware), seeds=seeds, batch_sizes=sizes))
            rho += [(POOL_DATA, *x) for x in r]
        for name in b.traces:
            df = load_trace(name, Path(t.root), t.on_bad_input)
            ws = trace_windows(df, name, n_requests=int(t.n_requests), n_windows=len(seeds), offset=int(t.offset))
            r = []
            draw = trace_draw(dict(zip(seeds, ws, strict=True)), pool, [float(x) for x in b.trace_spearman], r,
                              pool_bootstrap=boot)
            runs.append(run_batching(draw, data=name, profile=get_profile(t.hardware), seeds=seeds, batch_sizes=sizes))
            rho += [(name, *x) for x in r]
        if not runs:
            raise DataError("nothing to batch: no predictions file and sched.batching.traces=[]")
        runs_df = pd.concat(runs, ignore_index=True)
        runs_df.insert(0, "experiment", cfg.experiment_name)
        results = summarize_batching(runs_df.drop(columns="experiment"))
        rho_df = pd.DataFrame(rho, columns=["data", "seed", "predictor", "spearman"])
        mean_rho = rho_df.groupby(["data", "predictor"])["spearman"].mean().to_dict()
        table = batching_table(results, mean_rho, pool_prompts=len(pool.output) if pool is not None else None,
                               pool_resampled=boot)
        runs_df.to_csv(out / "batching_runs.csv", index=False)
        results.to_csv(out / "batching_results.csv", index=False)
        rho_df.to_csv(out / "batching_spearman.csv", index=False)
        (out / "batching.md").write_text(table + "\n")
        (out / "batching.json").write_text(json.dumps({"config": OmegaConf.to_container(b, resolve=True)}, indent=1))
        if b.plots:
            for B in sizes:
                p = plot_padding(results, out / f"padding_B{B}.png", B)
                tracker.log_image(p.stem, p)
        print(table)
        print(f"wrote {out}/batching_results.csv (+ runs, table, plots)")


if __name__ == "__main__":
    main()
