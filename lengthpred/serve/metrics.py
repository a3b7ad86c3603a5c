"""Metrics of one serving run (real or simulated), in the T5 vocabulary plus TPOT, p90s and goodput.

Latencies are over finished requests (s): per-token latency = (finish − arrival) / output tokens, TTFT =
first token − arrival, TPOT = (finish − first token) / (output − 1) (requests of ≥ 2 tokens), JCT =
finish − arrival. Throughput is output tokens of finished requests per second of the run's span (first
arrival to the end); goodput is requests per second that finished within both SLOs (TTFT ≤ `ttft_s`, TPOT
≤ `tpot_s`), and `slo_attainment` their share of the requests the engine accepted. Per-token latency divides
by the answer's length, so its mean is ruled by the shortest answers: answers under `short_tokens` get their
own mean (`per_token_latency_mean_short`, the rest `_long`, counted by `n_short`). Starvation: `ttft_max`
(the longest wait for a first token) and `jct_max`. Inter-token latency (`itl_*`, real runs only: it needs
the engine's step times) pools every gap between two tokens of a request, as `vllm bench serve` reports it;
TPOT is the per-request mean gap. A run whose offered load
the machine cannot sustain is `overload` = 1 and reports no latencies (`blank_latencies`): above capacity a
latency measures how long the run was, not the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

LATENCY_METRICS = ("per_token_latency", "ttft", "tpot", "jct")
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
# metric → True when higher is better (the ↑/↓ of printed tables)
HIGHER_IS_BETTER = {
    **{f"{m}_{s}": False for m in (*LATENCY_METRICS, "itl") for s in ("mean", *QUANTILES)},
    "ttft_max": False, "jct_max": False, "per_token_latency_mean_short": False, "per_token_latency_mean_long": False,
    "n_short": False,
    "throughput": True, "goodput": True, "slo_attainment": True, "n_finished": True, "n_rejected": False,
    "n_unfinished": False, "overload": False, "offered_load": False, "queue_mean": False, "queue_max": False,
    "batch_mean": True, "prediction_wait_mean": False, "prediction_wait_p99": False,
}


@dataclass(frozen=True)
class SLO:
    ttft_s: float = 10.0
    tpot_s: float = 0.5
    short_tokens: int = 16  # answers under this many tokens get their own per-token latency mean


def _q(x: np.ndarray, p: float) -> float:
    return float(np.quantile(x, p)) if len(x) else math.nan


def _spread(name: str, x: np.ndarray) -> dict[str, float]:
    out = {f"{name}_mean": float(x.mean()) if len(x) else math.nan}
    out.update({f"{name}_{k}": _q(x, p) for k, p in QUANTILES.items()})
    return out


def latency_metrics(arrival: np.ndarray, first_token: np.ndarray, finish: np.ndarray, output: np.ndarray,
                    rejected: np.ndarray, *, end: float, slo: SLO) -> dict[str, float]:
    """The metrics above from per-request arrays (NaN where a request never got that far)."""
    arrival, first_token, finish = (np.asarray(a, dtype=float) for a in (arrival, first_token, finish))
    output, rejected = np.asarray(output, dtype=float), np.asarray(rejected, dtype=bool)
    done = np.isfinite(finish) & ~rejected
    jct = (finish - arrival)[done]
    out_d = output[done]
    ttft = (first_token - arrival)[done]
    multi = out_d > 1
    tpot = ((finish - first_token)[done][multi]) / (out_d[multi] - 1)
    span = end - float(np.min(arrival)) if len(arrival) else math.nan
    tpot_all = np.where(out_d > 1, (finish - first_token)[done] / np.maximum(out_d - 1, 1), 0.0)
    good = int(np.sum((ttft <= slo.ttft_s) & (tpot_all <= slo.tpot_s)))
    accepted = int((~rejected).sum())
    m = {}
    ptl = jct / out_d if len(jct) else jct
    m.update(_spread("per_token_latency", ptl))
    m.update(_spread("ttft", ttft))
    m.update(_spread("tpot", tpot))
    m.update(_spread("jct", jct))
    short = out_d < slo.short_tokens
    m["per_token_latency_mean_short"] = float(ptl[short].mean()) if short.any() else math.nan
    m["per_token_latency_mean_long"] = float(ptl[~short].mean()) if (~short).any() else math.nan
    m["n_short"] = float(short.sum())
    m["ttft_max"] = float(ttft.max()) if len(ttft) else math.nan
    m["jct_max"] = float(jct.max()) if len(jct) else math.nan
    m["throughput"] = float(out_d.sum() / span) if span and span > 0 else math.nan
    m["goodput"] = good / span if span and span > 0 else math.nan
    m["slo_attainment"] = good / accepted if accepted else math.nan
    m["n_finished"] = float(done.sum())
    m["n_rejected"] = float(rejected.sum())
    m["n_unfinished"] = float((~done & ~rejected).sum())
    return m


def blank_latencies(m: dict[str, float]) -> dict[str, float]:
    """The same metrics with every latency, throughput and goodput set to NaN (an overloaded run)."""
    gone = {f"{k}_{s}" for k in (*LATENCY_METRICS, "itl") for s in ("mean", *QUANTILES)} | {
        "throughput", "goodput", "slo_attainment", "ttft_max", "jct_max", "per_token_latency_mean_short",
        "per_token_latency_mean_long"}
    return {k: (math.nan if k in gone else v) for k, v in m.items()}


def queue_metrics(steps: pd.DataFrame) -> dict[str, float]:
    """Time-weighted mean and max of requests waiting (engine queue + awaiting a prediction) and mean batch."""
    if steps.empty:
        return {"queue_mean": math.nan, "queue_max": math.nan, "batch_mean": math.nan}
    dur = (steps["t_end"] - steps["t_start"]).to_numpy(float)
    q = (steps["n_waiting"] + steps["n_predicting"]).to_numpy(float)
    w = dur if dur.sum() > 0 else None
    return {"queue_mean": float(np.average(q, weights=w)), "queue_max": float(q.max()),
            "batch_mean": float(np.average(steps["batch"].to_numpy(float), weights=w))}


def itl_metrics(requests: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
    """Inter-token latency of the finished requests: every gap between consecutive tokens of one request,
    pooled over the run (mean, p50, p90, p99). Without preemption a running request makes one token per
    engine step, so its tokens are the ends of the steps from its first token to its finish."""
    ok = (requests["status"] == "finished").to_numpy() & np.isfinite(requests["first_token"].to_numpy(float))
    ends = np.sort(steps["t_end"].to_numpy(float)) if len(steps) else np.zeros(0)
    # a decode that yielded its slot made no token while it waited: its stall is one gap, from its first token
    # to `resumed` (runs stored before `resumed` existed count the stall as step-sized gaps)
    res = requests["resumed"].to_numpy(float)[ok] if "resumed" in requests.columns else np.full(int(ok.sum()), np.nan)
    gaps = []
    for a, b, c in zip(requests["first_token"].to_numpy(float)[ok], requests["finish"].to_numpy(float)[ok], res,
                       strict=True):
        if np.isfinite(c):
            gaps.append(np.array([c - a]))
            a = c
        lo, hi = np.searchsorted(ends, a - 1e-9, "left"), np.searchsorted(ends, b + 1e-9, "right")
        gaps.append(np.diff(ends[lo:hi]))
    return _spread("itl", np.concatenate(gaps) if gaps else np.zeros(0))


def real_run_metrics(requests: pd.DataFrame, steps: pd.DataFrame, end: float, slo: SLO) -> dict[str, float]:
    """Metrics of a replayed run (`lengthpred.serve.replay.RunLog` frames), with its queue and the time
    requests waited for a prediction."""
    r = requests
    m = latency_metrics(r["arrival"], r["first_token"], r["finish"], r["output_tokens"], r["status"] == "rejected",
                        end=end, slo=slo)
    m.update(queue_metrics(steps))
    m.update(itl_metrics(requests, steps))
    wait = (r["ready"] - r["arrival"]).to_numpy(float)
    wait = wait[np.isfinite(wait)]
    m["prediction_wait_mean"] = float(wait.mean()) if len(wait) else math.nan
    m["prediction_wait_p99"] = _q(wait, 0.99)
    return m


def overloaded(offered_rate: float, capacity: float, horizon_hit: bool) -> bool:
    """The machine cannot sustain the load: offered at or above the capacity of the fitted profile, or the
    run had to be cut at its horizon with requests still in flight."""
    return bool(horizon_hit or (capacity > 0 and offered_rate >= capacity * (1 - 1e-9)))
