"""The refinement curve figure: Spearman and MAE of remaining length vs tokens generated, CI bands."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lengthpred.decode.score import BASELINE
from lengthpred.figures import first_series, legend_outside


def plot_curve(df: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Two panels (Spearman, MAE) over t on a symlog axis (t = 0 included); the baseline dashed black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4), layout="constrained")
    for ax, metric, label in zip(axes, ("spearman", "mae"), ("Spearman ρ (remaining length)", "MAE (tokens)"),
                                 strict=True):
        for name in first_series(df["predictor"].unique()):
            g = df[df["predictor"] == name].sort_values("t")
            style = dict(color="black", ls="--") if name == BASELINE else {}
            line, = ax.plot(g["t"], g[metric], marker="o", ms=3, label=name, **style)
            ax.fill_between(g["t"], g[f"{metric}_lo"], g[f"{metric}_hi"], color=line.get_color(), alpha=0.15, lw=0)
        ax.set_xscale("symlog", linthresh=8)
        ticks = sorted(df["t"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("tokens generated t (requests still running)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    legend_outside(fig, axes)
    path = Path(path)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
