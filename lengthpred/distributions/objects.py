"""Predicted length distributions, one per row of X, behind one small interface.

Every object holds n rows (one per prompt) and answers, for each row:
- `cdf(y)`: P(L ≤ y), y of shape [n] or [n, m] (then [n, m]);
- `quantile(q)`: [n, len(q)] lengths in tokens, for increasing levels q in (0, 1) (`check_quantiles`);
- `mean(cap=None)`: E[L], or E[min(L, cap)] (what a server that stops at `cap` will generate).

The kinds:
- `LogNormal(mu, sigma)`: log1p(L) ~ Normal(mu, sigma²) (the censored head; a point head's log residuals).
- `Histogram(edges, probs)`: piecewise-uniform mass inside shared bins (the soft-bin heads EGTP/ESTP/probe);
  a zero-width bin (quantile edges tied at the cap) is a point mass at its edge.
- `QuantileGrid(levels, values)`: quantiles at fixed levels (the quantile readout), linear between them,
  a linear tail continued to level 0 (clipped at length 0) and level 1.
- `Empirical(samples)`: each row's own sample set (the prompt's other samples: the ceiling).
- `PointMass(values)`: all mass on the point prediction (a point head taken at its word).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from lengthpred.errors import ConfigError, DataError


def check_quantiles(q: Any) -> np.ndarray:
    """Levels as a 1-D float array, each in (0, 1), strictly increasing; a ConfigError (one line) otherwise."""
    arr = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(f"quantile levels must be a non-empty 1-D list, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any((arr <= 0) | (arr >= 1)):
        raise ConfigError(f"quantile levels must lie strictly inside (0, 1), got {arr.tolist()}")
    if np.any(np.diff(arr) <= 0):
        raise ConfigError(f"quantile levels must be strictly increasing, got {arr.tolist()}")
    return arr


def _rows_y(y: Any, n: int) -> tuple[np.ndarray, bool]:
    """y as [n, m] (and whether it came in as [n])."""
    y = np.asarray(y, dtype=np.float64)
    flat = y.ndim == 1
    y2 = y[:, None] if flat else y
    if y2.ndim != 2 or y2.shape[0] != n:
        raise DataError(f"y must have one row per predicted distribution ({n}), got shape {y.shape}")
    return y2, flat


class LengthDistribution:
    """n predicted length distributions; subclasses implement `_cdf` ([n, m] → [n, m]) and `quantile`."""

    kind = ""

    def __len__(self) -> int:
        raise NotImplementedError

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def quantile(self, q: Any) -> np.ndarray:
        raise NotImplementedError

    def cdf(self, y: Any) -> np.ndarray:
        y2, flat = _rows_y(y, len(self))
        out = np.clip(self._cdf(y2), 0.0, 1.0)
        return out[:, 0] if flat else out

    def mean(self, cap: float | None = None) -> np.ndarray:
        """E[min(L, cap)] = ∫_0^cap P(L > z) dz on unit steps (midpoints); E[L] without a cap where closed."""
        if cap is None:
            raise DataError(f"{type(self).__name__}: the uncapped mean needs a cap or a closed form")
        z = np.arange(int(np.ceil(cap)), dtype=np.float64) + 0.5
        return (1.0 - self.cdf(np.broadcast_to(z, (len(self), z.size)))).sum(axis=1)

    def take(self, idx: Any) -> LengthDistribution:
        """The rows `idx` (a new object of the same kind)."""
        raise NotImplementedError


class LogNormal(LengthDistribution):
    """log1p(L) ~ Normal(mu, sigma²), per row."""

    kind = "lognormal"

    def __init__(self, mu: Any, sigma: Any) -> None:
        self.mu = np.asarray(mu, dtype=np.float64).reshape(-1)
        self.sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), self.mu.shape).copy()
        if np.any(self.sigma <= 0):
            raise DataError("LogNormal needs sigma > 0")

    def __len__(self) -> int:
        return self.mu.size

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        z = np.log1p(np.maximum(y, 0.0))
        return np.where(y < 0, 0.0, stats.norm.cdf((z - self.mu[:, None]) / self.sigma[:, None]))

    def quantile(self, q: Any) -> np.ndarray:
        q = check_quantiles(q)
        return np.expm1(self.mu[:, None] + self.sigma[:, None] * stats.norm.ppf(q)[None, :])

    def mean(self, cap: float | None = None) -> np.ndarray:
        if cap is None:
            return np.exp(self.mu + self.sigma**2 / 2) - 1.0
        return super().mean(cap)

    def take(self, idx: Any) -> LogNormal:
        return LogNormal(self.mu[idx], self.sigma[idx])


class Histogram(LengthDistribution):
    """Bin probabilities [n, K] over shared edges [K + 1]; uniform inside a bin, a point mass in a zero-width one."""

    kind = "histogram"

    def __init__(self, edges: Any, probs: Any) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        self.probs = np.asarray(probs, dtype=np.float64)
        if self.probs.ndim != 2 or self.probs.shape[1] != self.edges.size - 1:
            raise DataError(f"Histogram: probs {self.probs.shape} do not match {self.edges.size} edges")
        if np.any(np.diff(self.edges) < 0):
            raise DataError("Histogram: edges must be non-decreasing")
        self.probs = self.probs / self.probs.sum(axis=1, keepdims=True)
        self.cum = np.concatenate([np.zeros((len(self.probs), 1)), np.cumsum(self.probs, axis=1)], axis=1)

    def __len__(self) -> int:
        return self.probs.shape[0]

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        lo, hi = self.edges[:-1], self.edges[1:]  # [K]
        width = hi - lo
        frac = np.where(width > 0, (y[..., None] - lo) / np.where(width > 0, width, 1.0), (y[..., None] >= lo))
        return (np.clip(frac, 0.0, 1.0) * self.probs[:, None, :]).sum(axis=2)

    def quantile(self, q: Any) -> np.ndarray:
        q = check_quantiles(q)
        out = np.empty((len(self), q.size))
        for i in range(len(self)):  # per row: invert the piecewise-linear cdf
            c = self.cum[i]
            j = np.clip(np.searchsorted(c, q, side="left") - 1, 0, self.edges.size - 2)  # bin holding level q
            p = np.where(self.probs[i, j] > 0, (q - c[j]) / np.where(self.probs[i, j] > 0, self.probs[i, j], 1), 0)
            out[i] = self.edges[j] + np.clip(p, 0, 1) * (self.edges[j + 1] - self.edges[j])
        return out

    def mean(self, cap: float | None = None) -> np.ndarray:
        if cap is None:
            return self.probs @ ((self.edges[:-1] + self.edges[1:]) / 2)
        return super().mean(cap)

    def take(self, idx: Any) -> Histogram:
        return Histogram(self.edges, self.probs[idx])


class QuantileGrid(LengthDistribution):
    """Lengths at fixed levels (sorted per row), a piecewise-linear cdf between them and linear tails."""

    kind = "quantiles"

    def __init__(self, levels: Any, values: Any) -> None:
        self.levels = check_quantiles(levels)
        v = np.sort(np.asarray(values, dtype=np.float64), axis=1)  # rearrangement: never crossing
        if v.ndim != 2 or v.shape[1] != self.levels.size:
            raise DataError(f"QuantileGrid: values {v.shape} do not match {self.levels.size} levels")
        self.values = v
        lv = self.levels
        if lv.size >= 2:
            slope_lo = (v[:, 1] - v[:, 0]) / (lv[1] - lv[0])
            slope_hi = (v[:, -1] - v[:, -2]) / (lv[-1] - lv[-2])
        else:
            slope_lo = slope_hi = np.ones(len(v))
        lo = np.maximum(v[:, 0] - slope_lo * lv[0], 0.0)
        hi = v[:, -1] + slope_hi * (1 - lv[-1])
        self.knots = np.column_stack([np.minimum(lo, v[:, 0]), v, np.maximum(hi, v[:, -1])])  # [n, m + 2]
        self.knot_levels = np.concatenate([[0.0], lv, [1.0]])

    def __len__(self) -> int:
        return self.values.shape[0]

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        out = np.empty_like(y)
        for i in range(len(self)):
            k = self.knots[i]
            # np.interp needs increasing x: ties (a zero-width step) resolve to the upper level
            out[i] = np.interp(y[i], k + np.arange(k.size) * 1e-9, self.knot_levels)
        return out

    def quantile(self, q: Any) -> np.ndarray:
        q = check_quantiles(q)
        return np.stack([np.interp(q, self.knot_levels, k) for k in self.knots])

    def mean(self, cap: float | None = None) -> np.ndarray:
        """E[L] = ∫_0^1 Q(u) du, exact for the piecewise-linear Q (trapezoids between the knots)."""
        if cap is None:
            return ((self.knots[:, 1:] + self.knots[:, :-1]) / 2 * np.diff(self.knot_levels)).sum(axis=1)
        return super().mean(cap)

    def take(self, idx: Any) -> QuantileGrid:
        return QuantileGrid(self.levels, self.values[idx])


class Empirical(LengthDistribution):
    """Each row's own samples (equal weight); quantiles by the inverted empirical cdf."""

    kind = "empirical"

    def __init__(self, samples: Sequence[Sequence[float]]) -> None:
        self.samples = [np.sort(np.asarray(s, dtype=np.float64)) for s in samples]
        if any(s.size == 0 for s in self.samples):
            raise DataError("Empirical: a row has no samples")

    def __len__(self) -> int:
        return len(self.samples)

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        return np.stack([np.searchsorted(s, y[i], side="right") / s.size for i, s in enumerate(self.samples)])

    def quantile(self, q: Any) -> np.ndarray:
        q = check_quantiles(q)
        return np.stack([np.quantile(s, q, method="inverted_cdf") for s in self.samples])

    def mean(self, cap: float | None = None) -> np.ndarray:
        return np.array([np.minimum(s, np.inf if cap is None else cap).mean() for s in self.samples])

    def take(self, idx: Any) -> Empirical:
        return Empirical([self.samples[i] for i in np.arange(len(self))[idx]])


class PointMass(Empirical):
    """All mass on one value per row: a point head's prediction taken as certain (its CRPS is its MAE)."""

    kind = "point"

    def __init__(self, values: Any) -> None:
        super().__init__([[v] for v in np.asarray(values, dtype=np.float64).reshape(-1)])


__all__ = [
    "Empirical", "Histogram", "LengthDistribution", "LogNormal", "PointMass", "QuantileGrid", "check_quantiles",
]
