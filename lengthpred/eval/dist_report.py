"""Markdown tables and the PIT figure of the distributional stage (lengthpred.eval.distributional)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lengthpred.eval.distributional import LABELS  # noqa: E402


def _ci(row: pd.Series, key: str, fmt: str = "{:.1f}") -> str:
    if key not in row or pd.isna(row[key]):
        return ""
    v = fmt.format(row[key])
    if f"{key}_low" in row and not pd.isna(row[f"{key}_low"]):
        v += f" [{fmt.format(row[f'{key}_low'])}, {fmt.format(row[f'{key}_high'])}]"
    return v


def score_markdown(scores: pd.DataFrame) -> str:
    cols = ["pinball@0.1", "pinball@0.5", "pinball@0.9", "crps", "crps_diff", "coverage@0.5", "coverage@0.8"]
    head = ("| head | pinball 0.1 ↓ | pinball 0.5 ↓ | pinball 0.9 ↓ | CRPS ↓ | CRPS − reference | "
            "coverage 50% (→0.50) | coverage 80% (→0.80) |")
    lines = [head, "|---|" + "---:|" * len(cols)]
    for _, r in scores.iterrows():
        cells = [_ci(r, c, "{:.2f}" if c.startswith("coverage") else "{:.1f}") for c in cols]
        lines.append(f"| {LABELS.get(r['head'], r['head'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def frame_markdown(df: pd.DataFrame, fmt: str = "{:.3f}") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    for _, r in df.iterrows():
        cells = [str(r[c]) if isinstance(r[c], str) else ("" if pd.isna(r[c]) else fmt.format(r[c])) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(scores: pd.DataFrame, recap: pd.DataFrame, synth: pd.DataFrame, info: dict[str, Any]) -> str:
    decided = scores.get("decided@0.8")
    dec = "" if decided is None else (
        f" The cap decides the 80% interval's outcome for {decided.min():.0%}–{decided.max():.0%} of the capped "
        "samples (the interval ends below the cap: a known miss); the rest count with the model's own "
        "probability (D-calibration).")
    return "\n\n".join([
        f"## Distributional heads: {info['model']} on {info['data']} (features: {info['features']})",
        f"Fitted on {info['n_train']} train prompts ({info['train_samples']} sampled lengths, each a draw), scored on "
        f"{info['n_test']} test prompts ({info['test_samples']} samples, {info['test_capped']:.0%} capped at "
        f"{info['cap']:g}). Scores are on the capped length min(L, {info['cap']:g}): pinball compares "
        f"min(q̂, cap) with min(y, cap), CRPS integrates below the cap only (threshold-weighted), so a capped "
        "sample is scored on what is known, L ≥ cap." + dec + " Means per prompt, then over prompts; 95% "
        f"bootstrap intervals over prompts; CRPS − reference is the paired difference against {info['reference']}.",
        score_markdown(scores),
        f"### Known truth 1: the trace re-capped at {info['short_cap']:g}",
        f"Fitted on the train samples re-capped at {info['short_cap']:g} ({info['train_capped_short']:.0%} capped "
        f"there); checked on the test samples at the trace's cap {info['cap']:g}, which show every length between "
        "the two caps. `P(L>=t)`: mean predicted share vs observed; `share<=qτ`: share of test samples at or "
        "below the predicted τ-quantile (τ when calibrated; a range where samples capped at the trace's cap meet "
        "a q̂ beyond it, since they may lie on either side).",
        frame_markdown(recap),
        "### Known truth 2: a synthetic trace (log1p L linear in 8 features + N(0, 0.6²), 1,440 prompts × 3, "
        f"capped at {info['short_cap']:g})",
        frame_markdown(synth),
    ])


def pit_figure(pit: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Small multiples: one PIT histogram per head (flat line = calibrated)."""
    names = list(pit.index)
    cols = 3
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), sharey=True, squeeze=False)
    k = pit.shape[1]
    edges = np.linspace(0, 1, k + 1)
    for ax, name in zip(axes.ravel(), names, strict=False):
        ax.bar(edges[:-1], pit.loc[name].to_numpy(), width=1 / k, align="edge", color="C0", edgecolor="white")
        ax.axhline(1 / k, color="k", lw=0.8, ls="--")
        ax.set_title(LABELS.get(name, name), fontsize=8)
        ax.set_xlim(0, 1)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("share of PIT mass", fontsize=7)
    for c in range(cols):  # the lowest panel drawn in each column
        shown = [r for r in range(rows) if r * cols + c < len(names)]
        if shown:
            axes[shown[-1], c].set_xlabel("PIT", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def adapt_markdown(curves: pd.DataFrame) -> str:
    """CRPS against labels seen, mean over target domains, per model (and the per-domain last point)."""
    n_dom = curves["target"].nunique()
    wide = curves.groupby(["labels", "model"])["crps"].mean().unstack("model")
    lines = [f"### Online: CRPS on each target domain's test prompts as its completions stream in (mean of {n_dom} "
             "targets; fitted on the other domains' train prompts; one sampled length per streamed prompt, "
             "capped ones censored for `censored_rls`, taken as the cap for `rls_cap_as_value`)", "",
             "| labels seen | " + " | ".join(wide.columns) + " |", "|---:|" + "---:|" * len(wide.columns)]
    for n, r in wide.iterrows():
        if n == wide.index.min() or n == wide.index.max() or n in (40, 80, 160):
            lines.append(f"| {n} | " + " | ".join(f"{v:.1f}" for v in r) + " |")
    last = curves[curves["labels"] == curves.groupby("target")["labels"].transform("max")]
    per = last.pivot_table(index="target", columns="model", values="crps")
    lines += ["", "| target (after its whole stream) | " + " | ".join(per.columns) + " |",
              "|---|" + "---:|" * len(per.columns)]
    lines += [f"| {t} | " + " | ".join(f"{v:.1f}" for v in r) + " |" for t, r in per.iterrows()]
    return "\n".join(lines)


def t3_adapt_markdown(curves: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> str:
    """T3's streams: CRPS against labels seen (mean over pairs and stream seeds, then targets), and per target
    after its whole stream the differences that matter, with 95% bootstrap intervals over the target's test
    prompts (each prompt's CRPS averaged over the target's pairs and seeds first; `all` averages the targets,
    resampling each target's prompts)."""
    run = curves[curves["labels"] >= 0]
    n_pairs, n_seeds = run["pair"].nunique(), run["seed"].nunique()
    per_target = run.groupby(["target", "labels", "model"])["crps"].mean()
    wide = per_target.groupby(["labels", "model"]).mean().unstack("model")
    lines = [f"### Online on T3's streams: CRPS on each target's test prompts as its completions stream in ({n_pairs} "
             f"pairs × {n_seeds} stream seeds; mean over a target's pairs and seeds, then over targets)", "",
             "| labels seen | " + " | ".join(wide.columns) + " |", "|---:|" + "---:|" * len(wide.columns)]
    for n, r in wide.iterrows():
        if n == wide.index.min() or n == wide.index.max() or n in (40, 80, 160, 320):
            lines.append(f"| {n} | " + " | ".join(f"{v:.1f}" for v in r) + " |")
    final = curves[curves["labels"] < 0].groupby(["target", "prompt", "model"])["crps"].mean().unstack("model")
    pairs = [("censored_rls", "static"), ("rls_cap_as_value", "static"), ("censored_rls", "rls_cap_as_value")]
    rng = np.random.default_rng(seed)
    draws: dict[str, list[np.ndarray]] = {}
    lines += ["", "| target (after its whole stream) | " + " | ".join(final.columns) + " | "
              + " | ".join(f"{a} − {b} [95% CI]" for a, b in pairs) + " |",
              "|---|" + "---:|" * (len(final.columns) + len(pairs))]

    def row(name: str, means: pd.Series, diffs: list[tuple[float, np.ndarray]]) -> str:
        cells = [f"{v:.1f}" for v in means] + [f"{d:+.1f} [{np.quantile(b, 0.025):+.1f}, {np.quantile(b, 0.975):+.1f}]"
                                                for d, b in diffs]
        return f"| {name} | " + " | ".join(cells) + " |"

    for t, block in final.groupby(level="target"):
        idx = rng.integers(0, len(block), size=(n_boot, len(block)))
        diffs = []
        for a, b in pairs:
            d = (block[a] - block[b]).to_numpy(float)
            boot = d[idx].mean(axis=1)
            draws.setdefault(f"{a}-{b}", []).append(boot)
            diffs.append((float(d.mean()), boot))
        lines.append(row(str(t), block.mean(), diffs))
    by_target = final.groupby(level="target").mean()
    lines.append(row("all", by_target.mean(), [(float((by_target[a] - by_target[b]).mean()),
                                                np.mean(draws[f"{a}-{b}"], axis=0)) for a, b in pairs]))
    return "\n".join(lines)
