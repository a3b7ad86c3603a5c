"""Figures of the trace experiment: scheduling gain against the predictor's Spearman, and batch padding.

Panel rules (as in the project's other figures): at most 8 series per panel, no colour repeated within a
panel, one legend outside the panels, plain-number ticks. matplotlib is imported lazily.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.sched.pool import CLAIRVOYANT

__all__ = ["plot_padding", "plot_quality_curves"]

METRIC_TITLES = {"per_token_latency_mean": "mean per-token latency", "per_token_latency_p99": "p99 per-token latency",
                 "jct_mean": "mean JCT"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_quality_curves(curve: pd.DataFrame, load: float, path: str | Path,
                        policies: tuple[str, ...] = ("sjf", "srpt")) -> Path:
    """One row per trace, one column per latency metric: gain over FCFS (%) against the achieved Spearman
    of the noisy oracle under each policy (95% bands over windows), our heads and the prompt-mean marked at
    their own achieved Spearman and simulated gain, and the clairvoyant oracles as horizontal lines."""
    plt = _plt()
    c = curve[curve["load"].astype(float) == float(load)]
    traces = sorted(c["data"].unique())
    metrics = [m for m in METRIC_TITLES if m in set(c["latency_metric"])]
    fig, axes = plt.subplots(len(traces), len(metrics), figsize=(4.2 * len(metrics) + 2.2, 3.2 * len(traces)),
                             squeeze=False, layout="constrained")
    colours = plt.get_cmap("tab10").colors
    markers = {policies[0]: "D", policies[-1]: "s"}
    for r, data in enumerate(traces):
        for k, m in enumerate(metrics):
            ax = axes[r, k]
            sub = c[(c["data"] == data) & (c["latency_metric"] == m)]
            col = iter(colours)
            for pol in policies:  # ≤ 2 noisy curves + 2 head clouds + 1 prompt-mean + 2 oracles = 7 series
                g = sub[(sub["policy"] == pol) & (sub["kind"] == "noisy")].sort_values("spearman")
                colour = next(col)
                ax.plot(g["spearman"], 100 * g["gain"], marker="o", ms=3, color=colour,
                        label=f"{pol.upper()}, noisy oracle")
                ax.fill_between(g["spearman"], 100 * g["gain_lo"], 100 * g["gain_hi"], color=colour, alpha=0.15)
            for pol in policies:
                h = sub[(sub["policy"] == pol) & (sub["kind"] == "head")]
                colour = next(col)
                ax.scatter(h["spearman"], 100 * h["gain"], marker=markers[pol], s=22, color=colour, zorder=3,
                           label=f"{pol.upper()}, our heads (matched)")
                if pol == policies[0] and k == 0:  # names once per row, staggered so neighbours do not collide
                    for j, hr in enumerate(h.sort_values("spearman").itertuples(index=False)):
                        ax.annotate(str(hr.predictor), (hr.spearman, 100 * hr.gain), fontsize=5.5,
                                    xytext=(3, 4 if j % 2 == 0 else -8), textcoords="offset points")
            pm = sub[(sub["policy"] == policies[0]) & (sub["kind"] == "prompt-mean")]
            ax.scatter(pm["spearman"], 100 * pm["gain"], marker="*", s=60, color=next(col), zorder=3,
                       label=f"{policies[0].upper()}, prompt-mean (mean-oracle)")
            for pol in policies:
                o = sub[(sub["policy"] == f"oracle-{pol}") & (sub["predictor"] == CLAIRVOYANT)]
                if len(o):
                    ax.axhline(100 * float(o["gain"].iloc[0]), ls=":", lw=1.2, color=next(col),
                               label=f"oracle-{pol} (clairvoyant)")
            ax.axhline(0.0, color="0.6", lw=0.6)
            ax.set_xlim(-0.05, 1.05)
            ax.grid(alpha=0.3)
            if r == 0:
                ax.set_title(METRIC_TITLES[m], fontsize=9)
            if r == len(traces) - 1:
                ax.set_xlabel("predictor's Spearman with the true length (achieved)")
            if k == 0:
                ax.set_ylabel(f"{data}\ngain vs FCFS (%)", fontsize=8)
    _legend(fig, axes)
    fig.suptitle(f"How good must a predictor be? Gain over FCFS at load {load:g}", fontsize=10)
    path = Path(path)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _legend(fig, axes) -> None:
    seen: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="outside right upper", fontsize=7, frameon=False)


def plot_padding(results: pd.DataFrame, path: str | Path, batch_size: int) -> Path:
    """Padding ratio [95% CI] of each batch formation, one panel per workload (horizontal bars, one series)."""
    plt = _plt()
    r = results[(results["metric"] == "padding_ratio") & (results["batch_size"] == batch_size)]
    data = sorted(r["data"].unique())
    fig, axes = plt.subplots(1, len(data), figsize=(3.6 * len(data), 0.28 * r.groupby("data").size().max() + 1.6),
                             squeeze=False, layout="constrained")
    for ax, d in zip(axes[0], data, strict=True):
        g = r[r["data"] == d].sort_values("value", ascending=False)
        y = np.arange(len(g))
        labels = [f"{f} / {p}" if f == "predicted" else f for f, p in zip(g["formation"], g["predictor"], strict=True)]
        err = np.vstack([g["value"] - g["ci_low"], g["ci_high"] - g["value"]])
        ax.barh(y, g["value"], xerr=err, color="tab:blue", error_kw=dict(lw=0.8, capsize=2))
        ax.set_yticks(y, labels, fontsize=6.5)
        ax.set_xlim(0, 1)
        ax.set_xlabel("padding ratio (lower is better)")
        ax.set_title(d, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"Static batches of {batch_size}: padding by batch formation", fontsize=10)
    path = Path(path)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
