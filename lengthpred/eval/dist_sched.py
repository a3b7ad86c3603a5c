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
from lengthpred.metrics import sign_flip_p
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
    percentile bootstrap over seeds and the exact sign-flip p of the per-seed differences ref − x (rows with
    metric `gain_vs_<policy>:<predictor>`)."""
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
                         "p_value": sign_flip_p(r - x), "n": len(x)})
    return pd.DataFrame(rows)


POINT_SJF = ("sjf", "linear")  # the point-prediction reference every uncertainty key is compared with
ORACLE = ("oracle-sjf", "clairvoyant")


def headroom_sweep(samples: Sequence[Sequence[int]], prompt_tokens: np.ndarray, point: np.ndarray, *, hardware: str,
                   loads: list[float], seeds: list[int], n_requests: int) -> pd.DataFrame:
    """Per load: the clairvoyant SJF oracle against point SJF (the `linear` key) on the same requests. Columns
    load, fcfs, sjf, oracle (mean per-token latency, s), headroom = 1 − mean(oracle)/mean(point SJF) with its
    paired bootstrap interval over seeds and exact sign-flip p: what any better key could still buy SJF."""
    output = np.array([np.mean(s) for s in samples], dtype=float)
    source = LengthSource("dist", output, np.asarray(prompt_tokens, dtype=float), preds={"linear": point},
                          samples=[list(s) for s in samples])
    runs, _ = run_grid(source, get_profile(hardware), parse_policies(["fcfs", "sjf", "oracle-sjf"]),
                       predictors=["linear"], loads=loads, seeds=seeds, n_requests=n_requests, mean_oracle=False)
    g = paired_vs(runs, POINT_SJF)
    g = g[(g["policy"] == ORACLE[0]) & (g["predictor"] == ORACLE[1])].set_index("load")
    m = runs[runs["metric"] == "per_token_latency_mean"].groupby(["load", "policy"])["value"].mean().unstack()
    return pd.DataFrame({"load": m.index.astype(float), "fcfs": m["fcfs"].to_numpy(), "sjf": m["sjf"].to_numpy(),
                         "oracle": m["oracle-sjf"].to_numpy(), "headroom": g.loc[m.index, "value"].to_numpy(),
                         "ci_low": g.loc[m.index, "ci_low"].to_numpy(), "ci_high": g.loc[m.index, "ci_high"].to_numpy(),
                         "p_value": g.loc[m.index, "p_value"].to_numpy(), "n_seeds": len(seeds)})


def choose_loads(sweep: pd.DataFrame, n: int) -> list[float]:
    """The `n` loads of a `headroom_sweep` where the oracle's headroom over point SJF is largest (ascending)."""
    if n < 1 or n > len(sweep):
        raise ValueError(f"n_loads={n}: choose between 1 and the {len(sweep)} candidate loads")
    return sorted(float(x) for x in sweep.nlargest(n, "headroom")["load"])


def headroom_markdown(sweep: pd.DataFrame, chosen: Sequence[float], hardware: str, seeds: Sequence[int]) -> str:
    """The selection sweep: per candidate load, FCFS / point SJF / oracle ms/token and the oracle's headroom."""
    lines = [f"Selection seeds {min(seeds)}–{max(seeds)} ({len(seeds)} seeds, never the reported ones), {hardware}: "
             "mean per-token latency and the oracle's headroom over point SJF (1 − oracle/point SJF, paired over "
             "seeds, 95% bootstrap interval, exact sign-flip p); the loads marked chosen are the reported ones.",
             "",
             "| load | FCFS (ms/token) | point SJF (ms/token) | oracle SJF (ms/token) | headroom over point SJF "
             "[95% CI] | p (exact) | chosen |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    for r in sweep.sort_values("load").itertuples():
        mark = "chosen" if any(np.isclose(r.load, c) for c in chosen) else ""
        lines.append(f"| {r.load:g} | {1e3 * r.fcfs:.1f} | {1e3 * r.sjf:.1f} | {1e3 * r.oracle:.1f} | "
                     f"{100 * r.headroom:+.1f}% [{100 * r.ci_low:+.1f}, {100 * r.ci_high:+.1f}] | {r.p_value:.2g} | "
                     f"{mark} |")
    return "\n".join(lines)


def nulls_markdown(gain: pd.DataFrame, load: float, alpha: float = 0.05) -> str:
    """Every key against point SJF at one load, the oracle's headroom there first: gain [95% CI], exact p over
    seeds, share of the headroom it takes (its gain / the oracle's; undefined where the headroom's own interval
    reaches 0), and whether the exact test calls it a difference at `alpha`."""
    at = gain[np.isclose(gain["load"], load) & (gain["metric"] == f"gain_vs_{POINT_SJF[0]}:{POINT_SJF[1]}")]
    at = at.set_index(["policy", "predictor"])
    if ORACLE not in at.index:
        return ""
    room = at.loc[ORACLE]
    defined = room["ci_low"] > 0
    lines = ["| policy | key | gain over point SJF [95% CI] | p (exact) | share of the headroom | exact test at 0.05 |",
             "|---|---|---:|---:|---:|---|"]
    rows = pd.concat([at.loc[[ORACLE]], at.drop(index=[ORACLE, POINT_SJF], errors="ignore")
                      .sort_values("value", ascending=False)])
    for (pol, pred), r in rows.iterrows():
        share = f"{100 * r['value'] / room['value']:.0f}%" if defined else "undefined"
        share = f"{share} (the headroom)" if (pol, pred) == ORACLE else share
        call = ("better" if r["value"] > 0 else "worse") if r["p_value"] < alpha else "no difference shown"
        lines.append(f"| {pol} | {pred} | {100 * r['value']:+.1f}% [{100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]"
                     f" | {r['p_value']:.2g} | {share} | {call} |")
    return "\n".join(lines)


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


__all__ = ["choose_loads", "headroom_markdown", "headroom_sweep", "nulls_markdown", "paired_vs", "queue_tie_keys",
           "run_uncertainty_sched", "sched_markdown", "uncertainty_keys"]
