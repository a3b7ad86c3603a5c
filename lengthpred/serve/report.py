"""Printed tables and figures of a serving comparison: real results with CIs, real vs simulated, the
per-token latency CDF and the waiting queue over time."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

FID_COLUMNS = [("per_token_latency_mean", "ptl mean"), ("per_token_latency_p50", "ptl p50"),
               ("per_token_latency_p90", "ptl p90"), ("ttft_mean", "TTFT mean"), ("ttft_p90", "TTFT p90"),
               ("jct_mean", "JCT mean"), ("jct_p90", "JCT p90"), ("tpot_mean", "TPOT mean")]
RESULT_COLUMNS = [("per_token_latency_mean", "ptl mean (s/tok) ↓", 3), ("per_token_latency_p99", "ptl p99 ↓", 3),
                  ("ttft_mean", "TTFT mean (s) ↓", 2), ("tpot_mean", "TPOT mean (s) ↓", 3),
                  ("jct_mean", "JCT mean (s) ↓", 1), ("throughput", "tok/s ↑", 1), ("goodput", "goodput (req/s) ↑", 3),
                  ("queue_mean", "queue mean", 1), ("queue_max", "queue max", 0),
                  ("prediction_wait_mean", "pred. wait (s)", 3)]


def _cell(v: float, lo: float = math.nan, hi: float = math.nan, nd: int = 3) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    txt = f"{v:.{nd}f}"
    if math.isfinite(lo) and math.isfinite(hi):
        txt += f" [{lo:.{nd}f}, {hi:.{nd}f}]"
    return txt


def results_table(summary: pd.DataFrame, hardware: str, min_repeats: int = 0) -> str:
    """Markdown: one row per (load, policy, predictor) of the real runs; means over repeats [95% CI], the
    interval only from `min_repeats` repeats."""
    s = summary[summary["hardware"] == hardware]
    head = ["load", "policy", "predictor", *(c[1] for c in RESULT_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (load, pol, pred), g in s.groupby(["load", "policy", "predictor"], sort=True):
        by = g.set_index("metric")
        if by["value"].get("overload", 0) >= 0.5:
            lines.append(f"| {load:g} | {pol} | {pred} | OVERLOAD (offered load {by['value'].get('offered_load', math.nan):.2f}"
                         f" of capacity): no latency |" + " |" * (len(RESULT_COLUMNS) - 1))
            continue
        cells = []
        for m, _, nd in RESULT_COLUMNS:
            if m in by.index:
                r = by.loc[m]
                ci = m == "per_token_latency_mean" and r.get("n", min_repeats) >= min_repeats
                cells.append(_cell(r["value"], r["ci_low"] if ci else math.nan, r["ci_high"] if ci else math.nan, nd))
            else:
                cells.append("—")
        lines.append(f"| {load:g} | {pol} | {pred} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fidelity_table(fsum: pd.DataFrame, drift_bound: float | None = None) -> str:
    """Markdown: per (load, policy) and metric, the per-run |sim − real| / real as mean over runs (worst run);
    the runs' step-time drift from the profile (measured / modelled) and how many exceed `drift_bound`.
    Errors of single runs: a +15% run and a −15% run do not cancel."""
    if fsum.empty:
        return "(no run to compare: every run was overloaded)"
    drift = "drift_min" in fsum.columns
    head = ["load", "policy", *(c[1] for c in FID_COLUMNS), *(["step-time drift (runs off)"] if drift else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (load, pol), g in fsum.groupby(["load", "policy"], sort=True):
        by = g.set_index("metric")
        cells = []
        for m, _ in FID_COLUMNS:
            if m not in by.index or not math.isfinite(by.loc[m, "abs_err"]):
                cells.append("—")
                continue
            r = by.loc[m]
            cells.append(f"{100 * r['abs_err']:.1f}% ({100 * r['max_abs_err']:.1f}%)")
        if drift:
            r = g.iloc[0]
            cells.append(f"{r['drift_min']:.3f}–{r['drift_max']:.3f} ({int(r['n_drifting'])}/{int(r['n'])})")
        lines.append(f"| {load:g} | {pol} | " + " | ".join(cells) + " |")
    means = fsum[fsum["metric"].str.endswith("_mean") & fsum["metric"].isin([c[0] for c in FID_COLUMNS])]
    shown = fsum[fsum["metric"].isin([c[0] for c in FID_COLUMNS])]
    n_mean = int((means["abs_err"] > 0.05).sum())
    bound = f", beyond ±{100 * drift_bound:g}%" if drift_bound is not None else ""
    lines += ["", f"Cells: |simulated − real| / real of each run, mean over runs (worst run). Worst run: "
              f"{100 * float(means['max_abs_err'].max()):.1f}% on means (goal ≤ 5%), "
              f"{100 * float(shown['max_abs_err'].max()):.1f}% on every metric shown (goal ≤ 10%); "
              f"{n_mean} of {len(means)} mean cells miss 5% on average. Drift: the runs' measured / modelled "
              f"step time (runs off the profile{bound})."]
    return "\n".join(lines)


def plot_latency_cdf(requests: pd.DataFrame, path: str | Path) -> Path:
    """Per-token latency CDF per load (panels) and policy (colours): real solid, simulated dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthpred.figures import plain_log_axis  # matplotlib only when plotting

    loads = sorted(requests["load"].unique())
    fig, axes = plt.subplots(1, len(loads), figsize=(5 * len(loads), 4), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, load in zip(axes[0], loads, strict=True):
        sub = requests[requests["load"] == load]
        for k, (pol, g) in enumerate(sub.groupby("policy", sort=True)):
            for col, ls, tag in (("finish", "-", "real"), ("sim_finish", "--", "sim")):
                fin = g[col].to_numpy(float)
                ok = np.isfinite(fin) & (g["status"] == "finished").to_numpy()
                x = np.sort((fin[ok] - g["arrival"].to_numpy(float)[ok]) / g["target_tokens"].to_numpy(float)[ok])
                if len(x):
                    ax.plot(x, np.arange(1, len(x) + 1) / len(x), ls=ls, color=cmap(k % 10), label=f"{pol} ({tag})")
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("per-token latency (s/token)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"load {load:g} of capacity")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_queue(steps: pd.DataFrame, path: str | Path, seed: int | None = None) -> Path:
    """Requests waiting (engine queue + awaiting a prediction) over time, one panel per load, one line per
    policy, for one repeat (the first by default)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = steps["seed"].min() if seed is None else seed
    s = steps[steps["seed"] == seed]
    loads = sorted(s["load"].unique())
    fig, axes = plt.subplots(1, len(loads), figsize=(5 * len(loads), 3.5), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, load in zip(axes[0], loads, strict=True):
        for k, (pol, g) in enumerate(s[s["load"] == load].groupby("policy", sort=True)):
            ax.step(g["t_end"], g["n_waiting"] + g["n_predicting"], where="post", color=cmap(k % 10), label=pol, lw=1)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("requests waiting")
        ax.set_title(f"load {load:g}, repeat {seed}")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
