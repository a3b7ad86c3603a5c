"""Figures of the trace experiment: scheduling gain against the predictor's Spearman, and batch padding.

Panel rules (as in the project's other figures): at most 8 series per panel, no colour repeated within a
panel, one legend outside the panels, plain-number ticks. matplotlib is imported lazily.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.sched.sweep.pool import CLAIRVOYANT

__all__ = ["plot_padding", "plot_quality_curves", "quality_figure"]

METRIC_TITLES = {"per_token_latency_mean": "mean per-token latency", "per_token_latency_p99": "p99 per-token latency",
                 "jct_mean": "mean JCT"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _head_label(name: str, rho: float) -> str:
    return f"{name} (ρ {rho:.2f})" if np.isfinite(rho) else f"{name} (ρ undefined)"


# one colour per series, the same in every panel (tab10 order): ≤ MAX_SERIES, none repeated within a panel
_SERIES = ("noisy-0", "noisy-1", "heads-0", "heads-1", "prompt-mean", "oracle-0", "oracle-1")


def plot_quality_curves(curve: pd.DataFrame, load: float, path: str | Path,
                        policies: tuple[str, ...] = ("sjf", "srpt")) -> Path:
    """`quality_figure` saved to `path`."""
    plt = _plt()
    fig = quality_figure(curve, load, policies)
    path = Path(path)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def quality_figure(curve: pd.DataFrame, load: float, policies: tuple[str, ...] = ("sjf", "srpt")):
    """One row per trace, one column per latency metric: gain over FCFS (%) against the achieved Spearman
    of the noisy oracle under each policy (95% bands), our heads and the prompt-mean marked at their own
    achieved Spearman and simulated gain (unlabelled point clouds), and the clairvoyant oracles as horizontal
    lines. A last column names the heads: one row per head (its name and achieved Spearman as the tick
    label, so names never overlap), its gain [95% CI] under each policy on the first latency metric, and the
    noisy oracle's gain at the same Spearman (interpolated on the curve) for comparison."""
    plt = _plt()
    c = curve[curve["load"].astype(float) == float(load)]
    traces = sorted(c["data"].unique())
    metrics = [m for m in METRIC_TITLES if m in set(c["latency_metric"])]
    mapped = c[c["kind"].isin(["head", "prompt-mean"])]
    n_key = max((g["predictor"].nunique() for _, g in mapped.groupby("data")), default=0)
    row_h = max(3.2, 0.17 * n_key + 1.0)  # the key's names get >= 0.17 in each, whatever the number of heads
    ncols = len(metrics) + (1 if n_key else 0)
    fig, axes = plt.subplots(len(traces), ncols, figsize=(4.2 * len(metrics) + (3.6 if n_key else 0) + 2.4,
                                                          row_h * len(traces)),
                             squeeze=False, layout="constrained")
    colour = dict(zip(_SERIES, plt.get_cmap("tab10").colors, strict=False))
    markers = {policies[0]: "D", policies[-1]: "s"}
    for r, data in enumerate(traces):
        for k, m in enumerate(metrics):
            ax = axes[r, k]
            sub = c[(c["data"] == data) & (c["latency_metric"] == m)]
            for i, pol in enumerate(policies):  # 2 noisy curves + 2 head clouds + 1 prompt-mean + 2 oracles = 7
                g = sub[(sub["policy"] == pol) & (sub["kind"] == "noisy")].sort_values("spearman")
                col = colour[f"noisy-{i}"]
                ax.plot(g["spearman"], 100 * g["gain"], marker="o", ms=3, color=col,
                        label=f"{pol.upper()}, noisy oracle")
                ax.fill_between(g["spearman"], 100 * g["gain_lo"], 100 * g["gain_hi"], color=col, alpha=0.15)
            for i, pol in enumerate(policies):
                h = sub[(sub["policy"] == pol) & (sub["kind"] == "head")]
                ax.scatter(h["spearman"], 100 * h["gain"], marker=markers[pol], s=22, color=colour[f"heads-{i}"],
                           zorder=3, label=f"{pol.upper()}, our heads (matched)")
            pm = sub[(sub["policy"] == policies[0]) & (sub["kind"] == "prompt-mean")]
            ax.scatter(pm["spearman"], 100 * pm["gain"], marker="*", s=60, color=colour["prompt-mean"], zorder=3,
                       label=f"{policies[0].upper()}, prompt-mean (mean-oracle)")
            for i, pol in enumerate(policies):
                o = sub[(sub["policy"] == f"oracle-{pol}") & (sub["predictor"] == CLAIRVOYANT)]
                if len(o):
                    ax.axhline(100 * float(o["gain"].iloc[0]), ls=":", lw=1.2, color=colour[f"oracle-{i}"],
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
        if n_key:
            _head_key(axes[r, -1], c[(c["data"] == data) & (c["latency_metric"] == metrics[0])], policies, colour,
                      markers, n_key, title=r == 0, xlabel=r == len(traces) - 1, metric=metrics[0])
    from lengthpred.figures import legend_outside  # imports matplotlib: lazily, as `_plt`

    legend_outside(fig, axes)
    fig.suptitle(f"How good must a predictor be? Gain over FCFS at load {load:g}", fontsize=10)
    return fig


def _head_key(ax, sub: pd.DataFrame, policies: tuple[str, ...], colour: dict, markers: dict, n_rows: int, *,
              title: bool, xlabel: bool, metric: str) -> None:
    """The heads of one trace, one row each (highest Spearman on top), named on the y axis: gain [95% CI]
    under each policy, and the first policy's noisy-oracle gain at the head's Spearman."""
    first = sub[(sub["policy"] == policies[0]) & sub["kind"].isin(["head", "prompt-mean"])]
    order = first.assign(_s=first["spearman"].astype(float).fillna(-np.inf)).sort_values(["_s", "predictor"])
    names = order["predictor"].astype(str).tolist()
    y = {n: i for i, n in enumerate(names)}
    rho = dict(zip(names, order["spearman"].astype(float), strict=True))
    for i, pol in enumerate(policies):
        h = sub[(sub["policy"] == pol) & (sub["kind"] == "head")]
        if not len(h):
            continue
        yy = np.array([y[n] for n in h["predictor"].astype(str)]) + (0.15 if i == 0 else -0.15)
        g, lo, hi = (100 * h[col].to_numpy(float) for col in ("gain", "gain_lo", "gain_hi"))
        ax.errorbar(g, yy, xerr=np.vstack([g - lo, hi - g]), fmt=markers[pol], ms=4, lw=0.8, capsize=1.5,
                    color=colour[f"heads-{i}"], label=f"{pol.upper()}, our heads (matched)")
    pm = first[first["kind"] == "prompt-mean"]
    if len(pm):
        g, lo, hi = (100 * pm[col].to_numpy(float) for col in ("gain", "gain_lo", "gain_hi"))
        ax.errorbar(g, [y[n] + 0.15 for n in pm["predictor"].astype(str)], xerr=np.vstack([g - lo, hi - g]),
                    fmt="*", ms=7, lw=0.8, capsize=1.5, color=colour["prompt-mean"],
                    label=f"{policies[0].upper()}, prompt-mean (mean-oracle)")
    noisy = sub[(sub["policy"] == policies[0]) & (sub["kind"] == "noisy")].sort_values("spearman")
    x = np.array([rho[n] for n in names], dtype=float)
    if len(noisy) >= 2 and np.isfinite(x).any():
        ok = np.flatnonzero(np.isfinite(x))
        at = np.interp(x[ok], noisy["spearman"].to_numpy(float), 100 * noisy["gain"].to_numpy(float))
        ax.plot(at, ok + 0.15, ls="none", marker="|", ms=9, mew=1.5, color=colour["noisy-0"],
                label=f"{policies[0].upper()}, noisy oracle at the head's Spearman")
    ax.axvline(0.0, color="0.6", lw=0.6)
    ax.set_yticks(range(len(names)), [_head_label(n, rho[n]) for n in names], fontsize=6.5)
    ax.set_ylim(-0.6, max(n_rows, len(names)) - 0.4)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(f"our heads: {METRIC_TITLES[metric]}", fontsize=9)
    if xlabel:
        ax.set_xlabel(f"gain vs FCFS (%) [95% CI], {policies[0].upper()} above {policies[-1].upper()}")


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
