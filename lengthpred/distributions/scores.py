"""Scores of predicted length distributions against sampled lengths, with capped samples handled honestly.

A capped sample says only L ≥ C. Every score here uses only what is known:
- **pinball loss** at level τ compares min(q̂_τ, C) with min(y, C): the loss of the τ-quantile of the
  capped length min(L, C), a proper score for it and exactly computable; errors beyond the cap are not
  counted (no head can be scored on them).
- **CRPS** is threshold-weighted with weight 1{z < C}: Σ_z (F(z) − 1{y ≤ z})² over unit steps below the
  cap (midpoints z + ½). For a capped sample 1{y ≤ z} = 0 on every such z, so it is known exactly; it
  is the CRPS of min(L, C) (Gneiting & Ranjan 2011's twCRPS, proper for censored observations).
- **PIT and coverage** put each sample's PIT uniformly on [F(y − ½), F(y + ½)] (randomised PIT for integer
  lengths; an atom such as a point mass spreads over its mass) and a capped sample's uniformly on
  [F(C − ½), 1] (D-calibration, Haider et al. 2020): where the interval ends below the cap the sample is a
  known miss; where it does not, it counts with the probability the model itself gives. `decided` reports
  the share of capped samples the cap decides (interval's upper end below the cap).
The unit of resampling is the prompt: per-sample scores are averaged per prompt (`row`), then over prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lengthpred.distributions.censored import Observations
from lengthpred.distributions.objects import LengthDistribution, check_quantiles

PINBALL_LEVELS = (0.1, 0.5, 0.9)
INTERVALS = (0.5, 0.8)
_GRID_BLOCK = 256  # samples whose cdf grid is evaluated at once (bounds memory at 256 × cap floats)


def _per_sample(dist: LengthDistribution, obs: Observations) -> LengthDistribution:
    if obs.row.size and obs.row.max() >= len(dist):
        raise ValueError(f"observations refer to row {obs.row.max()} but the distribution has {len(dist)} rows")
    return dist.take(obs.row)


def pinball(dist: LengthDistribution, obs: Observations, levels: Any = PINBALL_LEVELS) -> np.ndarray:
    """[N, len(levels)] pinball losses of min(q̂_τ, C) against min(y, C), in tokens."""
    q = check_quantiles(levels)
    qhat = np.minimum(dist.quantile(q)[obs.row], obs.cap)  # [N, m]
    y = np.minimum(obs.length, obs.cap)[:, None]
    d = y - qhat
    return np.maximum(q * d, (q - 1) * d)


def crps(dist: LengthDistribution, obs: Observations) -> np.ndarray:
    """[N] CRPS of min(L, C) in tokens: Σ over z = ½, 1½, …, C − ½ of (F(z) − 1{y ≤ z})²."""
    z = np.arange(int(np.ceil(obs.cap)), dtype=np.float64) + 0.5
    out = np.empty(len(obs))
    for s in range(0, len(obs), _GRID_BLOCK):
        sl = slice(s, s + _GRID_BLOCK)
        rows = obs.row[sl]
        F = dist.take(rows).cdf(np.broadcast_to(z, (rows.size, z.size)))  # [b, C]
        ind = (obs.length[sl, None] <= z[None, :]) & ~obs.capped[sl, None]
        out[sl] = ((F - ind) ** 2).sum(axis=1)
    return out


def crps_fair(ensembles: Sequence[np.ndarray], obs: Observations) -> np.ndarray:
    """[N] fair CRPS of min(L, C) for sample `i` from ensemble `ensembles[i]` (its m ≥ 2 members at the cap when
    capped): (1/m) Σ|x_j − y| − 1/(2m(m−1)) Σ_{j,k}|x_j − x_k| (Ferro 2014), an unbiased estimate of the CRPS of
    the distribution the members are drawn from; the plain ensemble CRPS (`crps` of an `Empirical`) is biased
    up by the members' own spread for small m."""
    y = np.minimum(obs.length, obs.cap)
    out = np.empty(len(obs))
    for i, e in enumerate(ensembles):
        x = np.minimum(np.asarray(e, dtype=np.float64), obs.cap)
        m = x.size
        if m < 2:
            raise ValueError("the fair CRPS needs at least 2 members per ensemble")
        out[i] = np.abs(x - y[i]).mean() - np.abs(x[:, None] - x[None, :]).sum() / (2 * m * (m - 1))
    return out


def pit_bounds(dist: LengthDistribution, obs: Observations) -> tuple[np.ndarray, np.ndarray]:
    """([N], [N]): each sample's PIT range, uniform on it (module docstring)."""
    y = obs.length.astype(np.float64)
    sub = _per_sample(dist, obs)
    lo = sub.cdf(y - 0.5)
    hi = np.where(obs.capped, 1.0, sub.cdf(y + 0.5))
    return lo, np.maximum(hi, lo)


def _mass_in(lo: np.ndarray, hi: np.ndarray, a: float, b: float) -> np.ndarray:
    """Share of U[lo, hi] inside [a, b] (an indicator where lo == hi)."""
    width = hi - lo
    overlap = np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0.0, None)
    point = ((lo >= a) & (lo <= b)).astype(np.float64)
    return np.where(width > 1e-12, overlap / np.where(width > 1e-12, width, 1.0), point)


def coverage(dist: LengthDistribution, obs: Observations, level: float) -> tuple[np.ndarray, float]:
    """([N] expected coverage of the central `level` interval, share of capped samples the cap decides)."""
    if not 0 < level < 1:
        raise ValueError(f"interval level must lie in (0, 1), got {level}")
    lo, hi = pit_bounds(dist, obs)
    a, b = (1 - level) / 2, (1 + level) / 2
    cov = _mass_in(lo, hi, a, b)
    decided = float((lo[obs.capped] >= b).mean()) if obs.capped.any() else 1.0
    return cov, decided


def pit_histogram(dist: LengthDistribution, obs: Observations, n_bins: int = 10) -> np.ndarray:
    """[n_bins] share of PIT mass per equal bin of [0, 1] (flat at 1/n_bins when calibrated)."""
    lo, hi = pit_bounds(dist, obs)
    edges = np.linspace(0, 1, n_bins + 1)
    mass = np.stack([_mass_in(lo, hi, edges[k], edges[k + 1]) for k in range(n_bins)], axis=1)
    mass = mass / np.maximum(mass.sum(axis=1, keepdims=True), 1e-12)  # a shared edge counts once
    return mass.mean(axis=0)


def per_prompt(values: np.ndarray, obs: Observations, n_rows: int | None = None) -> np.ndarray:
    """Per-sample values → their mean per prompt ([n_rows]; NaN for a prompt without samples)."""
    n = obs.n_rows if n_rows is None else n_rows
    sums = np.bincount(obs.row, weights=values, minlength=n)
    counts = np.bincount(obs.row, minlength=n)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float


def bootstrap_mean(per_prompt_values: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                   confidence: float = 0.95) -> Interval:
    """Mean over prompts with a percentile bootstrap interval over prompts (NaN prompts left out)."""
    v = np.asarray(per_prompt_values, dtype=np.float64)
    v = v[np.isfinite(v)]
    rng = np.random.default_rng(seed)
    reps = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    a = (1 - confidence) / 2
    return Interval(float(v.mean()), float(np.quantile(reps, a)), float(np.quantile(reps, 1 - a)))


def score_all(dist: LengthDistribution, obs: Observations, *, levels: Any = PINBALL_LEVELS,
              intervals: Any = INTERVALS, n_boot: int = 1000, seed: int = 0,
              per_sample: bool = False) -> dict[str, Interval | float]:
    """Every score of one distribution (per-prompt means, bootstrap over prompts with `seed`, so two
    distributions scored with the same seed and observations are resampled alike).

    per_sample: `dist` has one row per sample rather than per prompt (the leave-one-out ceiling: each
    sample predicted by its prompt's other samples); scores are still averaged per prompt (`obs.row`).
    """
    n = obs.n_rows
    own = Observations(np.arange(len(obs)), obs.length, obs.capped, obs.cap) if per_sample else obs
    if per_sample and len(dist) != len(obs):
        raise ValueError(f"per_sample: the distribution has {len(dist)} rows for {len(obs)} samples")
    out: dict[str, Interval | float] = {}

    def summary(values: np.ndarray) -> Interval:
        return bootstrap_mean(per_prompt(values, obs, n), n_boot=n_boot, seed=seed)

    pb = pinball(dist, own, levels)
    for k, q in enumerate(check_quantiles(levels)):
        out[f"pinball@{q:g}"] = summary(pb[:, k])
    out["crps"] = summary(crps(dist, own))
    for level in intervals:
        cov, decided = coverage(dist, own, level)
        out[f"coverage@{level:g}"] = summary(cov)
        out[f"decided@{level:g}"] = decided
    return out


__all__ = [
    "INTERVALS", "PINBALL_LEVELS", "Interval", "bootstrap_mean", "coverage", "crps", "crps_fair", "per_prompt",
    "pinball",
    "pit_bounds", "pit_histogram", "score_all",
]
