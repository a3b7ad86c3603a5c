"""A hardware profile fitted from the engine's own step times, for the simulator to replay the runs on.

The simulator's cost model (`lengthpred.sched.core.hardware`): a step over B requests holding C context tokens
that prefills P prompt tokens takes t_base + t_seq·B + t_ctx·C + t_prefill_token·P. Each recorded step
gives (B, C, P) and its duration; non-negative least squares gives the four coefficients. A step's duration
is the loop's cycle (end of the previous step to end of this one) when the engine ran back to back, so the
loop's own per-step work (adding requests, reading outputs) is charged to the server as it was in the run;
after an idle wait it is the step alone. Batch limits and KV memory come from the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from lengthpred.errors import DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.engine import EngineLimits

COEFFICIENTS = ("t_base", "t_seq", "t_ctx", "t_prefill_token")
HUBER_MADS = 10.0  # the robust fit's threshold, in robust standard deviations of the NNLS residuals


@dataclass
class ProfileFit:
    profile: HardwareProfile
    n_steps: int
    r2: float
    rel_rmse: float  # RMSE of step time / mean step time
    mean_step_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile.to_dict(), "n_steps": self.n_steps, "r2": self.r2,
                "rel_rmse": self.rel_rmse, "mean_step_s": self.mean_step_s}


def step_durations(steps: pd.DataFrame) -> np.ndarray:
    """Seconds each step cost the server: the cycle since the previous step's end when back to back, else the
    step's own time."""
    start, end = steps["t_start"].to_numpy(float), steps["t_end"].to_numpy(float)
    idle = steps["idle_before"].to_numpy(bool)
    prev_end = np.r_[np.nan, end[:-1]]
    return np.where(idle | ~np.isfinite(prev_end), end - start, end - prev_end)


def kept_steps(steps: pd.DataFrame, d: np.ndarray, m: np.ndarray, skip: int) -> np.ndarray:
    """Which steps a drift or a fit reads (`d`, `m`: their measured and modelled seconds): after `skip` warm-up
    steps, leaving out steps that scheduled nothing or overlapped a live prediction."""
    keep = (np.arange(len(steps)) >= skip) & (steps["batch"].to_numpy() > 0) & np.isfinite(d) & (m > 0)
    if "n_predicting" in steps.columns:
        keep &= steps["n_predicting"].to_numpy() == 0
    return keep


def step_durations_kept(steps: pd.DataFrame, profile: HardwareProfile, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """(measured, modelled) seconds of a run's `kept_steps`. Durations are taken on the whole run first: a step
    after a left-out one is charged its own cycle, not both."""
    d, m = step_durations(steps), model_step_times(steps, profile)
    keep = kept_steps(steps, d, m, skip)
    return d[keep], m[keep]


def design(steps: pd.DataFrame) -> np.ndarray:
    """[steps, 4]: 1, B, C, P, in the order of COEFFICIENTS."""
    return np.column_stack([np.ones(len(steps)), steps["batch"], steps["ctx_tokens"],
                            steps["prefill_tokens"]]).astype(float)


def model_step_times(steps: pd.DataFrame, profile: HardwareProfile) -> np.ndarray:
    """The profile's time for each recorded step (its batch, context and prefilled tokens)."""
    return design(steps) @ np.array([getattr(profile, c) for c in COEFFICIENTS])


def fit_profile(runs: Sequence[pd.DataFrame], limits: EngineLimits, *, name: str = "fitted",
                skip: int = 2, source: str = "", robust: bool = False) -> ProfileFit:
    """Fit on the steps of `runs` (each a `RunLog.steps` frame), leaving out each run's first `skip` steps
    (warm-up), steps that scheduled nothing and steps that overlapped a live prediction (their slowdown is
    `lengthpred.serve.fidelity.contention_factor`'s). `robust`: a Huber fit (`scipy.optimize.least_squares`,
    loss="huber", coefficients >= 0, from the NNLS solution), quadratic up to `HUBER_MADS` robust standard
    deviations (1.4826 × MAD) of the NNLS residuals and linear beyond, so a stalled step cannot drag the
    coefficients: on the committed calibration burst one added 5 s stall moves NNLS's t_seq by +163% (and
    zeroes t_ctx), the Huber fit's coefficients by under 5%. The threshold is wide because on a quiet machine
    the prefill steps miss the linear model by about 10 MADs, a real cost that a tighter threshold would
    discount (at 1 MAD the replay of the committed runs missed per-token latency by 9.7% on average instead
    of 6.4%). (sklearn's HuberRegressor and TheilSen cannot keep the coefficients non-negative, which the
    simulator needs.)"""
    parts = []
    for s in runs:
        s = s.iloc[skip:] if len(s) > skip else s.iloc[0:0]
        d = step_durations(s) if len(s) else np.zeros(0)
        keep = (s["batch"].to_numpy() > 0) & np.isfinite(d) & (d > 0)
        if "n_predicting" in s.columns:  # a live prediction shared the CPU: contention, not the engine's cost
            keep &= s["n_predicting"].to_numpy() == 0
        parts.append((design(s)[keep], d[keep]))
    X = np.vstack([p[0] for p in parts]) if parts else np.zeros((0, 4))
    y = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    if len(y) < 8:
        raise DataError(f"only {len(y)} usable engine steps to fit a hardware profile from; need >= 8")
    # scale columns so NNLS is well conditioned (B ~ 10, C ~ 1e3, P ~ 1e2)
    scale = np.maximum(np.abs(X).max(axis=0), 1e-12)
    coef, _ = nnls(X / scale, y)
    if robust:
        coef = _huber(X / scale, y, coef)
    coef = coef / scale
    # a coefficient that adds under a millionth of the mean step is noise from the solver (e.g. t_ctx 1e-18):
    # zero it, since the simulator's closed-form step count is ill-conditioned for a t_ctx that small
    coef[coef * np.abs(X).mean(axis=0) < 1e-6 * y.mean()] = 0.0
    if coef[0] + coef[1] <= 0:  # a profile needs a decode step to cost time
        coef[0] = max(float(np.min(y)), 1e-6)
    resid = y - X @ coef
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else math.nan
    prof = HardwareProfile(
        name=name, **dict(zip(COEFFICIENTS, (float(c) for c in coef), strict=True)), t_swap_token=0.0,
        max_batch=limits.max_batch, token_budget=limits.token_budget, kv_blocks=limits.kv_blocks,
        block_size=limits.block_size, source=source or f"fitted on {len(y)} engine steps",
    )
    return ProfileFit(prof, len(y), r2, float(np.sqrt(np.mean(resid**2)) / y.mean()), float(y.mean()))


def _huber(X: np.ndarray, y: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Non-negative Huber regression from `start`; `start` when its residuals have no spread (an exact fit)."""
    r = y - X @ start
    sd = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    if not sd > 1e-12 * max(float(np.abs(y).mean()), 1e-30):
        return start
    res = least_squares(lambda b: X @ b - y, np.maximum(start, 0.0), bounds=(0.0, np.inf), loss="huber",
                        f_scale=HUBER_MADS * sd)
    return res.x


def profile_from_dict(d: dict[str, Any]) -> HardwareProfile:
    """A profile saved by `ProfileFit.to_dict()` (or a bare profile dict)."""
    return HardwareProfile(**d.get("profile", d))


def with_limits(fit: ProfileFit, limits: EngineLimits) -> ProfileFit:
    """A stored fit's step-time model with this engine's batch limits and KV memory (`serve.profile_path` on an
    engine started with another max_num_seqs or block size): the model's coefficients are the engine's, its
    limits the run's."""
    p = replace(fit.profile, max_batch=limits.max_batch, token_budget=limits.token_budget,
                kv_blocks=limits.kv_blocks, block_size=limits.block_size)
    return replace(fit, profile=p)
