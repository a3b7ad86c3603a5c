"""Policies × predictors × loads on windows of real serving traces (issue 16, items 1–2).

Each seed replays one window of each trace (`lengthpred.sched.traces.windows`), its arrivals scaled to the
offered load on the hardware profile. Per window the predictors are
- ``noisy@<ρ>``: noisy oracles whose achieved Spearman with the window's true lengths is ρ (± 0.005;
  `lengthpred.sched.traces.noisy_oracle`), one fresh noise draw per window;
- each head of the head pool, and ``prompt-mean``, matched by length quantile (`lengthpred.sched.traces.head_mapping`);
  with `pool_bootstrap` (the default) from the seed's own resample of the pool's prompts
  (`head_mapping.seed_pool`), so the intervals over seeds cover the finite prompt pool the heads' errors come
  from as well as the windows;
and every policy of the grid serves the same window with the same predictions (common random numbers,
`experiment.run_grid`): one pool resample per seed, shared by every policy and every trace.

Outputs (tidy; written by scripts/simulate_traces.py; none is named ``sched_*``, so T5's glob never takes
them):
- ``trace_runs.csv``: ``hardware, data, policy, predictor, load, seed, metric, value`` (data = the trace,
  seed = the window), metrics of `lengthpred.sched.core.metrics.summarize`.
- ``trace_results.csv``: means over windows with percentile-bootstrap 95% intervals (`summarize_runs`).
- ``trace_gains.csv``: ``data, latency_metric`` + `summary.gains`' columns: the gain of each latency metric
  over FCFS (1 − mean(x)/mean(FCFS)) and its share of the clairvoyant oracle's gain, paired over windows.
- ``trace_predictors.csv``: ``data, seed, predictor, kind, target, spearman`` (achieved on the window's
  true lengths) and, for heads, their Spearman on the head pool (the seed's resample when
  ``pool_resampled``), ``pool_prompts`` (its size) and ``pool_resampled``.
- ``trace_windows.csv``: per window and load, the trace's rate and inter-arrival CV, capacity, time
  scale and the CV after scaling (`trace_windows.window_stats`).
- ``quality_curve.csv`` (`quality_curve`): gain against achieved Spearman, per trace, load, policy and
  latency metric; heads' rows carry ``pool_prompts`` and ``pool_resampled`` (what their interval covers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from lengthpred.errors import ConfigError
from lengthpred.metrics import UNDEFINED, spearman_or_nan
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.metrics import bootstrap_mean_intervals
from lengthpred.sched.sweep.experiment import PolicySpec, run_grid
from lengthpred.sched.sweep.pool import CLAIRVOYANT, LengthSource
from lengthpred.sched.sweep.summary import MIN_ORACLE_GAIN, gains
from lengthpred.sched.traces.head_mapping import PROMPT_MEAN, map_heads, seed_pool
from lengthpred.sched.traces.noisy_oracle import noisy_oracle
from lengthpred.sched.traces.windows import TraceWindow

__all__ = ["GAIN_METRICS", "POOL_COLUMNS", "interval_scope", "noisy_label", "quality_curve", "run_traces", "spearman_needed", "trace_gains"]

GAIN_METRICS = ("per_token_latency_mean", "per_token_latency_p99", "jct_mean")
NOISY = "noisy@"
POOL_COLUMNS = ("pool_prompts", "pool_resampled")  # the mapped heads' rows: the pool's size, resampled per seed?


def noisy_label(level: float) -> str:
    return f"{NOISY}{level:g}"


def run_traces(windows: dict[str, list[TraceWindow]], profile: HardwareProfile, policies: list[PolicySpec], *,
               loads: Sequence[float], seeds: Sequence[int], spearman_levels: Sequence[float],
               pool: LengthSource | None = None, heads: list[str] | None = None, sim: dict[str, Any] | None = None,
               pool_bootstrap: bool = True, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, latencies of each trace's first window, predictors) frames (module docstring); window k of
    every trace is replayed under seed `seeds[k]`, its heads mapped from `head_mapping.seed_pool(pool,
    seed, pool_bootstrap)`: with `pool_bootstrap` one resample of the pool's prompts per seed (the same for
    every trace and policy of that seed), else the pool itself for every seed."""
    runs, lats, quality = [], [], []
    pools: dict[int, LengthSource] = {}  # seed → its pool (resample), drawn once
    jobs = [(name, w, s) for name, ws in windows.items() for w, s in zip(ws, seeds, strict=True)]
    for name, w, seed in tqdm(jobs, desc="traces", disable=not progress):
        rng = np.random.default_rng([int(seed), 16])  # the predictors' noise: its own stream per window
        preds: dict[str, np.ndarray] = {}
        for lvl in spearman_levels:
            label = noisy_label(lvl)
            preds[label] = noisy_oracle(w.output, float(lvl), rng=rng)
            quality.append(dict(data=name, seed=seed, predictor=label, kind="noisy", target=float(lvl),
                                spearman=spearman_or_nan(w.output, preds[label])))
        if pool is not None:
            if seed not in pools:
                pools[seed] = seed_pool(pool, int(seed), pool_bootstrap)
            mapped, pool_q = map_heads(pools[seed], w.output, rng, heads)
            clash = sorted(set(mapped) & set(preds))
            if clash:
                raise ConfigError(f"head(s) {clash} share a name with the noisy oracles; rename them")
            preds.update(mapped)
            for r in pool_q.itertuples(index=False):
                quality.append(dict(data=name, seed=seed, predictor=r.predictor,
                                    kind="prompt-mean" if r.predictor == PROMPT_MEAN else "head",
                                    target=math.nan, spearman=spearman_or_nan(w.output, mapped[r.predictor]),
                                    pool_spearman=r.pool_spearman, pool_spearman_mean=r.pool_spearman_mean,
                                    pool_prompts=int(r.pool_prompts), pool_resampled=bool(pool_bootstrap)))
        src = LengthSource(name, w.output, w.prompt, preds, arrival=w.arrival)
        r, lat = run_grid(src, profile, policies, loads=list(loads), seeds=[int(seed)], n_requests=len(w),
                          sim=sim, mean_oracle=False, progress=False)
        runs.append(r)
        if w.index == 0:
            lats.append(lat.assign(data=name))
    return (pd.concat(runs, ignore_index=True), pd.concat(lats, ignore_index=True) if lats else pd.DataFrame(),
            pd.DataFrame(quality))


def interval_scope(rows: pd.DataFrame, unit: str = "windows") -> str:
    """What a table's 95% intervals cover, from the mapped heads' rows of `rows` (trace_predictors.csv or
    quality_curve.csv: ``kind``, ``pool_prompts``, ``pool_resampled``): the windows (seeds) only, or also the
    prompt pool the heads' errors come from."""
    base = f"95% bootstrap CI over {unit}"
    h = rows[rows["kind"].isin(["head", "prompt-mean"])] if "kind" in rows.columns else rows.iloc[:0]
    if not len(h) or "pool_resampled" not in h.columns:
        return base
    m = pd.to_numeric(h["pool_prompts"], errors="coerce").max() if "pool_prompts" in h.columns else math.nan
    pool = f"the {int(m)}-prompt test pool" if np.isfinite(m) else "the test pool"
    resampled = h["pool_resampled"].dropna().astype(str).str.lower() == "true"  # bools, or read back from a CSV
    if len(resampled) and resampled.all():
        return (f"{base}, each with its own resample of {pool} the heads are mapped from: the heads' intervals "
                "cover window and prompt-pool variability")
    return f"{base} only: the heads' intervals leave out the variability of {pool} their errors come from"


def trace_gains(runs: pd.DataFrame, metrics: Sequence[str] = GAIN_METRICS,
                min_oracle_gain: float = MIN_ORACLE_GAIN) -> pd.DataFrame:
    """`summary.gains` per trace and latency metric, paired over windows."""
    out = []
    for name, g in runs.groupby("data", sort=True):
        for m in metrics:
            out.append(gains(g, metric=m, min_oracle_gain=min_oracle_gain).assign(data=name, latency_metric=m))
    cols = ["data", "latency_metric"]
    df = pd.concat(out, ignore_index=True)
    return df[cols + [c for c in df.columns if c not in cols]]


def quality_curve(gain: pd.DataFrame, predictors: pd.DataFrame) -> pd.DataFrame:
    """Gain over FCFS against the predictor's achieved Spearman (mean over windows, with its bootstrap
    interval), one row per (trace, load, policy, predictor, latency metric), for every predictor that is
    noisy or mapped; reference rows (the clairvoyant oracles, MLFQ) carry no Spearman."""
    q = predictors.groupby(["data", "predictor"])["spearman"]
    wide = predictors.pivot_table(index=["data", "predictor"], columns="seed", values="spearman", dropna=False)
    mean, lo, hi = bootstrap_mean_intervals(wide.to_numpy(float))
    rho = pd.DataFrame({"spearman": mean, "spearman_lo": lo, "spearman_hi": hi}, index=wide.index)
    carried = ["kind", "target", *(c for c in POOL_COLUMNS if c in predictors.columns)]
    kind = q.size().rename("n").to_frame().join(predictors.groupby(["data", "predictor"])[carried].first())
    g = gain[gain["metric"] == "gain_vs_fcfs"].rename(columns={"value": "gain", "ci_low": "gain_lo", "ci_high": "gain_hi"})
    g = g.astype({"gain": float, "gain_lo": float, "gain_hi": float})  # the share rows' UNDEFINED made them objects
    g = g.drop(columns=["metric", "n"]).join(rho.join(kind.drop(columns="n")), on=["data", "predictor"])
    g["kind"] = g["kind"].where(g["kind"].notna(), np.where(g["predictor"] == CLAIRVOYANT, "oracle", "none"))
    return g.sort_values(["data", "latency_metric", "load", "policy", "kind", "spearman"]).reset_index(drop=True)


def _oracle_of(policy: str) -> str:
    return f"oracle-{policy}"


def spearman_needed(curve: pd.DataFrame, share: float = 0.5) -> pd.DataFrame:
    """Per (trace, latency metric, load, policy): the achieved Spearman at which the noisy oracle under that
    policy first reaches `share` of its clairvoyant counterpart's gain (oracle-sjf for sjf, …), by linear
    interpolation between sweep levels; UNDEFINED where the clairvoyant gain's interval reaches 0 or the
    curve never gets there."""
    rows = []
    keys = ["data", "latency_metric", "load"]
    for key, g in curve.groupby(keys, sort=True):
        ref = {str(r.policy): r for r in g[g["kind"] == "oracle"].itertuples(index=False)}
        for pol, c in g[g["kind"] == "noisy"].groupby("policy"):
            o = ref.get(_oracle_of(str(pol)))
            c = c.sort_values("spearman")
            val: Any = UNDEFINED
            lowest = False
            if o is not None and o.gain_lo > 0:
                goal = share * o.gain
                x, y = c["spearman"].to_numpy(float), c["gain"].to_numpy(float)
                hit = np.flatnonzero(y >= goal)
                if len(hit):
                    k = hit[0]
                    lowest = k == 0
                    val = float(x[k]) if k == 0 else float(x[k - 1] + (goal - y[k - 1]) * (x[k] - x[k - 1]) / (y[k] - y[k - 1]))
            rows.append(dict(zip(keys, key, strict=True), policy=pol, oracle_gain=o.gain if o is not None else math.nan,
                             share=share, spearman_needed=val, at_lowest=lowest))
    return pd.DataFrame(rows)
