"""Text tables and the figure of the speculative-decoding comparison (scripts/simulate_spec.py).

Figure rules of lengthpred.figures: at most 8 series per panel, no colour repeated in a panel, plain
numbers on log axes, one legend outside the panels. matplotlib is imported only when plotting.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.sched.spec.experiment import REGIMES
from lengthpred.sched.sweep.summary import KEY


def _ms(v: float, lo: float, hi: float) -> str:
    if not np.isfinite(v):
        return ""
    return f"{1e3 * v:.2f} [{1e3 * lo:.2f}, {1e3 * hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else f"{1e3 * v:.2f}"


def _pct(v: float, lo: float, hi: float) -> str:
    if v is None or not np.isfinite(v):
        return ""
    txt = f"{100 * v:+.1f}%"
    return txt + (f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def table_markdown(table: pd.DataFrame, metric: str = KEY) -> str:
    """The comparison as Markdown: one row per (load, regime, policy), fastest first within a block."""
    lines = ["| load | acceptance | policy | predictor | mean per-token latency (ms) ↓ [95% CI] | "
             "vs FCFS [95% CI] | vs MLFQ [95% CI] |", "|---:|---|---|---|---:|---:|---:|"]
    for r in table.itertuples(index=False):
        d = r._asdict()
        lines.append(f"| {d['load']:g} | {d['regime']} | {d['policy']} | {d['predictor']} | "
                     f"{_ms(d[metric], d[f'{metric}_lo'], d[f'{metric}_hi'])} | "
                     f"{_pct(d['gain_vs_fcfs'], d['gain_vs_fcfs_lo'], d['gain_vs_fcfs_hi'])} | "
                     f"{_pct(d['gain_vs_mlfq'], d['gain_vs_mlfq_lo'], d['gain_vs_mlfq_hi'])} |")
    seeds = int(table["seeds"].max()) if len(table) else 0
    lines += ["", f"Means over {seeds} seeds with percentile-bootstrap 95% intervals; gains are 1 − mean(policy)/"
              "mean(baseline), paired over seeds (negative: slower than the baseline)."]
    return "\n".join(lines)


ACCEPT_LABELS = {
    "requests": "answers measured",
    "output_tokens_mean": "mean answer length (tokens)",
    "steps_mean": "mean steps per answer (prefill step included)",
    "tokens_per_step_pooled": "tokens per step, pooled (n·A + 1)",
    "accept_mean": "A per request (the simulator's rate): mean",
    "accept_sd_between": "A per request: sd between requests (Beta(7,3): 0.138)",
    "accept_p10": "A per request: 10th percentile",
    "accept_p50": "A per request: median",
    "accept_p90": "A per request: 90th percentile",
    "accept_below_0.05_share": "share of requests with A < 0.05",
    "accept_per_proposed_pooled": "accepted per proposed draft token, pooled",
    "no_proposal_share_pooled": "share of decode steps with no proposal, pooled",
    "step_sd_within_mean": "sd of per-step acceptance within a request (mean over requests)",
    "step_var_within_share": "share of per-step acceptance variance within requests",
    "spearman_accept_length": "Spearman(A, answer length)",
}


def acceptance_markdown(summary: pd.DataFrame, domains: pd.DataFrame) -> str:
    """The acceptance figures (`spec_acceptance.variability_summary`, `by_domain`) as Markdown."""
    lines = ["| quantity | value | n |", "|---|---:|---:|"]
    for r in summary.itertuples(index=False):
        label = ACCEPT_LABELS.get(r.metric)
        if label is None and r.metric.startswith("early"):
            e, rest = r.metric[5:].split("_vs_rest_")
            label = {"pearson": f"Â over the first {e} decode steps vs the rest's acceptance: Pearson",
                     "spearman": f"Â over the first {e} decode steps vs the rest's acceptance: Spearman",
                     "mae": f"Â over the first {e} decode steps: MAE against the rest's acceptance",
                     "mae_of_mean": f"the pool's mean: MAE against the rest's acceptance (first {e} left out)"}[rest]
        v = r.value
        txt = "" if v is None or (isinstance(v, float) and math.isnan(v)) else (
            f"{int(v)}" if r.metric == "requests" else f"{v:.3f}")
        lines.append(f"| {label or r.metric} | {txt} | {int(r.n)} |")
    lines += ["", "| domain | answers | mean A | sd A | tokens per step | no-proposal steps |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in domains.itertuples(index=False):
        lines.append(f"| {r.domain} | {r.requests} | {r.accept_mean:.3f} | {r.accept_sd:.3f} | "
                     f"{r.tokens_per_step:.2f} | {r.no_proposal_share:.3f} |")
    return "\n".join(lines)


def plot_regimes(summary: pd.DataFrame, path: str | Path, metric: str = KEY) -> Path:
    """One panel per load: the metric (log axis) of each policy under each acceptance regime, 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthpred.figures import MAX_SERIES, legend_outside, plain_log_axis  # matplotlib only when plotting

    s = summary[summary["metric"] == metric].copy()
    s["series"] = [p if d in ("none", "clairvoyant") else f"{p} / {d}" for p, d in zip(s["policy"], s["predictor"],
                                                                                        strict=True)]
    # the baselines and every LAPS-SD variant first, then the fastest others, at most MAX_SERIES
    first = [n for n in ("fcfs", "mlfq") if n in set(s["series"])]
    laps = [n for n in dict.fromkeys(s.sort_values("value")["series"]) if "laps-sd" in n]
    rest = [n for n in dict.fromkeys(s.sort_values("value")["series"]) if n not in first and n not in laps]
    series = (first + laps + rest)[:MAX_SERIES]
    regimes = [r for r in REGIMES if r in set(s["regime"])]
    loads = sorted(s["load"].unique())
    fig, axes = plt.subplots(1, len(loads), figsize=(4.6 * len(loads) + 2.2, 3.8), squeeze=False,
                             layout="constrained")
    cmap = plt.get_cmap("tab10")
    width = 0.8 / max(len(series), 1)
    for ax, load in zip(axes[0], loads, strict=True):
        sl = s[s["load"] == load]
        for j, name in enumerate(series):
            g = sl[sl["series"] == name].set_index("regime").reindex(regimes)
            x = np.arange(len(regimes)) - 0.4 + width * (j + 0.5)
            err = np.vstack([g["value"] - g["ci_low"], g["ci_high"] - g["value"]]).clip(min=0)
            ax.errorbar(x, 1e3 * g["value"], yerr=1e3 * err, fmt="o", ms=4, capsize=2, color=cmap(j), label=name)
        ax.set_xticks(np.arange(len(regimes)), regimes, rotation=15)
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_title(f"load {load:g}", fontsize=9)
        ax.set_ylabel(f"{metric.replace('_', ' ')} (ms/token)", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    legend_outside(fig, axes[0], title="policy")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
