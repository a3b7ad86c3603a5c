"""Adaptation figures (matplotlib, Agg, PNG): the summary over pairs, the per-target grid, one pair's
curves, and the gain against shift.

Figure rules (issue 13): at most 8 series per panel, colours that do not repeat within a panel (tab10),
legends outside the data, plain-number ticks on log-like axes (labels seen spans 1 to hundreds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from lengthpred.artefacts import CURVES, STREAM_CURVES  # noqa: E402
from lengthpred.figures import MAX_SERIES  # noqa: E402
from lengthpred.names import SELECTED_RLS  # noqa: E402

_PNG_META = {"Software": None}  # no software/date stamp: same inputs, same bytes
_TICKS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
_FINE = tuple(m * 10**e for e in range(5) for m in (1, 1.5, 2, 3, 5, 7))
# per-pair panels: these heads, in this order (tab10 colours by position, so none repeats in a panel)
PAIR_HEADS = ("static", SELECTED_RLS, "sgd", "window", "oracle_refit", "indomain")


def _colors(n: int) -> list:
    return [plt.get_cmap("tab10")(i % 10) for i in range(n)]


def labels_axis(ax: plt.Axes, lo: float, hi: float, label: str) -> None:
    """A log x axis over [lo, hi] (symmetric-log from 0 when lo < 1) with plain-number ticks from the
    1-2-5 series (1-1.5-2-3-5-7 when fewer than three fit), never scientific notation."""
    hi = max(float(hi), 1.0)
    if lo >= 1:
        ax.set_xscale("log")
        a, b = float(lo) / 1.15, hi * 1.15
    else:
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.4)
        a, b = 0.0, hi * 1.1
    ticks = [t for t in _TICKS if a <= t <= b]
    if len(ticks) < 3:
        ticks = sorted({round(t, 6) for t in _FINE if a <= t <= b})
    ax.set_xlim(a, b)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata=_PNG_META)
    plt.close(fig)
    return path


def _legend_outside(ax: plt.Axes, **kw) -> None:
    ax.legend(
        loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, frameon=False, **kw
    )


def quantile_band(
    curves: pd.DataFrame, x: str, y: str, *, min_pairs: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over pairs: each pair's y interpolated on a common geometric grid of x (inside its own range),
    then the median and quartiles where at least `min_pairs` pairs reach. Returns (grid, q25, q50, q75)."""
    per_pair = []
    for _, g in curves.groupby("pair", sort=True):
        g = g[np.isfinite(g[y])].groupby(x, sort=True)[y].mean()
        if len(g):
            per_pair.append((g.index.to_numpy(dtype=float), g.to_numpy(dtype=float)))
    if not per_pair:
        return (np.array([]),) * 4
    xmax = max(float(px.max()) for px, _ in per_pair)
    grid = np.unique(np.concatenate([[0.0], np.round(np.geomspace(1.0, max(xmax, 1.0), 30))]))
    vals = np.full((len(per_pair), len(grid)), np.nan)
    for k, (px, py) in enumerate(per_pair):
        inside = (grid >= px.min()) & (grid <= px.max())
        vals[k, inside] = np.interp(grid[inside], px, py)
    ok = np.sum(np.isfinite(vals), axis=0) >= min(min_pairs, len(per_pair))
    if not ok.any():
        return (np.array([]),) * 4
    q25, q50, q75 = np.nanpercentile(vals[:, ok], [25, 50, 75], axis=0)
    return grid[ok], q25, q50, q75


def plot_delta_summary(
    stream_curves: pd.DataFrame,
    test_curves: pd.DataFrame,
    path: str | Path,
    heads: Sequence[tuple[str, str]] = ((SELECTED_RLS, "RLS, λ chosen on validation"),),
) -> Path | None:
    """Median and inter-quartile band over pairs of ΔSpearman (head − static) against labels seen:
    in-stream (the main curve: predictions at arrival, scored on the revealed length) and on the held-out
    target test set (against labels learned)."""
    if stream_curves.empty:
        return None
    heads = list(heads)[:MAX_SERIES]
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.9))
    lo, hi = [np.inf, 0.0], [1.0, 1.0]
    for (head, label), color in zip(heads, _colors(len(heads)), strict=True):
        sc = stream_curves[stream_curves["head"] == head]
        tc = _test_delta(test_curves, head)
        for k, (df, x) in enumerate(((sc, "labels_seen"), (tc, "n_updates"))):
            grid, q25, q50, q75 = quantile_band(df, x, "delta" if k else "stream_spearman_delta")
            if grid.size == 0:
                continue
            lo[k], hi[k] = min(lo[k], float(grid.min())), max(hi[k], float(grid.max()))
            n_pairs = df["pair"].nunique()
            axes[k].fill_between(grid, q25, q75, color=color, alpha=0.22, linewidth=0)
            axes[k].plot(grid, q50, color=color, lw=1.8, label=f"{label} (median, IQR; {n_pairs} pairs)")
    titles = ("in-stream (predicted at arrival)", "held-out target test set (state after n labels)")
    xlabels = ("labels seen when the request was predicted", "labels learned (completed requests)")
    for ax, title, xl, a, b in zip(axes, titles, xlabels, lo, hi, strict=True):
        ax.axhline(0, color="k", lw=0.8)
        labels_axis(ax, a if np.isfinite(a) else 0.0, b, xl)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("ΔSpearman vs static readout")
        ax.grid(alpha=0.3)
    _legend_outside(axes[1])
    return _save(fig, path)


def _test_delta(test_curves: pd.DataFrame, head: str, baseline: str = "static") -> pd.DataFrame:
    """Held-out test Spearman of `head` minus the baseline's at the same number of labels learned."""
    if test_curves.empty:
        return pd.DataFrame(columns=["pair", "n_updates", "delta"])
    key = ["pair", "n_updates"]
    a = test_curves[test_curves["head"] == head].set_index(key)["test_spearman"]
    b = test_curves[test_curves["head"] == baseline].set_index(key)["test_spearman"]
    d = (a - b).dropna().rename("delta").reset_index()
    return d


def plot_delta_grid(stream_curves: pd.DataFrame, path: str | Path, head: str = SELECTED_RLS) -> Path | None:
    """One panel per target: in-stream ΔSpearman (head − static) vs labels seen, one line per source."""
    sc = stream_curves[stream_curves["head"] == head]
    if sc.empty:
        return None
    targets = sorted(sc["target"].unique())
    sources = sorted(sc["source"].unique(), key=lambda s: (s == "mix", s))
    colors = dict(zip(sources, _colors(len(sources)), strict=True))
    cols = min(3, len(targets))
    rows = int(np.ceil(len(targets) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 1.6, 3.0 * rows), squeeze=False, sharey=True)
    lo, hi = float(sc["labels_seen"].min()), float(sc["labels_seen"].max())
    for ax, tgt in zip(axes.ravel(), targets, strict=False):
        g = sc[sc["target"] == tgt]
        for src, gs in g.groupby("source", sort=False):
            gs = gs.sort_values("window_start")
            ax.plot(gs["labels_seen"], gs["stream_spearman_delta"], color=colors[src], lw=1.3, label=src)
        ax.axhline(0, color="k", lw=0.8)
        labels_axis(ax, lo, hi, "labels seen when predicted")
        ax.set_title(f"target: {tgt}", fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("in-stream ΔSpearman")
    for ax in axes.ravel()[len(targets) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colors[s], lw=1.6) for s in sources]
    fig.legend(
        handles,
        [f"source: {s}" for s in sources],
        loc="upper left",
        bbox_to_anchor=(1.0, 0.95),
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    return _save(fig, path)


def plot_curves(
    stream_curves: pd.DataFrame,
    test_curves: pd.DataFrame,
    title: str,
    path: str | Path,
    labels: dict[str, str] | None = None,
) -> Path:
    """One pair: in-stream Spearman vs labels seen, held-out test Spearman vs labels learned; a line per
    head of `PAIR_HEADS` plus any mean-label oracle (≤ 8 series)."""
    labels = labels or {}
    present = set(stream_curves["head"])
    heads = [h for h in PAIR_HEADS if h in present] + sorted(h for h in present if h.endswith("+mean"))
    heads = heads[:MAX_SERIES]
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.8))
    ranges = (
        (float(stream_curves["labels_seen"].min()), float(stream_curves["labels_seen"].max())),
        (0.0, float(test_curves["n_updates"].max())),
    )
    for h, color in zip(heads, _colors(len(heads)), strict=True):
        ls = "--" if h == "static" else (":" if h in ("oracle_refit", "indomain") else "-")
        kw = {"color": color, "linestyle": ls, "lw": 1.4, "label": labels.get(h, h)}
        s = stream_curves[stream_curves["head"] == h].sort_values("window_start")
        axes[0].plot(s["labels_seen"], s["stream_spearman"], **kw)
        t = test_curves[test_curves["head"] == h].sort_values("n_updates")
        axes[1].plot(t["n_updates"], t["test_spearman"], **kw)
    for ax, (lo, hi), xl, yl in zip(
        axes,
        ranges,
        ("labels seen when predicted (rolling window median)", "labels learned (completed requests)"),
        ("in-stream Spearman (vs revealed length)", "target test Spearman"),
        strict=True,
    ):
        labels_axis(ax, lo, hi, xl)
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    _legend_outside(axes[1])
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_gain_vs_shift(gains: pd.DataFrame, head: str, path: str | Path) -> Path:
    """ΔSpearman of `head` over the static readout against each pair's served-length shift, by target."""
    g = gains[gains["head"] == head]
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.8), sharey=True)
    targets = sorted(g["target"].unique()) if "target" in g else [""]
    for tgt, color in zip(targets, _colors(len(targets)), strict=True):
        gt = g[g["target"] == tgt] if tgt else g
        for ax, col in zip(axes, ("stream_spearman_delta", "test_spearman_delta"), strict=True):
            ax.scatter(gt["shift"], gt[col], s=22, color=color, label=f"target: {tgt}" if tgt else None)
    for ax, title in zip(axes, ("in-stream", "target test (end of stream)"), strict=True):
        ax.axhline(0, color="k", linewidth=0.8)
        ax.set_xlabel("shift: W1 of log served lengths, source train vs target stream")
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"ΔSpearman ({head} − static)")
    if targets != [""]:
        _legend_outside(axes[1])
    return _save(fig, path)


def adaptation_figures(run_dir: str | Path, out_dir: str | Path, head: str = SELECTED_RLS) -> dict[str, Path]:
    """The summary figure and the per-target grid from an online run's stream_curves.csv and curves.csv."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    sc = pd.read_csv(run_dir / STREAM_CURVES)
    tc = pd.read_csv(run_dir / CURVES) if (run_dir / CURVES).is_file() else pd.DataFrame()
    series = [(head, "RLS, λ chosen on validation")]
    series += [(h, f"mean-label oracle ({h})") for h in sorted(sc["head"].unique()) if h.endswith("+mean")]
    out = {}
    for key, path in (
        ("adaptation_summary", plot_delta_summary(sc, tc, out_dir / "adaptation_summary.png", series)),
        ("adaptation_by_target", plot_delta_grid(sc, out_dir / "adaptation_by_target.png", head)),
    ):
        if path is not None:
            out[key] = path
    return out
