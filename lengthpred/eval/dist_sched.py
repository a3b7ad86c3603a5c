"""Schedulers that use a predicted distribution, against point SJF, in the simulator (issue 26, item 3).

Keys per request, from a head's predicted distribution of one sampled length, all on the served length
min(L, cap) (a server stops at the cap):
- `<head>:mean`: E[min(L, cap)] (SJF on the expected length);
- `<head>:q0.5`, `<head>:q0.9`: SJF by a quantile (JITServe starts from an upper quantile);
- `<head>:cvar`: E + β·CVaR_0.9, CVaR_0.9 = E[min(L, cap) | L ≥ q0.9] (TIE's key, with β fixed);
- `<head>:tie-queue`: the same key with TIE's own β rule, clip(0.1 · waiting / batch cap, 0.1, 0.5) from the
  waiting queue when the request arrives, then kept (`lengthpred.sched.core.predictors.QueueTIEPredictor`);
- `<head>:q0.1` under `amin`: the lower bound of Chen–Ye–Zhou's A_min, raised to the tokens generated
  (lengthpred.sched.core.bounds); `amin` evicts by recomputation (the simulator's default), `amin-swap` by
  swapping the KV cache out and back; `amin-nopreempt` never evicts for a smaller key (only under memory pressure,
  the largest raised bound goes first), so it admits as SJF on the bound does.
`linear` (the point readout) is point SJF, and also A_min's key taken as a bound. Requests are drawn from
the test prompts, each with one of its prompt's sampled lengths and its real prompt token count; every
policy and key of a seed serves the same requests (lengthpred.sched.sweep.experiment.run_grid).

A distribution can only reorder requests where its shape differs between prompts: under a log-normal with
one shared σ, every quantile, the mean and the CVaR key are increasing functions of μ and order the
requests identically. So the censored head is run here with σ depending on the features (`scale="linear"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.distributions import LengthDistribution, tail_mean, tie_key
from lengthpred.sched import get_profile
from lengthpred.sched.sweep.experiment import parse_policies, run_grid
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.sched.sweep.summary import gains, summarize_runs


def uncertainty_keys(name: str, dist: LengthDistribution, cap: float, beta: float = 0.5) -> dict[str, np.ndarray]:
    """The keys of the module docstring for one head's distributions (one per prompt)."""
    q = np.minimum(dist.quantile([0.1, 0.5, 0.9]), cap)
    mean = dist.mean(cap=cap)
    return {f"{name}:mean": mean, f"{name}:q0.5": q[:, 1], f"{name}:q0.9": q[:, 2],
            f"{name}:cvar": tie_key(dist, cap, beta), f"{name}:q0.1": np.maximum(q[:, 0], 1.0)}


def queue_tie_keys(name: str, dist: LengthDistribution, cap: float) -> tuple[dict[str, np.ndarray],
                                                                              dict[str, np.ndarray]]:
    """({`<head>:tie-queue`: E[min(L, cap)]}, {`<head>:tie-queue`: CVaR_0.9}): the parts of TIE's key whose β
    the simulator sets from the queue (`LengthSource.tails`)."""
    k = f"{name}:tie-queue"
    return {k: dist.mean(cap=cap)}, {k: tail_mean(dist, cap)}


def run_uncertainty_sched(samples: Sequence[Sequence[int]], prompt_tokens: np.ndarray, keys: dict[str, np.ndarray],
                          *, hardware: str, loads: list[float], seeds: list[int], n_requests: int,
                          lower_bounds: Sequence[str], tails: dict[str, np.ndarray] | None = None,
                          progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, gains) over seeds: FCFS, the clairvoyant oracle, SJF on every key, A_min (preemptive and
    not) on `lower_bounds`; a key in `tails` is TIE's with β from the queue (`queue_tie_keys`)."""
    output = np.array([np.mean(s) for s in samples], dtype=float)
    source = LengthSource("dist", output, np.asarray(prompt_tokens, dtype=float), preds=dict(keys),
                          samples=[list(s) for s in samples], tails=dict(tails or {}))
    profile = get_profile(hardware)
    common: dict[str, Any] = dict(loads=loads, seeds=seeds, n_requests=n_requests, mean_oracle=False,
                                  progress=progress)
    point = [k for k in keys if ":" not in k or k.endswith((":mean", ":q0.5", ":q0.9", ":cvar", ":tie-queue"))]
    runs_a, _ = run_grid(source, profile, parse_policies(["fcfs", "sjf", "oracle-sjf"]), predictors=point, **common)
    amin = parse_policies(["amin", {"name": "amin", "label": "amin-swap", "preemption": "swap"},
                           {"name": "amin", "label": "amin-nopreempt", "preemptive": False}])
    runs_b, _ = run_grid(source, profile, amin, predictors=list(lower_bounds), **common)
    runs = pd.concat([runs_a, runs_b], ignore_index=True)
    own = [paired_vs(runs[runs["predictor"].str.startswith(f"{h}:")], ("sjf", f"{h}:mean")).assign(
        metric="gain_vs_own_mean") for h in dict.fromkeys(k.split(":")[0] for k in keys if ":" in k)]
    return summarize_runs(runs), pd.concat([gains(runs), paired_vs(runs, ("sjf", "linear")), *own],
                                           ignore_index=True)


def paired_vs(runs: pd.DataFrame, ref: tuple[str, str], metric: str = "per_token_latency_mean",
              n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Gain of every (policy, predictor) over `ref` on the same seeds, 1 − mean(x)/mean(ref), with a paired
    percentile bootstrap over seeds (rows with metric `gain_vs_<policy>:<predictor>`)."""
    d = runs[runs["metric"] == metric].pivot_table(index=["load", "seed"], columns=["policy", "predictor"],
                                                   values="value")
    if ref not in d.columns:
        return pd.DataFrame()
    rng = np.random.default_rng(seed)
    rows = []
    for load, block in d.groupby(level="load"):
        r = block[ref].to_numpy(float)
        idx = rng.integers(0, len(r), size=(n_boot, len(r)))
        for col in block.columns:
            x = block[col].to_numpy(float)
            reps = 1 - x[idx].mean(axis=1) / r[idx].mean(axis=1)
            rows.append({"policy": col[0], "predictor": col[1], "load": float(load),
                         "metric": f"gain_vs_{ref[0]}:{ref[1]}", "value": 1 - x.mean() / r.mean(),
                         "ci_low": float(np.quantile(reps, 0.025)), "ci_high": float(np.quantile(reps, 0.975)),
                         "n": len(x)})
    return pd.DataFrame(rows)


def sched_markdown(summary: pd.DataFrame, gain: pd.DataFrame, load: float) -> str:
    """Mean, median and p99 per-token latency (ms/token) at one load; gains in mean per-token latency over
    FCFS, over point SJF (linear) and over SJF on the same head's expected length, paired over seeds."""
    s = summary[np.isclose(summary["load"], load)]
    at = gain[np.isclose(gain["load"], load)]
    g = at[at["metric"] == "gain_vs_fcfs"].set_index(["policy", "predictor"])
    gp = at[at["metric"] == "gain_vs_sjf:linear"].set_index(["policy", "predictor"])
    go = at[at["metric"] == "gain_vs_own_mean"].set_index(["policy", "predictor"])
    lines = ["| policy | key | mean ms/token [95% CI] | median | p99 | gain vs FCFS [95% CI] | "
             "vs point SJF (linear) | vs SJF on the same head's mean |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    order = s[s["metric"] == "per_token_latency_mean"].sort_values("value")
    for _, r in order.iterrows():
        pick = s[(s["policy"] == r["policy"]) & (s["predictor"] == r["predictor"])].set_index("metric")
        med = pick.loc["per_token_latency_p50", "value"] * 1e3
        p99 = pick.loc["per_token_latency_p99", "value"] * 1e3
        key = (r["policy"], r["predictor"])
        gtxt = [f"{100 * t.loc[key, 'value']:+.1f}% [{100 * t.loc[key, 'ci_low']:+.1f}, "
                f"{100 * t.loc[key, 'ci_high']:+.1f}]" if key in t.index else "" for t in (g, gp, go)]
        lines.append(f"| {r['policy']} | {r['predictor']} | {r['value'] * 1e3:.0f} [{r['ci_low'] * 1e3:.0f}, "
                     f"{r['ci_high'] * 1e3:.0f}] | {med:.0f} | {p99:.0f} | {' | '.join(gtxt)} |")
    return "\n".join(lines)


__all__ = ["paired_vs", "queue_tie_keys", "run_uncertainty_sched", "sched_markdown", "uncertainty_keys"]
