"""Paired gains over FCFS that say how sure they are: an exact sign-flip test over repeats, an interval only
when there are enough repeats, and how far one request moves each gain.

Every policy of one (repeat, load) serves the same requests and arrivals, so a repeat is the paired unit.
Per (load, policy, predictor) and headline metric (`HEADLINES`, each a per-run statistic: a mean, median or
p99 over that run's requests):
- `gain` = 1 − mean over repeats(policy) / mean over repeats(FCFS) (the same as `lengthpred.sched.sweep.summary.gains`);
  `diff_s` = the mean paired difference FCFS − policy in seconds (an absolute gain, not a ratio).
- `p_value`: exact two-sided sign-flip permutation test of the paired differences (`scipy.stats.permutation_test`,
  `permutation_type="samples"`: each repeat's difference keeps or flips its sign, all 2^n ways). With n repeats
  its smallest possible value is 2 / 2^n (0.25 with 3): it says how much so few repeats can show.
- `ci_low`, `ci_high`: a paired percentile bootstrap of the gain over repeats (`scipy.stats.bootstrap`), only
  with at least `MIN_REPEATS`; with fewer the `interval` column says "<n> repeats: too few for an interval"
  (a bootstrap over 3 paired differences excludes 0 whenever all three share a sign: probability 1/4 with no
  effect at all).
- `loo_low`, `loo_high`: the range of the gain when each request in turn (one request of one repeat, left out
  of every policy's run of that repeat and load, so the comparison stays paired) is dropped; `loo_request`:
  the request whose removal moves the gain most. Per-token latency divides by the answer's length, so one
  short answer that waited can carry a whole run's mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from lengthpred.metrics import sign_flip_p  # noqa: F401  (re-exported: the exact paired test every table counts by)
from lengthpred.serve.metrics import SLO, latency_metrics

HEADLINES = ("per_token_latency_mean", "per_token_latency_p50", "ttft_mean", "ttft_p50", "jct_mean", "jct_p50",
             "jct_p99", "tpot_mean", "tpot_p50")
MIN_REPEATS = 10  # fewer: no interval, the exact test only
RUN_KEYS = ["policy", "predictor", "load", "seed"]
COLUMNS = ["load", "policy", "predictor", "metric", "fcfs", "value", "gain", "diff_s", "n", "p_value", "ci_low",
           "ci_high", "interval", "loo_low", "loo_high", "loo_request"]


def gain_interval(f: np.ndarray, x: np.ndarray, level: float = 0.95, n_boot: int = 2000) -> tuple[float, float, str]:
    """(low, high, note): the paired percentile bootstrap of 1 − mean(x)/mean(f) over repeats, or NaNs and
    "<n> repeats: too few for an interval" below `MIN_REPEATS`."""
    ok = np.isfinite(f) & np.isfinite(x)
    f, x = f[ok], x[ok]
    if len(f) < MIN_REPEATS:
        return math.nan, math.nan, f"{len(f)} repeats: too few for an interval"
    res = stats.bootstrap((f, x), lambda a, b, axis: 1 - np.mean(b, axis=axis) / np.mean(a, axis=axis),
                          paired=True, vectorized=True, confidence_level=level, n_resamples=n_boot,
                          method="percentile", random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high), f"{100 * level:g}% paired bootstrap"


def pooled_gain(f: np.ndarray, x: np.ndarray) -> float:
    """1 − mean(x) / mean(f) over the repeats where both runs have the statistic (an overloaded run is blank:
    its pair leaves both means, as it leaves the test and the interval)."""
    ok = np.isfinite(f) & np.isfinite(x)
    mf = float(np.mean(f[ok])) if ok.any() else math.nan
    return 1 - float(np.mean(x[ok])) / mf if mf else math.nan


def _request_index(requests: pd.DataFrame) -> np.ndarray:
    """A request's position in its run (the same request in every policy's run of a repeat and load)."""
    tail = requests["rid"].astype(str).str.rsplit("-", n=1).str[-1]
    if tail.str.fullmatch(r"\d+").all():
        return tail.astype(int).to_numpy()
    return requests.groupby(RUN_KEYS, sort=False)["arrival"].rank(method="first").astype(int).to_numpy() - 1


def _run_stats(r: pd.DataFrame, slo: SLO) -> dict[str, float]:
    return latency_metrics(r["arrival"], r["first_token"], r["finish"], r["output_tokens"], r["status"] == "rejected",
                           end=float(np.nanmax(r["finish"])) if r["finish"].notna().any() else 0.0, slo=slo)


def _loo(requests: pd.DataFrame, load: float, pol: tuple[str, str], fcfs: tuple[str, str], seeds: Sequence[int],
         base: dict[tuple, dict[str, float]], metrics: Sequence[str], slo: SLO) -> dict[str, list[tuple[float, str]]]:
    """Per metric: the gain with each request left out in turn, and which request that was."""
    out: dict[str, list[tuple[float, str]]] = {m: [] for m in metrics}
    rq = requests[requests["load"] == load]
    for s in seeds:
        runs = {p: rq[(rq["policy"] == p[0]) & (rq["predictor"] == p[1]) & (rq["seed"] == s)] for p in (pol, fcfs)}
        if any(r.empty for r in runs.values()):
            continue
        for k in sorted(set(runs[fcfs]["_k"])):
            left = {p: _run_stats(r[r["_k"] != k], slo) for p, r in runs.items()}
            for m in metrics:
                if not all(math.isfinite(base[(*p, s)].get(m, math.nan)) for p in (pol, fcfs)):
                    continue  # a blanked (overloaded) run stays out, as it does of the point gain
                f = np.array([left[fcfs][m] if t == s else base[(*fcfs, t)].get(m, math.nan) for t in seeds])
                x = np.array([left[pol][m] if t == s else base[(*pol, t)].get(m, math.nan) for t in seeds])
                out[m].append((pooled_gain(f, x), f"seed {s} request {k}"))
    return out


def _loo_range(v: list[tuple[float, str]], point: float) -> tuple[float, float, str]:
    """(lowest, highest gain, the request whose removal moves it furthest from `point`)."""
    g = np.array([a for a, _ in v], float)
    if not len(g) or not np.isfinite(g).any() or not math.isfinite(point):
        return math.nan, math.nan, ""
    far = int(np.nanargmax(np.abs(g - point)))
    return float(np.nanmin(g)), float(np.nanmax(g)), v[far][1]


def paired_gains(real_runs: pd.DataFrame, requests: pd.DataFrame, slo: SLO, metrics: Sequence[str] = HEADLINES,
                 level: float = 0.95, loo: bool = True, baseline: str = "fcfs") -> pd.DataFrame:
    """The table described above. `real_runs`: tidy rows of the real runs (RUN_KEYS, metric, value);
    `requests`: their per-request rows (`GridResult.requests`). Overloaded runs (NaN latencies) give NaNs.
    `baseline`: the policy every other is compared with (its column keeps the name `fcfs`), e.g.
    `fcfs-prefill-first` to see what the predictions buy beyond serving prefills first."""
    wide = real_runs[real_runs["metric"].isin(metrics)].set_index([*RUN_KEYS, "metric"])["value"].unstack("metric")
    base = {k: row.to_dict() for k, row in wide.iterrows()}
    rq = requests.assign(_k=_request_index(requests)) if loo and len(requests) else requests
    rows = []
    for load in sorted({k[2] for k in base}):
        pols = sorted({(k[0], k[1]) for k in base if k[2] == load})
        fcfs = next((p for p in pols if p[0] == baseline), None)
        if fcfs is None:
            continue
        seeds = sorted({k[3] for k in base if k[2] == load and (k[0], k[1]) == fcfs})
        for pol in pols:
            if pol == fcfs:
                continue
            pseeds = [s for s in seeds if (*pol, load, s) in base]
            lo_hi = _loo(rq, load, pol, fcfs, pseeds, {(k[0], k[1], k[3]): v for k, v in base.items() if k[2] == load},
                         metrics, slo) if loo and len(rq) else {}
            for m in metrics:
                f = np.array([base[(*fcfs, load, s)].get(m, math.nan) for s in pseeds], float)
                x = np.array([base[(*pol, load, s)].get(m, math.nan) for s in pseeds], float)
                ci_lo, ci_hi, note = gain_interval(f, x, level)
                gain = pooled_gain(f, x)
                lo, hi, who = _loo_range(lo_hi.get(m, []), gain)
                ok = np.isfinite(f) & np.isfinite(x)  # the paired repeats: both means over the same ones
                mf, mx = (float(np.mean(f[ok])), float(np.mean(x[ok]))) if ok.any() else (math.nan, math.nan)
                rows.append((float(load), pol[0], pol[1], m, mf, mx, gain,
                             float(np.nanmean(f - x)), int(ok.sum()),
                             sign_flip_p(f - x), ci_lo, ci_hi, note, lo, hi, who))
    return pd.DataFrame(rows, columns=COLUMNS)
