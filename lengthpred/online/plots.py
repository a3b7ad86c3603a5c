"""Adaptation curves and gain-vs-shift plots (matplotlib, Agg, PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

_STYLE = {"static": ("k", "--"), "oracle_refit": ("grey", ":"), "indomain": ("grey", "-.")}


def plot_curves(curves: pd.DataFrame, title: str, path: str | Path) -> Path:
    """Rolling stream Spearman and held-out target Spearman vs number of updates, one line per head."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharex=True)
    for head, g in curves.groupby("head", sort=False):
        color, ls = _STYLE.get(head, (None, "-"))
        kw = {"label": head, "color": color, "linestyle": ls, "linewidth": 1.4}
        axes[0].plot(g["n_updates"], g["stream_spearman"], **kw)
        axes[1].plot(g["n_updates"], g["test_spearman"], **kw)
        axes[2].plot(g["n_updates"], g["test_mae"], **kw)
    for ax, lab in zip(
        axes,
        ("stream Spearman (rolling window)", "target test Spearman", "target test MAE (tokens)"),
        strict=True,
    ):
        ax.set_xlabel("completed requests learned")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_gain_vs_shift(gains: pd.DataFrame, head: str, path: str | Path) -> Path:
    """Spearman gain of `head` over the static readout against each pair's measured shift size."""
    g = gains[gains["head"] == head]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(g["shift"], g["stream_spearman_delta"], label="whole stream", s=18)
    ax.scatter(g["shift"], g["test_spearman_delta"], label="target test (end of stream)", s=18, marker="x")
    for r in g.itertuples():
        ax.annotate(r.pair, (r.shift, r.stream_spearman_delta), fontsize=6, alpha=0.7)
    ax.axhline(0, color="k", linewidth=0.8)
    ax.set_xlabel("shift size (pair's length_wasserstein)")
    ax.set_ylabel(f"Spearman({head}) − Spearman(static)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
