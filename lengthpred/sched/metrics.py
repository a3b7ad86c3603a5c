"""Metrics of one simulated run, and confidence intervals over seeds."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from lengthpred.sched.simulator import SimResult

# metric name → True when higher is better (the ↑/↓ of printed tables)
HIGHER_IS_BETTER = {
    "per_token_latency_mean": False, "per_token_latency_p50": False, "per_token_latency_p99": False,
    "jct_mean": False, "jct_p99": False, "ttft_mean": False, "ttft_p99": False,
    "throughput": True, "preemptions": False, "preempt_overhead": False, "recompute_tokens": False,
    "max_wait": False,
    "n_finished": True, "n_rejected": False, "n_unfinished": False,
}


def summarize(res: SimResult, warmup: float = 0.0) -> dict[str, float]:
    """Per-token latency (latency / output tokens), JCT, TTFT (s) over finished requests, skipping the
    first `warmup` fraction by arrival; throughput over the whole run; max wait before first admission
    (starvation, counting requests still waiting at the end)."""
    n = len(res.arrival)
    keep = np.arange(n) >= int(warmup * n)
    done = res.finished & keep
    jct = (res.finish - res.arrival)[done]
    ptl = jct / res.output[done]
    ttft = (res.first_token - res.arrival)[done]
    waited = np.where(np.isfinite(res.first_admit), res.first_admit, res.end_time) - res.arrival
    waited = waited[keep & ~res.rejected]
    span = res.end_time - float(res.arrival[0]) if n else 0.0

    def q(x: np.ndarray, p: float) -> float:
        return float(np.quantile(x, p)) if len(x) else math.nan

    return {
        "per_token_latency_mean": float(ptl.mean()) if len(ptl) else math.nan,
        "per_token_latency_p50": q(ptl, 0.5),
        "per_token_latency_p99": q(ptl, 0.99),
        "jct_mean": float(jct.mean()) if len(jct) else math.nan,
        "jct_p99": q(jct, 0.99),
        "ttft_mean": float(ttft.mean()) if len(ttft) else math.nan,
        "ttft_p99": q(ttft, 0.99),
        "throughput": float(res.output[res.finished].sum() / span) if span > 0 else math.nan,
        "preemptions": float(res.n_preempt.sum()),
        # share of the run's span the server spent re-prefilling or swapping preempted requests
        "preempt_overhead": float(res.preempt_seconds / span) if span > 0 else math.nan,
        "recompute_tokens": float(res.recompute_tokens),
        "max_wait": float(waited.max()) if len(waited) else math.nan,
        "n_finished": float(res.finished.sum()),
        "n_rejected": float(res.rejected.sum()),
        "n_unfinished": float((~res.finished & ~res.rejected).sum()),
    }


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval over seeds; the interval is NaN with fewer than two finite values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if len(v) < 2:
        return m, math.nan, math.nan
    h = float(stats.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return m, m - h, m + h


def latency_cdf(res: SimResult, n_points: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """Quantile levels and per-token latency quantiles of finished requests (a CDF's points)."""
    done = res.finished
    ptl = ((res.finish - res.arrival) / res.output)[done]
    qs = np.linspace(0, 1, n_points)
    return qs, (np.quantile(ptl, qs) if len(ptl) else np.full(n_points, np.nan))
