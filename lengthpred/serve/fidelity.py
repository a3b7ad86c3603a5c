"""Simulator fidelity: each real run replayed by the simulator on the fitted profile, and the errors.

The simulated workload is the real run's own: each request arrives when its prediction was ready (its
arrival, unless it waited for a live prediction), with its prompt tokens, its replayed length and the priority it was given; the
simulator's policy is the one `lengthpred.serve.priority` pairs with the serving policy. Latencies of both
are then measured from the true arrivals, so the time a request waited for its prediction counts in both.
Errors are signed (sim − real) / real and absolute, per run and metric (`FIDELITY_METRICS`).
A live predictor's prefill shares the CPU with the engine: `contention_factor` measures how much slower
the engine's steps ran while a prediction was in flight, and the replay slows the simulator's steps by it
over the run's own prediction intervals (`busy_intervals`).
`step_drift` is how much faster or slower the engine's steps ran in one run than the profile says (measured
over modelled step time on steps without a prediction in flight): the fidelity table flags a run whose drift
exceeds a stated bound, since queueing turns a few percent of step time into a larger TTFT error.
`step_residuals` shows where the step-time model misses: measured against modelled step time per regime
(decode-only steps by batch size, steps that prefill).
`at_speed` is the profile at a run's own measured speed (every time coefficient times its drift): replayed on
it, a run's error is the queueing model's alone, with the machine's speed during the run taken as known (one
number per run, read from its steps), which no calibration made before the run can know.
`speed_windows` is the run's own speed over time (measured / modelled step time in windows of a few seconds,
as `slowdown` intervals): a diagnostic, in sample by one number per window. `tracked_windows` reads the same
windows causally (each at the speed of the window before it): out of sample within the run, what a simulator
tracking the engine's completed steps could know. A run's mean TTFT at load is mostly
the wait for a slot, the gap between an arrival and the finish of a request admitted tens of seconds before, so
1% of step time moves it by 6-10% (JCT: 2%); one drift per run cannot hold TTFT to 5% while the machine's
speed wanders by 5-8% between 10 s windows (`docs/results/serving/serve_cap16_120.md`'s runs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.predictors import ArrayPredictor
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload
from lengthpred.serve.metrics import SLO, latency_metrics
from lengthpred.serve.priority import ServePolicy
from lengthpred.serve.profile_fit import kept_steps, model_step_times, step_durations, step_durations_kept

FIDELITY_METRICS = tuple(f"{m}_{s}" for m in ("per_token_latency", "ttft", "jct", "tpot")
                         for s in ("mean", "p50", "p90", "p99")) + (
    "per_token_latency_mean_short", "per_token_latency_mean_long", "ttft_max", "jct_max", "slo_attainment")


def busy_intervals(requests: pd.DataFrame, factor: float) -> list[tuple[float, float, float]]:
    """The times some request of the run waited for its live prediction (the union of [arrival, ready]),
    as the simulator's `slowdown` intervals with `factor`; none when predictions took no time."""
    a, b = requests["arrival"].to_numpy(float), requests["ready"].to_numpy(float)
    keep = np.isfinite(a) & np.isfinite(b) & (b > a)
    if factor == 1.0 or not keep.any():
        return []
    out: list[list[float]] = []
    for lo, hi in sorted(zip(a[keep], b[keep], strict=True)):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi, float(factor)) for lo, hi in out]


def contention_factor(steps: Sequence[pd.DataFrame], profile: HardwareProfile, skip: int = 2) -> float:
    """How much slower the engine's steps ran while a live prediction shared its cores: (measured / modelled
    step time over steps with a request predicting) / (the same over the others), pooled over `steps`
    (runs' step frames). 1.0 when no step overlapped a prediction."""
    sums = np.zeros((2, 2))  # [busy, quiet] × [measured, modelled]
    for s in steps:
        s = s.iloc[skip:]
        s = s[s["batch"] > 0]
        if s.empty:
            continue
        d, m = step_durations(s), model_step_times(s, profile)
        ok = np.isfinite(d) & (m > 0)
        busy = (s["n_predicting"].to_numpy() > 0) & ok
        quiet = ~busy & ok
        sums += [[d[busy].sum(), m[busy].sum()], [d[quiet].sum(), m[quiet].sum()]]
    if sums[0, 1] <= 0 or sums[1, 1] <= 0 or sums[1, 0] <= 0:
        return 1.0
    return float((sums[0, 0] / sums[0, 1]) / (sums[1, 0] / sums[1, 1]))


def step_drift(steps: pd.DataFrame, profile: HardwareProfile, skip: int = 2) -> float:
    """Measured / modelled time of a run's steps (after `skip` warm-up steps; steps that scheduled nothing or
    overlapped a live prediction left out): 1.03 = the engine ran 3% slower than the profile. NaN when no
    step qualifies."""
    d, m = step_durations_kept(steps, profile, skip)
    return float(d.sum() / m.sum()) if len(d) else math.nan


TIME_FIELDS = ("t_base", "t_seq", "t_ctx", "t_prefill_token", "t_swap_token", "t_draft")  # seconds in a profile


def at_speed(profile: HardwareProfile, drift: float, prefill: float | None = None) -> HardwareProfile:
    """`profile` with every time coefficient scaled by `drift` (`step_drift` of a run: 1.1 = 10% slower), the
    per-token prefill time by `prefill` when given (`regime_speeds`)."""
    for v in (drift, drift if prefill is None else prefill):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"a drift or prefill factor must be a positive number, got {v}")
    scale = {f: getattr(profile, f) * drift for f in TIME_FIELDS}
    if prefill is not None:
        scale["t_prefill_token"] = profile.t_prefill_token * prefill
    name = f"{profile.name}@{drift:.3f}" + ("" if prefill is None else f",prefill@{prefill:.3f}")
    return profile.with_overrides(name=name, **scale)


def regime_speeds(steps: pd.DataFrame, profile: HardwareProfile, skip: int = 2) -> tuple[float, float]:
    """(decode drift, prefill factor) of a run: measured / modelled time of its steps that prefilled nothing, and
    the factor on the profile's per-token prefill time that makes its steps that did prefill match once their
    other terms run at that drift. `step_drift`'s one number comes mostly from decode steps (the many), and the
    prefills need not have slowed with them. NaN for both when no decode step qualifies; the prefill factor is
    the decode drift when no step prefilled (or the closed form is not positive)."""
    d, m = step_durations(steps), model_step_times(steps, profile)
    keep = kept_steps(steps, d, m, skip)
    tokens = steps["prefill_tokens"].to_numpy(float)
    dec, pre = keep & (tokens == 0), keep & (tokens > 0)
    if not dec.any():
        return math.nan, math.nan
    drift = float(d[dec].sum() / m[dec].sum())
    pf = profile.t_prefill_token * tokens[pre]
    if not pre.any() or pf.sum() <= 0:
        return drift, drift
    factor = float((d[pre].sum() - drift * (m[pre] - pf).sum()) / pf.sum())
    return drift, factor if factor > 0 else drift


def _window_sums(steps: pd.DataFrame, profile: HardwareProfile, window_s: float, skip: int
                 ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(measured, modelled) seconds of a run's steps per `window_s` window by step start (after `skip` warm-up
    steps; steps that scheduled nothing left out), and the run's whole ratio; None when no step qualifies."""
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"a speed window must be a positive number of seconds, got {window_s}")
    d, m = step_durations(steps), model_step_times(steps, profile)
    keep = (np.arange(len(steps)) >= skip) & (steps["batch"].to_numpy() > 0) & np.isfinite(d) & (d > 0) & (m > 0)
    if not keep.any():
        return None
    w = np.maximum(np.floor(steps["t_start"].to_numpy(float)[keep] / window_s), 0).astype(np.int64)
    return np.bincount(w, weights=d[keep]), np.bincount(w, weights=m[keep]), float(d[keep].sum() / m[keep].sum())


def _intervals(factors: list[float], window_s: float) -> list[tuple[float, float, float]]:
    out = [(i * window_s, (i + 1) * window_s, f) for i, f in enumerate(factors)]
    out[-1] = (out[-1][0], math.inf, out[-1][2])  # the last lasts to the end of the replay
    return out


def speed_windows(steps: pd.DataFrame, profile: HardwareProfile, window_s: float, skip: int = 2
                  ) -> list[tuple[float, float, float]]:
    """A run's own speed over time, as the simulator's `slowdown` intervals on `profile`: measured / modelled
    time of its steps (after `skip` warm-up steps; steps that scheduled nothing left out) in consecutive windows
    of `window_s` seconds of the run's clock, by step start. Steps that overlapped a live prediction count: their
    slowdown is the machine's speed then, so no contention model goes on top. A window without a step to read
    runs at the run's whole ratio; the last one lasts to the end of the replay. Empty when no step qualifies."""
    sums = _window_sums(steps, profile, window_s, skip)
    if sums is None:
        return []
    dsum, msum, whole = sums
    return _intervals([float(dsum[i] / msum[i]) if msum[i] > 0 else whole for i in range(len(dsum))], window_s)


def tracked_windows(steps: pd.DataFrame, profile: HardwareProfile, window_s: float, skip: int = 2,
                    start: float = 1.0) -> list[tuple[float, float, float]]:
    """`speed_windows` read causally: each window of `window_s` s runs at the speed measured over the latest
    earlier window that had a step to read (the first, and any before such a window, at `start`: the profile's
    own speed, or e.g. the previous run's drift). No step of a window sets that window's speed, so the replay is
    out of sample within the run: what a simulator beside the engine, tracking its completed steps, could know.
    Empty when no step qualifies."""
    if not (math.isfinite(start) and start > 0):
        raise ValueError(f"a starting speed must be a positive number, got {start}")
    sums = _window_sums(steps, profile, window_s, skip)
    if sums is None:
        return []
    dsum, msum, _ = sums
    factors, last = [], float(start)
    for i in range(len(dsum)):
        factors.append(last)
        if msum[i] > 0:
            last = float(dsum[i] / msum[i])
    return _intervals(factors, window_s)


def simulate_run(requests: pd.DataFrame, policy: ServePolicy, profile: HardwareProfile,
                 sim: dict[str, Any] | None = None, contention: float = 1.0,
                 slowdown: Sequence[tuple[float, float, float]] | None = None) -> pd.DataFrame:
    """The run's requests with simulated `first_admit`, `first_token` and `finish` (NaN for requests the engine
    rejected or never admitted), and `split` / `resumed` (a decode that yielded its slot after its prefill phase,
    and its token after the stall; `prefill_first` runs only). `contention`: the factor by which steps slow
    while a live prediction runs (`contention_factor`), applied over the run's own prediction intervals.
    `slowdown`: the simulator's intervals instead (`speed_windows`; `contention` is then not applied)."""
    r = requests.reset_index(drop=True)
    ok = (r["status"] != "rejected").to_numpy() & np.isfinite(r["added"].to_numpy(float))
    out = r.assign(first_admit=math.nan, first_token=math.nan, finish=math.nan)
    if not ok.any():
        return out
    idx = np.flatnonzero(ok)
    # the engine admits at step boundaries; the simulator does the same from the time the request could
    # first have entered (ready), not from when the loop added it (just after a boundary: one step late).
    # A prediction read from the engine's own prefill is made inside the simulated engine too (prefill_first):
    # those requests enter at arrival
    staged = bool(r["prefill_first"].any()) if "prefill_first" in r.columns else False
    enter = r["arrival" if staged else "ready"].to_numpy(float)
    idx = idx[np.argsort(enter[idx], kind="stable")]
    wl = Workload(enter[idx], r["prompt_tokens"].to_numpy()[idx], np.maximum(r["target_tokens"].to_numpy()[idx], 1))
    pol = make_policy(policy.sim_make, **policy.sim_kwargs())
    pred = ArrayPredictor(r["priority"].to_numpy(float)[idx], name="priority") if pol.needs_prediction else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overload is judged on the real run (lengthpred.serve.metrics)
        res = simulate(wl, profile, pol, pred, **{"max_preemptions": None, "horizon": math.inf, **(sim or {})},
                       slowdown=list(slowdown) if slowdown is not None else [] if staged else busy_intervals(r, contention),
                       prefill_first=staged)
    fa, ft, fin, rs = (np.full(len(r), math.nan) for _ in range(4))
    fa[idx], ft[idx], fin[idx], rs[idx] = res.first_admit, res.first_token, res.finish, res.resumed
    return out.assign(first_admit=fa, first_token=ft, finish=fin, resumed=rs, split=np.isfinite(rs),
                      output_tokens=np.where(np.isfinite(fin), out["target_tokens"], 0))


def sim_metrics(sim_requests: pd.DataFrame, slo: SLO) -> dict[str, float]:
    r = sim_requests
    fin = r["finish"].to_numpy(float)
    end = float(np.nanmax(fin)) if np.isfinite(fin).any() else float(r["arrival"].max())
    return latency_metrics(r["arrival"], r["first_token"], fin, r["output_tokens"], r["status"] == "rejected",
                           end=end, slo=slo)


def errors(real: dict[str, float], sim: dict[str, float], metrics: tuple[str, ...] = FIDELITY_METRICS) -> list[dict]:
    rows = []
    for m in metrics:
        a, b = real.get(m, math.nan), sim.get(m, math.nan)
        signed = (b - a) / a if a and math.isfinite(a) and math.isfinite(b) else math.nan
        rows.append({"metric": m, "real": a, "sim": b, "signed_err": signed, "abs_err": abs(signed)})
    return rows


def step_residuals(steps: pd.DataFrame, profile: HardwareProfile, batch_bins: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
                   ) -> pd.DataFrame:
    """Measured vs modelled step time per regime: `decode` steps by batch-size bin, `prefill` steps (any
    prompt tokens) by bin; mean seconds of each and the relative error of the model."""
    s = steps[steps["batch"] > 0]
    if s.empty:
        return pd.DataFrame(columns=["regime", "batch_bin", "n", "measured_s", "model_s", "rel_err"])
    d = step_durations(s)
    model = model_step_times(s, profile)
    regime = np.where(s["prefill_tokens"].to_numpy() > 0, "prefill", "decode")
    edges = np.array(batch_bins)
    b = s["batch"].to_numpy()
    bin_lo = edges[np.clip(np.searchsorted(edges, b, side="right") - 1, 0, len(edges) - 1)]
    df = pd.DataFrame({"regime": regime, "batch_bin": bin_lo, "measured_s": d, "model_s": model})
    df = df[np.isfinite(df["measured_s"])]
    g = df.groupby(["regime", "batch_bin"]).agg(n=("measured_s", "size"), measured_s=("measured_s", "mean"),
                                                model_s=("model_s", "mean")).reset_index()
    g["rel_err"] = g["model_s"] / g["measured_s"] - 1
    return g
