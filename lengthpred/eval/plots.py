"""Paper plots (matplotlib, Agg): predicted vs true, cross-domain heatmap, adaptation curves, latency CDFs.

PNG files are written without a Software/date stamp so reruns on the same inputs give the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lengthpred.eval.results import as_float  # noqa: E402
from lengthpred.figures import MAX_SERIES, first_series, legend_outside, plain_log_axis  # noqa: E402,F401
from lengthpred.names import POOLED_DOMAIN, SplitName  # noqa: E402

_PNG_META = {"Software": None}


def _grid(n: int, size: float = 3.2, cols: int = 3) -> tuple[plt.Figure, np.ndarray]:
    cols = min(n, cols)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols + 1.6, size * rows), squeeze=False,
                             layout="constrained")
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, axes.ravel()


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def scatter_pred_true(
    preds: pd.DataFrame, path: str | Path, split_kind: str = "indomain", part: str = "test"
) -> Path | None:
    """Predicted vs true length per head (log axes, y = x dashed), pooled over the chosen kind and part of
    split (the train stage also writes val rows)."""
    names = [SplitName.try_parse(s) for s in preds["split"]]
    d = preds[[n is not None and n.kind == split_kind and n.part == part for n in names]]
    heads = sorted(d["head"].unique())
    if not heads:
        return None
    fig, axes = _grid(len(heads))
    lo = max(1.0, float(min(d["y_true"].min(), d["y_pred"].min())))
    hi = max(lo * 10, float(max(d["y_true"].max(), d["y_pred"].max())))
    for ax, h in zip(axes, heads, strict=False):
        g = d[d["head"] == h]
        for dom in sorted(g["domain"].unique()):
            gd = g[g["domain"] == dom]
            ax.scatter(
                np.clip(gd["y_true"], lo, None), np.clip(gd["y_pred"], lo, None), s=8, alpha=0.6, label=dom
            )
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlim=(lo, hi),
            ylim=(lo, hi),
            title=h,
            xlabel="true length (tokens)",
            ylabel="predicted (tokens)",
        )
        plain_log_axis(ax.xaxis)
        plain_log_axis(ax.yaxis)
        ax.tick_params(axis="x", labelrotation=45)
    legend_outside(fig, axes, "domain")
    return _save(fig, path)


def heatmap_cross(
    results: pd.DataFrame, path: str | Path, head: str, metric: str = "spearman", part: str = "test"
) -> Path | None:
    """Source × target matrix of one head's metric, in-domain on the diagonal; undefined cells blank."""
    r = results[(results["head"] == head) & (results["metric"] == metric)]
    cells: dict[tuple[str, str], float] = {}
    for row in r.itertuples(index=False):
        p = SplitName.try_parse(row.split)
        if p is None or p.part != part:
            continue
        if p.kind == "cross":
            cells[(p.source, p.target)] = as_float(row.value)
        elif p.kind == "indomain" and p.name != POOLED_DOMAIN:
            cells[(p.name, p.name)] = as_float(row.value)
    if not any(k[0] != k[1] for k in cells):
        return None
    targets = sorted({t for _, t in cells})
    sources = sorted({s for s, _ in cells}, key=lambda x: (x == "mix", x))
    m = np.array([[cells.get((s, t), np.nan) for t in targets] for s in sources])
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(targets), 1.0 + 0.6 * len(sources)))
    im = ax.imshow(
        m,
        cmap="viridis",
        vmin=-1 if metric in ("spearman", "kendall", "pearson") else None,
        vmax=1 if metric in ("spearman", "kendall", "pearson") else None,
    )
    for i in range(len(sources)):
        for j in range(len(targets)):
            ax.text(
                j,
                i,
                "n/a" if np.isnan(m[i, j]) else f"{m[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color="w",
            )
    ax.set_xticks(range(len(targets)), targets, rotation=45, ha="right")
    ax.set_yticks(range(len(sources)), sources)
    ax.set(xlabel="test on", ylabel="train on", title=f"{head}: {metric}")
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, path)


def adaptation_curves(curves: pd.DataFrame, path: str | Path, metric: str = "test_spearman") -> Path | None:
    """One panel per source→target pair: metric vs completed updates, a line per head."""
    if metric not in curves.columns:
        return None
    pairs = sorted(curves["pair"].unique())
    fig, axes = _grid(len(pairs), 3.6)
    for ax, pair in zip(axes, pairs, strict=False):
        g = curves[curves["pair"] == pair]
        for h in first_series(sorted(curves["head"].unique())):
            gh = g[g["head"] == h].sort_values("n_updates")
            ax.plot(gh["n_updates"], gh[metric], label=h, lw=1.2)
        ax.set(title=str(pair), xlabel="completed requests (updates)", ylabel=metric)
    legend_outside(fig, axes, "head")
    return _save(fig, path)


def _cdf(ax, values, **kw) -> None:
    x = np.sort(np.asarray(values, dtype=float))
    ax.plot(x, np.arange(1, x.size + 1) / x.size, **kw)


def latency_cdfs(lat: pd.DataFrame, path: str | Path, baseline: str = "fcfs") -> Path | None:
    """Empirical CDFs of per-token latency: a row of panels per load, a panel per policy (split into
    panels of at most 7 predictors), the `baseline` policy dashed in every panel for reference."""
    loads = sorted(lat["load"].unique())
    if not loads:
        return None
    panels = []  # (load, policy, predictors)
    for load in loads:
        g = lat[lat["load"] == load]
        for pol in sorted(set(g["policy"]) - {baseline}):
            preds = sorted(g.loc[g["policy"] == pol, "predictor"].unique())
            for k in range(0, len(preds), MAX_SERIES - 1):
                panels.append((load, pol, preds[k : k + MAX_SERIES - 1]))
    if not panels:
        panels = [(load, baseline, []) for load in loads]
    cols = max(1, len(panels) // len(loads))
    fig, axes = _grid(len(panels), 3.4, cols=cols)
    for ax, (load, pol, preds) in zip(axes, panels, strict=False):
        g = lat[lat["load"] == load]
        base = g[g["policy"] == baseline]
        if len(base):
            _cdf(ax, base["latency"], color="k", ls="--", lw=1.0, label=baseline)
        for pred in preds:
            _cdf(ax, g.loc[(g["policy"] == pol) & (g["predictor"] == pred), "latency"], lw=1.1, label=pred)
        ax.set(xscale="log", title=f"{pol}, load {load:g}", xlabel="per-token latency (s)", ylabel="CDF")
        plain_log_axis(ax.xaxis)
        ax.tick_params(axis="x", labelrotation=45)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def _col(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)  # undefined → NaN, drawn as a gap


def layer_curves(df: pd.DataFrame, choice: dict, path: str | Path, title: str = "") -> Path | None:
    """One panel per head: validation Spearman (mean over seeds: what the layer is chosen on) and test
    Spearman (first seed, with its 95% bootstrap band; the seed mean dotted where a cell has several
    seeds) against the layer, the validation-chosen layer marked by a vertical line (`choice`:
    lengthpred.heads.layer_choice.choose_layers). Layers whose score is undefined are named in the panel."""
    heads = sorted(df["head"].unique())
    if not heads:
        return None
    fig, axes = _grid(len(heads), 3.8, cols=len(heads))
    for ax, h in zip(axes, heads, strict=False):
        g = df[df["head"] == h].sort_values("layer")
        x = g["layer"].to_numpy()
        seeds = int(g["n_seeds"].max()) if "n_seeds" in g else 1
        ax.plot(x, _col(g["val_spearman_seed_mean"]), color="tab:blue", marker="o", ms=2.5, lw=1.2,
                label="validation (mean over seeds)")
        ax.fill_between(x, _col(g["ci_low"]), _col(g["ci_high"]), color="tab:orange", alpha=0.2, lw=0,
                        label="test 95% CI (first seed)")
        ax.plot(x, _col(g["spearman"]), color="tab:orange", marker="o", ms=2.5, lw=1.2, label="test (first seed)")
        if seeds > 1:
            ax.plot(x, _col(g["spearman_seed_mean"]), color="tab:red", ls=":", lw=1.0,
                    label="test (mean over seeds)")
        c = choice.get(h)
        if c is not None:
            ax.axvline(c["layer"], color="k", ls="--", lw=0.9, label="chosen on validation")
            ax.annotate(f"L{c['layer']}: val {c['val_spearman']:.3f}, test {c['test_spearman']:.3f}",
                        xy=(c["layer"], 0.02), xycoords=("data", "axes fraction"), fontsize=7,
                        ha="right" if c["layer"] > x.mean() else "left")
        undefined = x[np.isnan(_col(g["spearman"]))]
        if len(undefined):
            ax.annotate(f"undefined at layer {', '.join(map(str, undefined))} (constant prediction)",
                        xy=(0.02, 0.97), xycoords="axes fraction", fontsize=6.5, va="top")
        fits = f"{seeds} seeds" if seeds > 1 else "one fit"
        ax.set(title=f"{h} ({g['pooling'].iloc[0]} token, {fits})", xlabel="layer (hidden_states index)",
               ylabel="Spearman")
        ax.grid(alpha=0.3, lw=0.5)
    shown = axes[: len(heads)]
    lims = [a.get_ylim() for a in shown]
    for a in shown:  # one y scale, so heads compare across panels
        a.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
    if title:
        fig.suptitle(title, fontsize=9)
    if len(heads) == 1:  # one panel: an outside legend would run into the title
        axes[0].legend(fontsize=7, loc="lower right")
    else:
        legend_outside(fig, axes)
    return _save(fig, path)


def head_scores(heads: pd.DataFrame, path: str | Path, title: str = "") -> Path | None:
    """Attention layer × head heatmap of each head's validation Spearman when its importance alone pools the
    readout layer (`heads`: columns layer, head, val_spearman, chosen; lengthpred.stages.attention_sweep), the
    heads chosen on validation outlined."""
    if heads.empty:
        return None
    layers, cols = sorted(heads["layer"].unique()), sorted(heads["head"].unique())
    grid = np.full((len(layers), len(cols)), np.nan)
    at = {(int(r["layer"]), int(r["head"])): r for r in heads.to_dict("records")}
    for i, layer in enumerate(layers):
        for j, h in enumerate(cols):
            r = at.get((int(layer), int(h)))
            if r is not None:
                grid[i, j] = as_float(r["val_spearman"])
    fig, ax = plt.subplots(figsize=(1.6 + 0.42 * len(cols), 1.4 + 0.22 * len(layers)), layout="constrained")
    im = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
    for (layer, h), r in at.items():
        if bool(r["chosen"]):
            ax.add_patch(plt.Rectangle((cols.index(h) - 0.5, layers.index(layer) - 0.5), 1, 1, fill=False,
                                       ec="red", lw=1.2))
    ax.set_xticks(range(len(cols)), [str(c) for c in cols], fontsize=7)
    ax.set_yticks(range(len(layers)), [str(v) for v in layers], fontsize=7)
    ax.set(xlabel="attention head", ylabel="attention layer (decoder layer)")
    fig.colorbar(im, ax=ax, label="validation Spearman, that head alone")
    ax.set_title((title + "\n" if title else "") + "red: the heads chosen on validation", fontsize=8)
    return _save(fig, path)


def learning_curve_figure(points: pd.DataFrame, trends: dict[str, tuple[float, float, float]], ceiling: float,
                          share: float, path: str | Path, title: str = "",
                          others: dict[str, list[float]] | None = None, others_at: float | None = None,
                          ceiling_ci: tuple[float, float] | None = None) -> Path:
    """Test Spearman against train prompts (log axis): each resample's point, the mean per size, the fitted
    a − b·n^(−c) of each head (`trends`: head → (a, b, c)) drawn out to 8× the largest train set, the noise ceiling
    and `share` of it. `others`: heads fitted on the full train set only (head → test Spearman per seed), drawn at
    `others_at` (default: the largest train set of `points`) as each seed's point and their mean. `ceiling_ci`: the
    ceiling's interval, drawn as a band around it (the ceiling is an estimate too)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    n_max = float(points["n_train"].max())
    grid = np.geomspace(float(points["n_train"].min()), 8 * n_max, 200)
    for i, (head, g) in enumerate(points.groupby("head", sort=True)):
        color = f"C{i}"
        ax.scatter(g["n_train"], g["test_spearman"], s=12, color=color, alpha=0.5)
        m = g.groupby("n_train")["test_spearman"].mean()
        ax.plot(m.index, m.to_numpy(), "o-", color=color, label=f"{head} (mean over resamples)")
        a, b, c = trends.get(head, (math.nan, math.nan, math.nan))
        if all(map(math.isfinite, (a, b, c))):
            ax.plot(grid, a - b * grid ** (-c), "--", color=color, lw=1, label=f"{head}: fitted a − b·n^(−c)")
    at = n_max if others_at is None else float(others_at)
    for j, (head, rhos) in enumerate((others or {}).items(), start=points["head"].nunique()):
        finite = [r for r in rhos if math.isfinite(r)]
        if not finite:
            continue
        ax.scatter([at] * len(finite), finite, s=12, color=f"C{j}", alpha=0.5, marker="D")
        ax.scatter([at], [float(np.mean(finite))], s=40, color=f"C{j}", marker="D",
                   label=f"{head} (full train set only, mean over seeds)")
    ax.axhline(ceiling, color="k", lw=1, label="noise ceiling (test)")
    if ceiling_ci is not None and all(map(math.isfinite, ceiling_ci)):
        ax.axhspan(*ceiling_ci, color="k", alpha=0.08, lw=0, label="the ceiling's 95% interval")
    ax.axhline(share * ceiling, color="k", lw=1, ls=":", label=f"{share:.2f} of the ceiling")
    ax.axvline(n_max, color="0.6", lw=0.8)
    ax.set_xscale("log")
    plain_log_axis(ax.xaxis)
    ax.set_xlabel("train prompts")
    ax.set_ylabel("test Spearman (pooled)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, metadata=_PNG_META)
    plt.close(fig)
    return path
