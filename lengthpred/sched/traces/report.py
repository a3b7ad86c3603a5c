"""Markdown tables of the trace experiment: policies on each trace, and how good a predictor must be.

Built from the tidy files of `lengthpred.sched.traces.experiment` only (trace_results.csv, trace_gains.csv,
trace_predictors.csv, quality_curve.csv, trace_windows.csv), so a table can be rebuilt without rerunning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.sched.sweep.pool import CLAIRVOYANT, NO_PREDICTOR
from lengthpred.sched.sweep.summary import _ms, _num, _pct
from lengthpred.sched.traces.experiment import NOISY, interval_scope, noisy_label

__all__ = ["needed_table", "policy_table", "quality_table", "window_table"]

REFERENCE = ("fcfs", "mlfq", "oracle-sjf", "oracle-srpt")


def _md(head: Sequence[str], rows: list[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    return out + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]


def _rho(v: Any, lo: Any = None, hi: Any = None) -> str:
    if _num(v) is None:
        return "undefined"
    s = f"{_num(v):.2f}"
    return s + (f" [{_num(lo):.2f}, {_num(hi):.2f}]" if _num(lo) is not None and _num(hi) is not None else "")


def _s(v: Any, lo: Any, hi: Any) -> str:
    if _num(v) is None:
        return "undefined"
    s = f"{_num(v):.1f}"
    return s + (f" [{_num(lo):.1f}, {_num(hi):.1f}]" if _num(lo) is not None and _num(hi) is not None else "")


def policy_table(summary: pd.DataFrame, gain: pd.DataFrame, predictors: pd.DataFrame, *,
                 levels: Sequence[float], policies: Sequence[str] = ("sjf", "srpt")) -> str:
    """Per trace and load: FCFS, MLFQ, the clairvoyant oracles, and `policies` on the noisy oracles at
    `levels` and on every mapped head: mean and p99 per-token latency, mean JCT, gain over FCFS. The header
    says what the intervals cover (`trace_experiment.interval_scope`: windows, and the heads' prompt pool
    when it was resampled per window)."""
    shown_noisy = {noisy_label(x) for x in levels}
    rho = predictors.groupby(["data", "predictor"])["spearman"].mean()
    s = summary.set_index(["data", "load", "policy", "predictor", "metric"])
    g = gain[(gain["metric"] == "gain_vs_fcfs")].set_index(["data", "latency_metric", "load", "policy", "predictor"])
    heads = [p for p in predictors["predictor"].unique() if not str(p).startswith(NOISY)]
    scope = interval_scope(predictors)
    lines = []
    for (data, load), sub in summary.groupby(["data", "load"], sort=True):
        n = int(sub["n"].max())
        lines += ["", f"**{data}, load {load:g}** ({n} windows; mean [{scope}])", ""]
        rows = []
        keys = [(p, NO_PREDICTOR if p in ("fcfs", "mlfq") else CLAIRVOYANT) for p in REFERENCE]
        keys += [(p, x) for p in policies for x in [*sorted(shown_noisy, key=lambda t: float(t[len(NOISY):])), *heads]]
        for pol, pred in keys:
            if (data, load, pol, pred, "per_token_latency_mean") not in s.index:
                continue
            cells = [_vlh(s.loc[(data, load, pol, pred, m)]) for m in ("per_token_latency_mean",
                                                                         "per_token_latency_p99", "jct_mean")]
            gr = g.loc[(data, "per_token_latency_mean", load, pol, pred)] if (data, "per_token_latency_mean", load, pol, pred) in g.index else None
            rows.append((pol, pred, _rho(rho.get((data, pred), math.nan)) if pred not in (NO_PREDICTOR, CLAIRVOYANT) else "",
                         _ms(*cells[0]), _ms(*cells[1]), _s(*cells[2]), _pct(*_vlh(gr)) if gr is not None else ""))
        lines += _md(("policy", "predictor", "Spearman", "ms/token mean ↓", "ms/token p99 ↓", "JCT mean (s) ↓",
                      "gain vs FCFS (mean ms/token) ↑"), rows)
    return "\n".join(lines).strip()


def _vlh(r: Any) -> tuple[Any, Any, Any]:
    return (r["value"], r["ci_low"], r["ci_high"]) if r is not None else (None, None, None)


def quality_table(curve: pd.DataFrame) -> str:
    """Per trace and load: gains of mean and p99 per-token latency and of mean JCT over FCFS against the
    achieved Spearman, for SJF and SRPT on the noisy oracles and on the mapped heads."""
    metrics = ("per_token_latency_mean", "per_token_latency_p99", "jct_mean")
    lines = []
    idx = curve.set_index(["data", "load", "policy", "predictor", "latency_metric"])
    scope = interval_scope(curve)
    for (data, load), sub in curve.groupby(["data", "load"], sort=True):
        lines += ["", f"**{data}, load {load:g}**: gain over FCFS [{scope}] against the predictor's Spearman", ""]
        rows = []
        for pol in ("oracle-sjf", "oracle-srpt", "mlfq"):
            if (data, load, pol, CLAIRVOYANT if "oracle" in pol else NO_PREDICTOR, metrics[0]) in idx.index:
                pred = CLAIRVOYANT if "oracle" in pol else NO_PREDICTOR
                rows.append((pol, pred, "", *(_pct(*_vlh3(idx.loc[(data, load, pol, pred, m)])) for m in metrics)))
        pp = sub[sub["kind"].isin(["noisy", "head", "prompt-mean"]) & (sub["latency_metric"] == metrics[0])]
        for r in pp.sort_values(["policy", "kind", "spearman"], ascending=[True, False, True]).itertuples(index=False):
            rows.append((r.policy, r.predictor, _rho(r.spearman, r.spearman_lo, r.spearman_hi),
                         *(_pct(*_vlh3(idx.loc[(data, load, r.policy, r.predictor, m)])) for m in metrics)))
        lines += _md(("policy", "predictor", "Spearman [CI]", "mean ms/token", "p99 ms/token", "mean JCT"), rows)
    return "\n".join(lines).strip()


def needed_table(needed: pd.DataFrame) -> str:
    """The Spearman at which the noisy oracle reaches half the clairvoyant oracle's gain, per trace, load
    and policy, for each latency metric (`trace_experiment.spearman_needed`)."""
    metrics = ("per_token_latency_mean", "per_token_latency_p99", "jct_mean")
    lines = ["**Spearman at which the noisy oracle reaches half the clairvoyant oracle's gain** "
             "(undefined: the oracle's own gain interval reaches 0, or the curve never gets there; "
             "≤: already at the lowest level swept)", ""]
    rows = []
    for (data, load, pol), sub in needed.groupby(["data", "load", "policy"], sort=True):
        v = sub.set_index("latency_metric")
        rows.append((data, f"{load:g}", pol, *(_needed(v, m) for m in metrics)))
    return "\n".join(lines + _md(("trace", "load", "policy", "mean ms/token", "p99 ms/token", "mean JCT"), rows))


def _needed(v: pd.DataFrame, m: str) -> str:
    if m not in v.index:
        return ""
    r = v.loc[m]
    x = _num(r["spearman_needed"])
    if x is None:
        return "undefined"
    return f"≤ {x:.2f}" if bool(r.get("at_lowest", False)) else f"{x:.2f}"


def _vlh3(r: Any) -> tuple[Any, Any, Any]:
    return r["gain"], r["gain_lo"], r["gain_hi"]


def window_table(stats: pd.DataFrame) -> str:
    """Per trace and load: windows, requests, the trace's rate and inter-arrival CV, capacity on the
    profile, the time scale applied, the CV after scaling, and requests too big for KV memory."""
    rows = []
    for (data, load), g in stats.groupby(["data", "load"], sort=True):
        rows.append((data, f"{load:g}", len(g), int(g["n"].iloc[0]), f"{g['trace_rate'].mean():.2f}",
                     f"{g['trace_cv'].mean():.2f}", f"{g['capacity'].mean():.3g}", f"{g['time_scale'].mean():.2f}",
                     f"{g['scaled_cv'].mean():.2f}", int(g["too_big_for_kv"].sum()),
                     f"{g['prompt_mean'].mean():.0f} / {g['output_mean'].mean():.0f}"))
    hw = stats["hardware"].iloc[0] if len(stats) else ""
    head = ("trace", "load", "windows", "requests each", "trace rate (req/s)", "inter-arrival CV, trace",
            f"capacity on {hw} (req/s)", "time scale (sim s per trace s)", "inter-arrival CV, scaled",
            "too big for KV (rejected)", "mean prompt / output tokens")
    return "\n".join(_md(head, rows))


def finite_mean(x: pd.Series) -> float:
    v = pd.to_numeric(x, errors="coerce").to_numpy(float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else math.nan
