"""How steady is the speed a serve run is forecast from: the bare machine's, the engine's, the stored runs'.

The simulator forecasts a run from a calibration made before it, so a run can only match to within a few
percent if the machine's speed holds that well from the calibration to the run and through the run. This
module summarises a fixed workload's step times, timed back to back with no engine
(`benchmarks/bench_machine_steadiness.py`): its speed in short windows (the
tracked replay's 2 s) and in run-length windows (a serve run's few minutes), each relative to the first
run-length window (the calibration's place) and to the window before (the previous run's place). The
engine's side (`benchmarks/bench_engine_steadiness.py`): the same burst of requests served again and again,
so the work is the same and only the speed can change (`repeated_bursts`); and the stored serve runs' drift
against one profile refitted on all of them (`drift_sources`, `scripts/serve_drift_sources.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from lengthpred.metrics import spearman_or_nan
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.engine import EngineLimits
from lengthpred.serve.fidelity import step_drift
from lengthpred.serve.profile_fit import fit_profile, kept_steps, model_step_times, step_durations

HIDDEN, MLP, LAYERS, VOCAB = 576, 1536, 30, 49152  # SmolLM2-135M's shapes
WORK = ("batch", "prefill_tokens", "ctx_tokens")  # what two bursts must have scheduled alike, step by step


def decode_like_step(seed: int = 0) -> Callable[[], None]:
    """A fixed step that reads fp32 weights of about SmolLM2-135M's size once (its 30 layers' projections, with
    K and V at full width, and the 49,152-token head: 148M weights, 591 MB, 10% more than the model's) with a
    batch of 4 rows, like a decode step: memory-bound, no engine. Threads are torch's (`torch.set_num_threads`)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    shapes = [(HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 2 * MLP), (MLP, HIDDEN)] * LAYERS + [(HIDDEN, VOCAB)]
    weights = [torch.randn(s, generator=g) * 0.02 for s in shapes]
    x, xm = torch.randn(4, HIDDEN, generator=g), torch.randn(4, MLP, generator=g)

    def step() -> None:
        for w in weights:
            (xm if w.shape[0] == MLP else x) @ w

    return step


def changes(x: np.ndarray) -> np.ndarray:
    """|each value / the one before − 1|: how far a speed moved from one window, burst or run to the next."""
    x = np.asarray(x, float)
    return np.abs(x[1:] / x[:-1] - 1)


def window_means(t: np.ndarray, dt: np.ndarray, width_s: float) -> pd.DataFrame:
    """Steps that started at `t` (s) and took `dt` (s), grouped into consecutive windows of `width_s` from the
    first step: one row per full window with `start` (s), `steps` and `mean_ms` (mean step time). A last,
    partial window is dropped, so every window covers the same span."""
    t, dt = np.asarray(t, float), np.asarray(dt, float)
    if len(t) != len(dt) or not len(t):
        raise ValueError(f"need as many step times as start times, and at least one: got {len(t)} and {len(dt)}")
    if not (np.isfinite(t).all() and np.isfinite(dt).all() and (dt >= 0).all() and (np.diff(t) >= 0).all()):
        raise ValueError("step start times must be finite and in order, and step times finite and >= 0")
    if width_s <= 0:
        raise ValueError(f"width_s must be positive, got {width_s}")
    w = np.floor((t - t[0]) / width_s).astype(int)
    full = int(np.floor((t[-1] + dt[-1] - t[0]) / width_s))
    df = pd.DataFrame({"w": w, "dt": dt})[w < full]
    g = df.groupby("w")["dt"]
    return pd.DataFrame({"start": g.size().index * width_s, "steps": g.size().to_numpy(),
                         "mean_ms": 1000 * g.mean().to_numpy()}).reset_index(drop=True)


def steadiness(t: np.ndarray, dt: np.ndarray, short_s: float = 2.0, run_s: float = 150.0,
               bound: float = 0.05) -> dict:
    """The machine's speed drift at the serve tables' two scales. Run-length windows: `drift_first` (each
    later window's mean step time over the first's, min and max; the calibration-profile replay's case),
    `drift_previous` (|each window / the one before − 1|: median, max and the share above `bound`; the
    previous-run replay's case). Short windows: `within_run` (|short window / its run window − 1|: median
    and p95 over all short windows; `within_run_sd`: their standard deviation inside each run window, the median
    over run windows; the part no single number per run can follow). Needs two run windows."""
    runs = window_means(t, dt, run_s)
    if len(runs) < 2:
        raise ValueError(f"need at least two {run_s:g} s windows of steps to compare, got {len(runs)}")
    gaps = np.flatnonzero(np.diff(runs["start"].to_numpy()) > run_s * 1.5)
    if len(gaps):
        raise ValueError(f"no step in the {run_s:g} s window after {runs['start'].iloc[gaps[0]]:g} s (a suspended "
                         "process?): the windows around it cannot be compared")
    m = runs["mean_ms"].to_numpy()
    first = m[1:] / m[0]
    prev = changes(m)
    short = window_means(t, dt, short_s)
    run_of = np.floor(short["start"].to_numpy() / run_s).astype(int)
    keep = run_of < len(runs)
    ratio = short["mean_ms"].to_numpy()[keep] / m[run_of[keep]]
    within = np.abs(ratio - 1)
    sd = pd.Series(ratio).groupby(run_of[keep]).std().median()
    return {"steps": len(t), "step_ms": float(1000 * np.median(dt)), "run_windows": len(runs),
            "drift_first_min": float(first.min()), "drift_first_max": float(first.max()),
            "drift_previous_median": float(np.median(prev)), "drift_previous_max": float(prev.max()),
            "drift_previous_over": float(np.mean(prev > bound)),
            "within_run_median": float(np.median(within)), "within_run_p95": float(np.quantile(within, 0.95)),
            "within_run_sd": float(sd)}


def steal_share(stat: pd.DataFrame, run_s: float = 150.0) -> np.ndarray:
    """From cumulative /proc/stat samples (`t`, `steal`, `total` jiffies), the share of CPU time the
    hypervisor took from this machine in each run-length window (NaN where a window holds no two samples)."""
    w = np.floor((stat["t"].to_numpy(float) - stat["t"].iloc[0]) / run_s).astype(int)
    out = []
    for k in range(int(w.max()) + 1):
        s = stat[w == k]
        total = s["total"].iloc[-1] - s["total"].iloc[0] if len(s) > 1 else 0
        out.append((s["steal"].iloc[-1] - s["steal"].iloc[0]) / total if total > 0 else np.nan)
    return np.array(out, float)


def repeated_bursts(steps: pd.DataFrame, profile: HardwareProfile, window_s: float = 2.0, skip: int = 2
                    ) -> pd.DataFrame:
    """The same burst of requests served again and again on one engine (`steps`: `RunLog.steps` frames with a
    `burst` column, in the order they ran). Per burst: `drift` (measured / modelled time of its kept steps on
    `profile`, `profile_fit.kept_steps`); `vs_first` (its step time over the first burst's, step by step: NaN
    unless it scheduled the same `WORK` at every step); and how far its `window_s` windows wander, as the
    standard deviation of each window's ratio over the burst's whole one: `wander_profile` against the profile
    (what the tracked replay follows: speed and the step model's misfit together) and `wander_first` against
    the first burst's same steps (speed alone, since the work is the same)."""
    labels, groups = [], []
    for label, g in steps.groupby("burst", sort=False):
        labels.append(label)
        groups.append(g.reset_index(drop=True))
    if not groups:
        raise ValueError("no bursts: the steps need a `burst` column and at least one step")
    ref = groups[0]
    dref = step_durations(ref)
    rows = []
    for label, b in zip(labels, groups, strict=True):
        d, m = step_durations(b), model_step_times(b, profile)
        keep = kept_steps(b, d, m, skip)
        same = len(b) == len(ref) and all((b[c].to_numpy() == ref[c].to_numpy()).all() for c in WORK)
        t = b["t_start"].to_numpy(float)
        w = np.floor((t - t[0]) / window_s).astype(int)
        df = pd.DataFrame({"w": w, "d": d, "m": m, "r": dref if same else np.nan})[keep]
        win = df.groupby("w").sum().iloc[:-1]  # the last window is partial
        drift = df["d"].sum() / df["m"].sum()
        first = df["d"].sum() / df["r"].sum() if same else np.nan
        rows.append({"burst": label, "steps": len(b), "drift": float(drift), "vs_first": float(first),
                     "wander_profile": float((win["d"] / win["m"] / drift).std()),
                     "wander_first": float((win["d"] / win["r"] / first).std()) if same else np.nan})
    return pd.DataFrame(rows)


def _limits(profile: HardwareProfile) -> EngineLimits:
    """`profile`'s batch limits, for a refit that copies them back (the length limit is not read)."""
    return EngineLimits(profile.max_batch, profile.token_budget, profile.kv_blocks, profile.block_size, 1 << 30)


def burst_table(steps: pd.DataFrame, kernel: pd.DataFrame, limits: EngineLimits, window_s: float = 2.0,
                skip: int = 2) -> pd.DataFrame:
    """`repeated_bursts` on a robust profile fitted on the first burst, beside the fixed step timed before each
    burst (`kernel`: `burst`, `t` (s since the start), `kernel_ms`) and its time over the first one's."""
    first = steps[steps["burst"] == steps["burst"].iloc[0]].drop(columns="burst").reset_index(drop=True)
    prof = fit_profile([first], limits, robust=True, skip=skip).profile
    table = repeated_bursts(steps, prof, window_s, skip).merge(kernel, on="burst")
    table["kernel_vs_first"] = table["kernel_ms"] / table["kernel_ms"].iloc[0]
    return table


def drift_sources(runs: Sequence[pd.DataFrame], profile: HardwareProfile, skip: int = 2) -> dict:
    """Is a serve folder's run-to-run drift the machine's speed or the profile's coefficients? `runs`: each run's
    steps, in the order they ran; `profile`: its calibration. `sd_calibration`: the standard deviation over runs
    of each run's drift on the calibration profile (`fidelity.step_drift`); `sd_pooled`: the same on one robust
    profile fitted on every run's steps (in sample: what the best single profile would leave; if the spread
    were the coefficients, it would shrink); `changed_previous`: the median |drift / the previous run's − 1|;
    `rho_batch`: Spearman of drift with the run's mean batch over its steps (a description, not a test)."""
    if len(runs) < 3:
        raise ValueError(f"need at least 3 runs to compare their drift, got {len(runs)}")
    pooled = fit_profile(list(runs), _limits(profile), robust=True, skip=skip).profile
    cal = np.array([step_drift(s, profile, skip) for s in runs])
    pool = np.array([step_drift(s, pooled, skip) for s in runs])
    batch = np.array([s["batch"].to_numpy()[skip:][s["batch"].to_numpy()[skip:] > 0].mean() for s in runs])
    return {"runs": len(runs), "drift_min": float(cal.min()), "drift_max": float(cal.max()),
            "sd_calibration": float(cal.std(ddof=1)), "sd_pooled": float(pool.std(ddof=1)),
            "changed_previous": float(np.median(changes(cal))),
            "rho_batch": spearman_or_nan(batch, cal)}
