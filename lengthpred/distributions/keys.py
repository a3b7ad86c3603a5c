"""Scheduling keys from a predicted length distribution, on the served length min(L, cap) (a server stops at
the cap): the capped mean, a quantile, the tail mean CVaR_0.9 = E[min(L, cap) | L ≥ q0.9], and TIE's key
E + β·CVaR_0.9 with β fixed or set by the queue (`tie_beta`: TIE, arXiv 2604.00499, moves β with the number
of waiting requests relative to the batch cap, clipped to [0.1, 0.5])."""

from __future__ import annotations

import numpy as np

from lengthpred.distributions.objects import LengthDistribution
from lengthpred.errors import ConfigError

CVAR_LEVELS = tuple(np.linspace(0.9025, 0.9975, 20))  # midpoints of 20 equal slices of (0.9, 1)
TIE_BETA_RANGE = (0.1, 0.5)


def tail_mean(dist: LengthDistribution, cap: float) -> np.ndarray:
    """CVaR_0.9 of min(L, cap) per row: the mean of the capped quantiles over 20 equal slices of (0.9, 1)."""
    return np.minimum(dist.quantile(CVAR_LEVELS), cap).mean(axis=1)


def tie_beta(n_waiting: int, max_batch: int) -> float:
    """TIE's β: 0.1 · waiting / batch cap, clipped to [0.1, 0.5]."""
    if max_batch < 1:
        raise ConfigError(f"tie_beta: max_batch={max_batch} must be >= 1")
    lo, hi = TIE_BETA_RANGE
    return float(min(hi, max(lo, 0.1 * n_waiting / max_batch)))


def tie_key(dist: LengthDistribution, cap: float, beta: float) -> np.ndarray:
    """E[min(L, cap)] + β · CVaR_0.9 per row (TIE's score, in tokens)."""
    if not np.isfinite(beta) or beta < 0:
        raise ConfigError(f"TIE key: beta={beta} must be a finite number >= 0")
    return dist.mean(cap=cap) + beta * tail_mean(dist, cap)


__all__ = ["CVAR_LEVELS", "TIE_BETA_RANGE", "tail_mean", "tie_beta", "tie_key"]
