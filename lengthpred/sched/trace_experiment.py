"""Policies × predictors × loads on windows of real serving traces (issue 16, items 1–2).

Each seed replays one window of each trace (`lengthpred.sched.trace_windows`), its arrivals scaled to the
offered load on the hardware profile. Per window the predictors are
- ``noisy@<ρ>``: noisy oracles whose achieved Spearman with the window's true lengths is ρ (± 0.005;
  `lengthpred.sched.noisy_oracle`), one fresh noise draw per window;
- each head of the head pool, and ``prompt-mean``, matched by length quantile (`lengthpred.sched.head_mapping`);
and every policy of the grid serves the same window (common random numbers, `experiment.run_grid`).

Outputs (tidy; written by scripts/simulate_traces.py; none is named ``sched_*``, so T5's glob never takes
them):
- ``trace_runs.csv``: ``hardware, data, policy, predictor, load, seed, metric, value`` (data = the trace,
  seed = the window), metrics of `lengthpred.sched.metrics.summarize`.
- ``trace_results.csv``: means over windows with percentile-bootstrap 95% intervals (`summarize_runs`).
- ``trace_gains.csv``: ``data, latency_metric`` + `summary.gains`' columns: the gain of each latency metric
  over FCFS (1 − mean(x)/mean(FCFS)) and its share of the clairvoyant oracle's gain, paired over windows.
- ``trace_predictors.csv``: ``data, seed, predictor, kind, target, spearman`` (achieved on the window's
  true lengths) and, for heads, their Spearman on the head pool.
- ``trace_windows.csv``: per window and load, the trace's rate and inter-arrival CV, capacity, time
  scale and the CV after scaling (`trace_windows.window_stats`).
- ``quality_curve.csv`` (`quality_curve`): gain against achieved Spearman, per trace, load, policy and
  latency metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from lengthpred.errors import ConfigError
from lengthpred.metrics import UNDEFINED
from lengthpred.sched.experiment import PolicySpec, run_grid
from lengthpred.sched.hardware import HardwareProfile
from lengthpred.sched.head_mapping import PROMPT_MEAN, map_heads
from lengthpred.sched.metrics import bootstrap_mean_intervals
from lengthpred.sched.noisy_oracle import noisy_oracle, spearman
from lengthpred.sched.pool import CLAIRVOYANT, LengthSource
from lengthpred.sched.summary import MIN_ORACLE_GAIN, gains
from lengthpred.sched.trace_windows import TraceWindow

__all__ = ["GAIN_METRICS", "noisy_label", "quality_curve", "run_traces", "spearman_needed", "trace_gains"]

GAIN_METRICS = ("per_token_latency_mean", "per_token_latency_p99", "jct_mean")
NOISY = "noisy@"


def noisy_label(level: float) -> str:
    return f"{NOISY}{level:g}"


def run_traces(windows: dict[str, list[TraceWindow]], profile: HardwareProfile, policies: list[PolicySpec], *,
               loads: Sequence[float], seeds: Sequence[int], spearman_levels: Sequence[float],
               pool: LengthSource | None = None, heads: list[str] | None = None, sim: dict[str, Any] | None = None,
               progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, latencies of each trace's first window, predictors) frames (module docstring); window k of
    every trace is replayed under seed `seeds[k]`."""
    runs, lats, quality = [], [], []
    jobs = [(name, w, s) for name, ws in windows.items() for w, s in zip(ws, seeds, strict=True)]
    for name, w, seed in tqdm(jobs, desc="traces", disable=not progress):
        rng = np.random.default_rng([int(seed), 16])  # the predictors' noise: its own stream per window
        preds: dict[str, np.ndarray] = {}
        for lvl in spearman_levels:
            label = noisy_label(lvl)
            preds[label] = noisy_oracle(w.output, float(lvl), rng=rng)
            quality.append(dict(data=name, seed=seed, predictor=label, kind="noisy", target=float(lvl),
                                spearman=spearman(w.output, preds[label])))
        if pool is not None:
            mapped, pool_q = map_heads(pool, w.output, rng, heads)
            clash = sorted(set(mapped) & set(preds))
            if clash:
                raise ConfigError(f"head(s) {clash} share a name with the noisy oracles; rename them")
            preds.update(mapped)
            for r in pool_q.itertuples(index=False):
                quality.append(dict(data=name, seed=seed, predictor=r.predictor,
                                    kind="prompt-mean" if r.predictor == PROMPT_MEAN else "head",
                                    target=math.nan, spearman=spearman(w.output, mapped[r.predictor]),
                                    pool_spearman=r.pool_spearman, pool_spearman_mean=r.pool_spearman_mean))
        src = LengthSource(name, w.output, w.prompt, preds, arrival=w.arrival)
        r, lat = run_grid(src, profile, policies, loads=list(loads), seeds=[int(seed)], n_requests=len(w),
                          sim=sim, mean_oracle=False, progress=False)
        runs.append(r)
        if w.index == 0:
            lats.append(lat.assign(data=name))
    return (pd.concat(runs, ignore_index=True), pd.concat(lats, ignore_index=True) if lats else pd.DataFrame(),
            pd.DataFrame(quality))


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
    kind = q.size().rename("n").to_frame().join(predictors.groupby(["data", "predictor"])[["kind", "target"]].first())
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
