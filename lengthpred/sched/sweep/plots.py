"""T5 over a load sweep: the gain of each policy × predictor over FCFS against load, and what it costs the
longest requests (p99 end-to-end latency and the longest wait for admission), from the simulate stage's tidy
summary and gains (`lengthpred.sched.sweep.summary`): gain_vs_load.png."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.sched.sweep.pool import CLAIRVOYANT, MEAN_ORACLE, NO_PREDICTOR, RANDOM

ORACLES = (NO_PREDICTOR, CLAIRVOYANT, MEAN_ORACLE, RANDOM)
GAIN_FLOOR = -40.0  # %: the gain panel's lower limit


def plot_gain_and_starvation(summary: pd.DataFrame, gains: pd.DataFrame, path: str | Path,
                             hide: tuple[str, ...] = (MEAN_ORACLE, RANDOM)) -> Path:
    """Three panels against offered load: gain in mean per-token latency over FCFS [95% interval], p99
    end-to-end latency and longest wait for admission (s). One colour per policy; solid lines on the
    clairvoyant lengths, dashed on a head's predictions (predictors in `hide` are left out: they are
    anchors that crowd the figure; the tables keep them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthpred.figures import MAX_SERIES, first_series, legend_outside, plain_log_axis  # matplotlib

    g = gains[(gains["metric"] == "gain_vs_fcfs") & (gains["policy"] != "fcfs") & ~gains["predictor"].isin(hide)]
    lines = first_series(sorted({(p, q) for p, q in zip(g["policy"], g["predictor"], strict=True)},
                                key=lambda k: (k[1] != CLAIRVOYANT, k[1], k[0])), MAX_SERIES - 1)
    pols = sorted({p for p, _ in lines} | {"fcfs"})
    colour = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(pols)}

    def style(key: tuple[str, str]) -> dict:
        return {"color": colour[key[0]], "ls": "-" if key[1] in ORACLES else "--", "marker": "o", "ms": 3,
                "lw": 2 if key[0] == "fcfs" else 1.2}

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), layout="constrained")
    for key in lines:
        s = g[(g["policy"] == key[0]) & (g["predictor"] == key[1])].sort_values("load")
        v = pd.to_numeric(s["value"], errors="coerce") * 100
        lo, hi = (pd.to_numeric(s[c], errors="coerce") * 100 for c in ("ci_low", "ci_high"))
        axes[0].plot(s["load"], v, label=f"{key[0]} / {key[1]}", **style(key))
        if np.isfinite(lo).any():
            axes[0].fill_between(s["load"], lo, hi, color=colour[key[0]], alpha=0.08)
    axes[0].axhline(0, color="k", lw=0.8)
    axes[0].set_ylabel("gain in mean per-token latency over FCFS (%)")
    low = sorted({f"{p} / {q}" for p, q, v in zip(g["policy"], g["predictor"], g["value"], strict=True)
                  if (p, q) in lines and float(v) * 100 < GAIN_FLOOR})
    if low:  # one policy's collapse would squash every other line: cut the axis and say whose points are off it
        axes[0].set_ylim(bottom=GAIN_FLOOR)
        axes[0].text(0.02, 0.02, f"below {GAIN_FLOOR:g}% (cut): " + ", ".join(low), transform=axes[0].transAxes,
                     fontsize=7, va="bottom")
    for ax, metric, label in ((axes[1], "jct_p99", "p99 end-to-end latency (s)"),
                              (axes[2], "max_wait", "longest wait for admission (s)")):
        sub = summary[summary["metric"] == metric]
        for key in [("fcfs", NO_PREDICTOR), *lines]:
            s = sub[(sub["policy"] == key[0]) & (sub["predictor"] == key[1])].sort_values("load")
            if len(s):
                ax.plot(s["load"], s["value"], label=f"{key[0]} / {key[1]}" if key[0] == "fcfs" else None,
                        **style(key))
        ax.set_ylabel(label)
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
    for ax in axes:
        ax.set_xlabel("offered load (fraction of capacity)")
        ax.grid(alpha=0.3)
    legend_outside(fig, [axes[1], axes[0]], title="policy / predictor (solid: oracle lengths or none)")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
