"""The batching stage (scripts/simulate_batching.py): length-aware static batching on the heads' test pool and
on windows of the serving traces (`lengthpred.sched.batching.batches`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from lengthpred.data.serving_traces import load_trace
from lengthpred.errors import DataError
from lengthpred.sched.batching.batches import (
    POOL_DATA,
    pool_draw,
    run_batching,
    summarize_batching,
    trace_draw,
)
from lengthpred.sched.batching.report import batching_table
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.traces.plots import plot_padding
from lengthpred.sched.traces.windows import trace_windows
from lengthpred.stages.head_pool import source_head_pool
from lengthpred.stages.tracking import tracked

log = logging.getLogger("lengthpred")


def static_batching_into(cfg: DictConfig, out: str | Path, tracker: Any) -> Path:
    """Static batches of `sched.batching.batch_sizes` on each workload: writes batching_runs.csv,
    batching_results.csv, batching_spearman.csv, batching.md, batching.json and padding_B<B>.png into
    `out` and prints the table. Returns the folder."""
    sc, b, t = cfg.sched, cfg.sched.batching, cfg.sched.traces
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in b.seeds]
    sizes = [int(x) for x in b.batch_sizes]
    s = sc.source
    pool = source_head_pool(cfg)
    if pool is None:
        log.warning("no predictions.parquet under %s: no heads (run the train stage first)", s.predictions_path)
    boot = bool(b.pool_bootstrap)
    runs, rho = [], []
    if pool is not None:
        r: list[tuple] = []
        runs.append(run_batching(pool_draw(pool, int(b.n_requests), r, pool_bootstrap=boot), data=POOL_DATA,
                                 profile=get_profile(b.hardware), seeds=seeds, batch_sizes=sizes))
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
    return out


def run_static_batching(cfg: DictConfig, out: str | Path) -> Path:
    """The simulate_batching stage (scripts/simulate_batching.py): `static_batching_into(cfg, out, tracker)` with its W&B run. Returns the folder."""
    with tracked(cfg, "simulate_batching") as tracker:
        return static_batching_into(cfg, out, tracker)
