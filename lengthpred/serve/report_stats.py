"""Printed tables of a serving comparison's statistics: what `vllm bench serve` users read (TTFT, TPOT,
inter-token and end-to-end latency as mean, median and p99), per-token latency with short answers apart,
goodput and starvation per policy, and the paired gains over FCFS (`lengthpred.serve.paired`)."""

from __future__ import annotations

import math

import pandas as pd

from lengthpred.serve.metrics import SLO

KEYS = ["load", "policy", "predictor"]
LATENCY_BLOCKS = [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("jct", "E2E")]
PAIRED_SHOWN = [("per_token_latency_mean", "ptl mean"), ("per_token_latency_p50", "ptl median"),
                ("ttft_mean", "TTFT mean"), ("ttft_p50", "TTFT median"), ("jct_mean", "E2E mean"),
                ("jct_p50", "E2E median"), ("jct_p99", "E2E p99")]
# what an anti-starvation policy is for: the tail, each run's longest request and longest wait for a first token
AGING_SHOWN = [*PAIRED_SHOWN, ("jct_max", "longest E2E"), ("ttft_max", "longest first-token wait")]


def _f(v: float, nd: int) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.{nd}f}"


def _wide(real_runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run (KEYS + seed), one column per metric."""
    return real_runs.set_index([*KEYS, "seed", "metric"])["value"].unstack("metric").reset_index()


def latency_table(real_runs: pd.DataFrame) -> str:
    """Markdown: per (load, policy, predictor), TTFT, TPOT, ITL and end-to-end latency (s) as mean / median /
    p99, each the mean over repeats of that run's statistic."""
    w = _wide(real_runs)
    head = ["load", "policy", "predictor", *(f"{n} mean / median / p99" for _, n in LATENCY_BLOCKS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (load, pol, pred), g in w.groupby(KEYS, sort=True):
        cells = []
        for m, _ in LATENCY_BLOCKS:
            nd = 2 if m in ("ttft", "jct") else 3
            cells.append(" / ".join(_f(g[f"{m}_{s}"].mean() if f"{m}_{s}" in g else math.nan, nd)
                                    for s in ("mean", "p50", "p99")))
        lines.append(f"| {load:g} | {pol} | {pred} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_token_table(real_runs: pd.DataFrame, slo: SLO) -> str:
    """Markdown: per-token latency mean and median, its mean over answers under / from `slo.short_tokens`
    tokens, goodput at the SLO, and starvation: p99 and longest end-to-end latency and the longest wait for a
    first token over every repeat."""
    w = _wide(real_runs)
    k = slo.short_tokens
    head = ["load", "policy", "predictor", "ptl mean (s/tok)", "ptl median", f"ptl mean, answers < {k} tok (n)",
            f"ptl mean, ≥ {k} tok", f"goodput (req/s, TTFT ≤ {slo.ttft_s:g} s, TPOT ≤ {slo.tpot_s:g} s)",
            "E2E p99 (s)", "longest E2E (s)", "longest wait for a first token (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def col(g: pd.DataFrame, m: str, how: str = "mean") -> float:
        return float(getattr(g[m], how)()) if m in g else math.nan

    for (load, pol, pred), g in w.groupby(KEYS, sort=True):
        n_short = col(g, "n_short", "sum")
        cells = [_f(col(g, "per_token_latency_mean"), 3), _f(col(g, "per_token_latency_p50"), 3),
                 f"{_f(col(g, 'per_token_latency_mean_short'), 3)} ({_f(n_short, 0)})",
                 _f(col(g, "per_token_latency_mean_long"), 3), _f(col(g, "goodput"), 3), _f(col(g, "jct_p99"), 1),
                 _f(col(g, "jct_max", "max"), 1), _f(col(g, "ttft_max", "max"), 1)]
        lines.append(f"| {load:g} | {pol} | {pred} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(pg: pd.DataFrame, shown: list[tuple[str, str]] = PAIRED_SHOWN, base: str = "FCFS") -> str:
    """Markdown: the paired gains over FCFS of the headline statistics: the gain (which statistic, FCFS →
    policy), the exact sign-flip p over repeats, the interval or why there is none, and the range of the gain
    with any one request left out."""
    if pg.empty:
        return f"(no policy to pair with {base})"
    head = ["load", "policy", "predictor", "statistic", f"{base} → policy", "gain", "sign-flip p (n)", "interval",
            "one request left out: gain range"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = dict(shown)
    sub = pg[pg["metric"].isin(names)].copy()
    sub["_o"] = sub["metric"].map({m: i for i, (m, _) in enumerate(shown)})
    for r in sub.sort_values(["load", "policy", "predictor", "_o"]).itertuples(index=False):
        nd = 3 if r.metric.startswith("per_token") else 2
        ci = f"[{100 * r.ci_low:+.0f}, {100 * r.ci_high:+.0f}]%" if math.isfinite(r.ci_low) else r.interval
        loo = f"{100 * r.loo_low:+.0f}% … {100 * r.loo_high:+.0f}%" if math.isfinite(r.loo_low) else "—"
        gain = f"{100 * r.gain:+.1f}%" if math.isfinite(r.gain) else "—"
        lines.append(f"| {r.load:g} | {r.policy} | {r.predictor} | {names[r.metric]} | {_f(r.fcfs, nd)} → "
                     f"{_f(r.value, nd)} | {gain} | {_f(r.p_value, 2)} ({r.n}) | {ci} | {loo} |")
    return "\n".join(lines)
