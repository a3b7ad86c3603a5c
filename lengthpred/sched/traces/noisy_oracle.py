"""Noisy oracles of a set rank correlation: predictions whose Spearman with the true lengths is a target.

A Gaussian copula on normal scores: z = Φ⁻¹((rank(y) + ½)/n) (ties broken at random),
z' = r·z + √(1 − r²)·ε with ε standard normal, and the prediction of request i is the true length of rank
rank(z'_i): a permutation of the true lengths, so predictions have exactly the lengths' distribution and
only the ranking is noisy. For a bivariate normal, Spearman ρs = (6/π)·asin(r/2), so r = 2·sin(π·ρs/6) gives
the target in expectation; with ε fixed, r is then moved by bisection until the *achieved* Spearman (`lengthpred.metrics.spearman`: average
ranks for ties, as scipy computes it) is within `tol` of the target, so every workload's x-axis value is
the rank correlation its scheduler actually saw.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from lengthpred.errors import ConfigError
from lengthpred.metrics import spearman_or_nan

__all__ = ["noisy_oracle"]


def _ranks(x: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """0-based ranks of x, ties ordered by `tiebreak`."""
    r = np.empty(len(x), dtype=np.int64)
    r[np.lexsort((tiebreak, x))] = np.arange(len(x))
    return r


def noisy_oracle(y: np.ndarray, target: float, *, rng: np.random.Generator, tol: float = 0.005,
                 max_iter: int = 60) -> np.ndarray:
    """A permutation of the lengths `y` whose Spearman with `y` is `target` ± `tol` (module docstring).

    Where ties in `y` make the target unreachable (it needs r beyond ±1), the closest reachable value is
    returned; the caller reports the achieved Spearman (`lengthpred.metrics.spearman_or_nan(y, pred)`), never the target."""
    if not -1.0 <= target <= 1.0 or not math.isfinite(target):
        raise ConfigError(f"noisy-oracle Spearman {target} must lie in [-1, 1]")
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < 3:
        return y.copy()
    z = ndtri((_ranks(y, rng.random(n)) + 0.5) / n)  # [n] normal scores of the true lengths
    eps = rng.standard_normal(n)  # [n] the noise, fixed while r is searched
    tie = rng.random(n)
    ys = np.sort(y)

    def draw(r: float) -> tuple[np.ndarray, float]:
        zp = r * z + math.sqrt(max(0.0, 1.0 - r * r)) * eps
        pred = ys[_ranks(zp, tie)]
        return pred, spearman_or_nan(y, pred)

    lo, hi = -1.0, 1.0
    r = 2.0 * math.sin(math.pi * target / 6.0)
    best, best_err = None, math.inf
    for _ in range(max_iter):
        pred, rho = draw(r)
        err = abs(rho - target) if math.isfinite(rho) else math.inf
        if err < best_err:
            best, best_err = pred, err
        if err <= tol:
            break
        if not math.isfinite(rho) or rho < target:
            lo = r
        else:
            hi = r
        r = 0.5 * (lo + hi)
    return best
