"""Metrics of one simulated run, and confidence intervals over seeds."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from lengthpred.sched.core.simulator import SimResult

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


def bootstrap_mean_intervals(values: np.ndarray, level: float = 0.95, n_boot: int = 2000,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of each row of `values` ([groups, seeds]) and a percentile-bootstrap interval of that mean,
    resampling seeds (columns) with one set of resamples for every row, so intervals of different rows are
    paired. A resampled mean lies between the row's smallest and largest value, so the interval never
    leaves the quantity's range (no negative waits or counts, unlike a t-interval on a skewed quantity).
    NaN entries are left out of their row; a row with fewer than two finite values has a NaN interval."""
    v = np.asarray(values, dtype=float)  # [G, S]
    g, s = v.shape
    mean = np.full(g, math.nan)
    lo, hi = np.full(g, math.nan), np.full(g, math.nan)
    finite = np.isfinite(v)
    n = finite.sum(axis=1)
    with np.errstate(invalid="ignore"):
        mean[n > 0] = np.nanmean(v[n > 0], axis=1)
    q = [(1 - level) / 2, (1 + level) / 2]
    rng = np.random.default_rng(seed)
    full = n == s
    if s >= 2 and full.any():
        # resample weights: w[b, j] = (times seed j is drawn in resample b) / s, so a resampled mean is v @ w
        w = np.stack([np.bincount(r, minlength=s) for r in rng.integers(0, s, (n_boot, s))]) / s  # [B, S]
        rows = np.flatnonzero(full)
        for chunk in np.array_split(rows, max(1, len(rows) // 256)):
            boot = v[chunk] @ w.T  # [chunk, B]
            lo[chunk], hi[chunk] = np.quantile(boot, q, axis=1)
    for r in np.flatnonzero(~full & (n >= 2)):  # rows with NaN seeds: their own resamples
        x = v[r][finite[r]]
        boot = x[rng.integers(0, len(x), (n_boot, len(x)))].mean(axis=1)
        lo[r], hi[r] = np.quantile(boot, q)
    # rounding in v @ w can step past the range by an ulp: clip to it
    vmin, vmax = np.where(finite, v, np.inf).min(axis=1), np.where(finite, v, -np.inf).max(axis=1)
    return mean, np.clip(lo, vmin, vmax), np.clip(hi, vmin, vmax)


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval over seeds; the interval is NaN with fewer than two finite values. It can
    leave the quantity's range with few seeds or a skewed quantity: summaries use
    `bootstrap_mean_intervals`."""
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
