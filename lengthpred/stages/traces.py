"""The traces stage (scripts/simulate_traces.py): real serving traces as workloads, policies on their windows
with noisy oracles of set Spearman and the heads matched by length quantile (`lengthpred.sched.traces`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthpred.data.serving_traces import load_trace
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.sweep import experiment as ex
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.sched.traces import experiment as te
from lengthpred.sched.traces import report as tr
from lengthpred.sched.traces.plots import plot_quality_curves
from lengthpred.sched.traces.windows import TraceWindow, trace_windows, window_stats
from lengthpred.stages.head_pool import source_head_pool
from lengthpred.stages.tracking import tracked

log = logging.getLogger("lengthpred")


def head_pool(cfg: DictConfig) -> LengthSource | None:
    """The heads' test pool, or None when the train stage has not run (or `sched.traces.heads` is [])."""
    s, t = cfg.sched.source, cfg.sched.traces
    if t.heads is not None and len(t.heads) == 0:
        return None
    pool = source_head_pool(cfg, list(t.heads) if t.heads else None)
    if pool is None:
        log.warning("no predictions.parquet under %s: the traces run with noisy oracles only (run the train "
                    "stage first for the heads)", s.predictions_path)
        return None
    return pool


def windows(cfg: DictConfig, seeds: list[int]) -> tuple[dict[str, list[TraceWindow]], dict[str, dict]]:
    """Each trace's windows (one per seed), and what the loader dropped (on_bad_input=skip)."""
    t = cfg.sched.traces
    out, bad = {}, {}
    for name in t.names:
        df = load_trace(name, Path(t.root), t.on_bad_input)
        bad[name] = {"rows": len(df), **df.attrs.get("bad_input", {})}
        out[name] = trace_windows(df, name, n_requests=int(t.n_requests), n_windows=len(seeds), offset=int(t.offset))
    return out, bad


def traces_into(cfg: DictConfig, out: str | Path, tracker: Any) -> Path:
    """Every policy on each trace's windows at `sched.traces.loads`: writes the trace tables, curves and plots
    into `out` (schemas in lengthpred/sched/traces/experiment.py) and prints the window and needed-Spearman
    tables. Returns the folder."""
    t = cfg.sched.traces
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    profile = get_profile(t.hardware)
    policies = ex.parse_policies(OmegaConf.to_container(t.policies))
    seeds = [int(s) for s in t.seeds]
    wins, bad = windows(cfg, seeds)
    pool = head_pool(cfg)
    stats = window_stats([w for ws in wins.values() for w in ws], profile, list(t.loads))
    print(f"{len(wins)} traces × {len(seeds)} windows of {t.n_requests} on {profile.name}; heads: "
          f"{sorted(pool.preds) if pool is not None else 'none (noisy oracles only)'}")
    runs, lat, preds = te.run_traces(wins, profile, policies, loads=list(t.loads), seeds=seeds,
                                     spearman_levels=[float(x) for x in t.spearman], pool=pool,
                                     sim=OmegaConf.to_container(cfg.sched.sim),
                                     pool_bootstrap=bool(t.pool_bootstrap))
    runs.insert(0, "experiment", cfg.experiment_name)
    summary = ex.summarize_runs(runs.drop(columns="experiment"))
    gain = te.trace_gains(runs, min_oracle_gain=float(cfg.sched.min_oracle_gain))
    curve = te.quality_curve(gain, preds)
    needed = te.spearman_needed(curve)
    for name, df in (("trace_runs", runs), ("trace_results", summary), ("trace_gains", gain),
                     ("trace_predictors", preds), ("trace_windows", stats), ("quality_curve", curve),
                     ("spearman_needed", needed)):
        df.to_csv(out / f"{name}.csv", index=False)
    lat.to_parquet(out / "trace_latencies.parquet", index=False)
    policy_md = tr.policy_table(summary, gain, preds, levels=[float(x) for x in t.table_spearman])
    needed_md = tr.needed_table(needed)
    quality_md = tr.quality_table(curve) + "\n\n" + needed_md
    (out / "trace_policies.md").write_text(policy_md + "\n")
    (out / "predictor_quality.md").write_text(quality_md + "\n")
    (out / "trace_windows.md").write_text(tr.window_table(stats) + "\n")
    (out / "traces.json").write_text(json.dumps({"hardware": profile.to_dict(), "bad_input": bad,
                                                 "config": OmegaConf.to_container(t, resolve=True)}, indent=1))
    if t.plots:
        for load in t.loads:
            p = plot_quality_curves(curve, float(load), out / f"quality_curve_load{float(load):g}.png")
            tracker.log_image(p.stem, p)
    print(tr.window_table(stats))
    print("\n" + needed_md)
    print(f"wrote {out}/trace_results.csv (+ gains, predictors, windows, quality curve, tables, plots)")
    return out


def run_traces(cfg: DictConfig, out: str | Path) -> Path:
    """The simulate_traces stage (scripts/simulate_traces.py): `traces_into(cfg, out, tracker)` with its W&B run. Returns the folder."""
    with tracked(cfg, "simulate_traces") as tracker:
        return traces_into(cfg, out, tracker)
