"""Policies × predictors × loads × seeds on one length source, and the files the tables read.

Outputs (tidy; `load` is the offered load as a fraction of the server's capacity, see
`lengthpred.sched.workload.capacity`):

- ``sched_runs.csv``: one row per run and metric: ``experiment, hardware, data, policy, predictor, load,
  seed, metric, value``.
- ``sched_results.csv`` (read by T5): ``experiment, hardware, data, policy, predictor, load, metric,
  value, ci_low, ci_high, n``: mean over seeds with a Student-t 95% interval, n = seeds.
- ``sched_gains.csv``: per (policy, predictor, load) the paired-over-seeds gain of mean per-token latency
  over FCFS (``gain_vs_fcfs``, a fraction: 1 − mean(x)/mean(FCFS)) and its share of the oracle's gain
  (``share_of_oracle``; oracle = the oracle policy with the lowest mean, as T5 takes it), means over seeds
  with paired-bootstrap CIs over seeds.
- ``sched_latencies.parquet``: ``policy, predictor, load, latency`` (per-token latency, s, one row per
  finished request of the first seed): the latency CDF data.
- ``latency_vs_load.png``.

Metrics (``lengthpred.sched.metrics.summarize``): ``per_token_latency_{mean,p50,p99}`` (s/token),
``jct_{mean,p99}``, ``ttft_{mean,p99}`` (s), ``throughput`` (output tokens/s), ``preemptions``,
``preempt_overhead`` (share of the run spent re-prefilling or swapping preempted requests),
``recompute_tokens``, ``max_wait`` (s before first admission), ``n_finished``, ``n_rejected``,
``n_unfinished``.
Predictor labels: a head's name, ``<head>+online`` (OnlineScaledPredictor over it), ``none`` for
policies that use no prediction (FCFS, MLFQ), ``oracle`` for oracle policies.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from lengthpred.errors import ConfigError
from lengthpred.sched.hardware import HardwareProfile
from lengthpred.sched.metrics import latency_cdf, summarize, t_interval  # noqa: F401  (re-exported)
from lengthpred.sched.policies import make_policy
from lengthpred.sched.predictors import ArrayPredictor, OnlineScaledPredictor
from lengthpred.sched.simulator import simulate
from lengthpred.sched.sources import LengthSource
from lengthpred.sched.workload import Workload, capacity

log = logging.getLogger("lengthpred.sched")
KEY = "per_token_latency_mean"


@dataclass
class PolicySpec:
    name: str
    label: str
    kwargs: dict[str, Any]
    sim: dict[str, Any]  # simulate() keywords for this entry only (aging, max_preemptions, preemption)


def parse_policies(items: list[Any]) -> list[PolicySpec]:
    """Config entries: a registry name, or `{name: ..., label: ..., <constructor keywords>}`; the keys
    aging, max_preemptions and preemption go to the simulator for that entry."""
    out = []
    for it in items:
        if isinstance(it, str):
            out.append(PolicySpec(it, it, {}, {}))
        else:
            d = dict(it)
            if "name" not in d:
                raise ConfigError(f"policy entry {d} has no name")
            name = d.pop("name")
            sim = {k: d.pop(k) for k in ("aging", "max_preemptions", "preemption") if k in d}
            out.append(PolicySpec(name, d.pop("label", name), d, sim))
        make_policy(out[-1].name, **out[-1].kwargs)  # fail on a bad name or keyword before any work
    return out


def run_grid(
    source: LengthSource,
    profile: HardwareProfile,
    policies: list[PolicySpec],
    *,
    loads: list[float],
    seeds: list[int],
    n_requests: int,
    predictors: list[str] | None = None,
    online: bool = False,
    arrival: str = "poisson",
    cv: float = 1.0,
    accept_beta: tuple[float, float] = (7.0, 3.0),
    speculative: bool = False,
    warmup: float = 0.0,
    sim: dict[str, Any] | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the grid; returns (runs, latencies) frames (schemas in the module docstring). Within a seed every
    policy, predictor and load sees the same requests and the same arrival pattern (common random numbers)."""
    preds = list(source.preds) if predictors is None else list(predictors)
    unknown = sorted(set(preds) - set(source.preds))
    if unknown:
        raise ConfigError(f"predictors {unknown} not in {source.name}; present: {sorted(source.preds)}")
    sim = dict(sim or {})
    rows, lat = [], []
    warned: set[tuple[int, float]] = set()
    m = len(source.output)
    jobs = [(s, ld) for s in seeds for ld in loads]
    for seed, load in tqdm(jobs, desc="simulate", disable=not progress):
        rng = np.random.default_rng(seed)
        if source.arrival is None:
            idx = rng.integers(0, m, n_requests)
        else:
            idx = np.arange(min(n_requests, m))
        out, prm = source.output[idx], source.prompt[idx]
        acc = rng.beta(*accept_beta, len(idx))
        cap = capacity(profile, prm, out, acc, speculative)
        if source.arrival is None:
            gaps = rng.exponential(1.0, len(idx)) if arrival == "poisson" else rng.gamma(1 / cv**2, cv**2, len(idx))
            arr = np.cumsum(gaps) / (load * cap)
        else:
            a = source.arrival[idx]
            arr = a * (len(a) - 1) / max(a[-1], 1e-12) / (load * cap)  # rescale the trace to this load
        wl = Workload(arr, prm, out, acc)
        for ps in policies:
            names = (preds + [f"{p}+online" for p in preds] if online else preds) if make_policy(
                ps.name, **ps.kwargs).needs_prediction else [
                    "oracle" if "oracle" in ps.name or ps.kwargs.get("oracle") else "none"]
            for pname in names:
                policy = make_policy(ps.name, **ps.kwargs)
                predictor = _predictor(source, pname, idx)
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    res = simulate(wl, profile, policy, predictor, speculative=speculative, seed=seed,
                                   **{**sim, **ps.sim})
                if w and (seed, load) not in warned:
                    warned.add((seed, load))
                    log.warning("load %s, seed %s: %s", load, seed, w[0].message)
                for k, v in summarize(res, warmup).items():
                    rows.append((profile.name, source.name, ps.label, pname, float(load), seed, k, v))
                if seed == seeds[0]:
                    done = res.finished
                    ptl = ((res.finish - res.arrival) / res.output)[done]
                    lat.append(pd.DataFrame({"policy": ps.label, "predictor": pname, "load": float(load),
                                             "latency": ptl}))
    runs = pd.DataFrame(rows, columns=["hardware", "data", "policy", "predictor", "load", "seed", "metric", "value"])
    return runs, (pd.concat(lat, ignore_index=True) if lat else pd.DataFrame())


def _predictor(source: LengthSource, name: str, idx: np.ndarray) -> Any:
    if name in ("none", "oracle"):
        return None
    if name.endswith("+online"):
        return OnlineScaledPredictor(source.preds[name[: -len("+online")]][idx], name=name)
    return ArrayPredictor(source.preds[name][idx], name=name)


def summarize_runs(runs: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Mean over seeds with a t interval, per (hardware, data, policy, predictor, load, metric)."""
    keys = ["hardware", "data", "policy", "predictor", "load", "metric"]
    rows = []
    for k, g in runs.groupby(keys, sort=False):
        m, lo, hi = t_interval(g["value"].to_numpy(), level)
        rows.append((*k, m, lo, hi, int(g["value"].notna().sum())))
    return pd.DataFrame(rows, columns=[*keys, "value", "ci_low", "ci_high", "n"])


def gains(runs: pd.DataFrame, metric: str = KEY, level: float = 0.95, n_boot: int = 1000) -> pd.DataFrame:
    """Gain of `metric` over FCFS, 1 − mean(x)/mean(FCFS), and share of the oracle's gain,
    (mean(FCFS) − mean(x)) / (mean(FCFS) − mean(oracle)), means over seeds (as T5 computes them from
    sched_results.csv); CIs by a paired bootstrap over seeds."""
    d = runs[runs["metric"] == metric].pivot_table(index=["load", "seed"], columns=["policy", "predictor"],
                                                   values="value")
    cols = ["policy", "predictor", "load", "metric", "value", "ci_low", "ci_high", "n"]
    fcfs_cols = [c for c in d.columns if c[0] == "fcfs"]
    if not fcfs_cols:
        return pd.DataFrame(columns=cols)
    oracle_cols = [c for c in d.columns if c[0].startswith("oracle")]
    rng = np.random.default_rng(0)
    rows = []
    for load in sorted(d.index.get_level_values("load").unique()):
        dl = d.xs(load, level="load")
        f = dl[fcfs_cols[0]].to_numpy()
        n = len(f)
        boots = rng.integers(0, n, (n_boot, n)) if n > 1 else None
        best = min(oracle_cols, key=lambda c: dl[c].mean()) if oracle_cols else None
        for pol, pred in d.columns:
            x = dl[(pol, pred)].to_numpy()
            o = dl[best].to_numpy() if best is not None else np.full(n, np.nan)
            point = _gain_share(f, x, o, np.arange(n))
            ci = np.full((2, 2), np.nan)
            if boots is not None:
                bs = np.array([_gain_share(f, x, o, b) for b in boots])
                for k in range(2):
                    v = bs[:, k][np.isfinite(bs[:, k])]
                    if len(v):
                        ci[k] = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
            for k, name in enumerate(("gain_vs_fcfs", "share_of_oracle")):
                rows.append((pol, pred, float(load), name, point[k], ci[k, 0], ci[k, 1], n))
    return pd.DataFrame(rows, columns=cols)


def _gain_share(f: np.ndarray, x: np.ndarray, o: np.ndarray, i: np.ndarray) -> tuple[float, float]:
    mf, mx, mo = f[i].mean(), x[i].mean(), o[i].mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(1 - mx / mf), float((mf - mx) / (mf - mo)) if mf != mo else np.nan


def plot_latency_vs_load(summary: pd.DataFrame, path: str | Path) -> None:
    """Mean and p99 per-token latency against load, one line per policy × predictor, t-interval bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    cmap = plt.get_cmap("tab20")
    for ax, metric in zip(axes, ("per_token_latency_mean", "per_token_latency_p99"), strict=True):
        sub = summary[summary["metric"] == metric]
        for k, ((pol, pred), g) in enumerate(sub.groupby(["policy", "predictor"])):
            g = g.sort_values("load")
            ax.plot(g["load"], g["value"], marker="o", ms=3, color=cmap(k % 20), label=f"{pol} / {pred}",
                    ls="-" if pred in ("none", "oracle") else "--")
            if g["ci_low"].notna().any():
                lo = np.maximum(g["ci_low"], g["value"] * 0.5)  # a log axis cannot show a CI through zero
                ax.fill_between(g["load"], lo, g["ci_high"], color=cmap(k % 20), alpha=0.08)
        ax.set_xlabel("offered load (fraction of capacity)")
        ax.set_ylabel(f"{metric} (s/token)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_table(summary: pd.DataFrame, gain: pd.DataFrame) -> str:
    """A small T5-like text table: mean per-token latency ± CI, gain vs FCFS, share of the oracle's gain."""
    s = summary[summary["metric"] == KEY]
    lines = [f"{'load':>5} {'policy':<12} {'predictor':<18} {'ptl mean (ms/tok) ↓':>24} {'gain vs FCFS [95% CI]':>22} "
             f"{'share of oracle':>16}"]
    for r in s.sort_values(["load", "policy", "predictor"]).itertuples():
        ci = f"±{(r.ci_high - r.ci_low) / 2 * 1e3:.2f}" if np.isfinite(r.ci_high) else ""
        gs = gain[(gain.policy == r.policy) & (gain.predictor == r.predictor) & (gain.load == r.load)]
        gv = gs[gs.metric == "gain_vs_fcfs"]["value"]
        sv = gs[gs.metric == "share_of_oracle"]["value"]
        gtxt = f"{100 * gv.iloc[0]:+.1f}%" if len(gv) else ""
        glo = gs[gs.metric == "gain_vs_fcfs"]["ci_low"]
        if len(glo) and np.isfinite(glo.iloc[0]):
            ghi = gs[gs.metric == "gain_vs_fcfs"]["ci_high"].iloc[0]
            gtxt += f" [{100 * glo.iloc[0]:+.0f},{100 * ghi:+.0f}]"
        stxt = f"{100 * sv.iloc[0]:.0f}%" if len(sv) and np.isfinite(sv.iloc[0]) else ""
        lines.append(f"{r.load:>5.2f} {r.policy:<12} {r.predictor:<18} {r.value * 1e3:>15.2f} {ci:>8} "
                     f"{gtxt:>22} {stxt:>16}")
    return "\n".join(lines)
