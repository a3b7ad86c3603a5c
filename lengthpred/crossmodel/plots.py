"""Figures of the cross-model experiment: the transfer heatmap and achieved Spearman against the ceiling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.crossmodel.ceilings import POOLED
from lengthpred.crossmodel.table import ALL_MODELS, short_model
from lengthpred.eval.plots import _save, plt
from lengthpred.figures import legend_outside


def heatmap_transfer(matrix: pd.DataFrame, path: str | Path, head: str,
                     ceilings: Mapping[str, float] | None = None) -> Path | None:
    """Rows: trained on (each model, then all-models); columns: tested on; cells: pooled test Spearman.
    The diagonal is each model's own fit; `ceilings` (model → pooled ceiling) go under the column names."""
    if matrix.empty:
        return None
    m = matrix.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(2.0 + 0.62 * m.shape[1], 1.6 + 0.45 * m.shape[0]))
    finite = m[np.isfinite(m)]
    lo = float(finite.min()) if finite.size else 0.0
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")  # not fitted, or too few test prompts
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=min(lo, 0.0), vmax=1.0)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            own = matrix.index[i] == matrix.columns[j]
            ax.text(j, i, "n/a" if np.isnan(m[i, j]) else f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6,
                    color="k" if np.isnan(m[i, j]) else "w", fontweight="bold" if own else "normal")
    cols = [short_model(c) + (f"\n(ceil. {ceilings[c]:.2f})" if ceilings and c in ceilings else "")
            for c in matrix.columns]
    rows = ["mean over models" if r == ALL_MODELS else short_model(r) for r in matrix.index]
    ax.set_xticks(range(m.shape[1]), cols, rotation=60, ha="right", fontsize=6)
    ax.set_yticks(range(m.shape[0]), rows, fontsize=6)
    if ALL_MODELS in matrix.index:
        ax.axhline(len(matrix.index) - 1.5, color="w", lw=1.5)
    ax.set(xlabel="tested on (its mean-of-10 lengths)", ylabel="trained on",
           title=f"{head}: test Spearman, trained on A's lengths, tested on B's")
    fig.colorbar(im, ax=ax, fraction=0.03)
    return _save(fig, path)


def achieved_vs_ceiling(results: pd.DataFrame, ceil: Mapping[tuple[str, str], Mapping[str, Any]],
                        models: Sequence[str], head: str, path: str | Path) -> Path | None:
    """One point per (model, dataset) of the head's own fit: x = ceiling (mean of 10), y = test Spearman;
    the y = x line is the ceiling."""
    r = results[(results["head"] == head) & (results["metric"] == "spearman") & (results["fit"] == results["model"])
                & (results["dataset"] != POOLED)]
    pts = []
    for x in r.itertuples(index=False):
        c = ceil.get((x.model, x.dataset))
        if c is None or not isinstance(x.value, float) or np.isnan(x.value) or np.isnan(c["ceiling_mean_k"]):
            continue
        pts.append((x.dataset, float(c["ceiling_mean_k"]), float(x.value)))
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 4.2), layout="constrained")
    for k, ds in enumerate(sorted({p[0] for p in pts})):
        xy = np.array([(p[1], p[2]) for p in pts if p[0] == ds])
        ax.scatter(xy[:, 0], xy[:, 1], s=16, color=plt.cm.tab10(k), label=ds)
    x0 = min(p[1] for p in pts) - 0.01  # the ceilings sit near 1: spread them, don't pin the axis at 0
    ax.plot([x0, 1.005], [x0, 1.005], color="k", lw=0.8, ls="--", label="ceiling (y = x)")
    ax.set(xlim=(x0, 1.005), ylim=(min(-0.1, min(p[2] for p in pts) - 0.05), 1.02),
           xlabel="ceiling (mean of 10 samples)", ylabel=f"{head}: test Spearman",
           title=f"{len(models)} models × datasets: achieved vs ceiling")
    legend_outside(fig, ax)
    return _save(fig, path)
