"""Predicted length distributions, one per row of X, behind one small interface.

Every object holds n rows (one per prompt) and answers, for each row:
- `cdf(y)`: P(L ≤ y), y of shape [n] or [n, m] (then [n, m]);
- `quantile(q)`: [n, len(q)] lengths in tokens, for increasing levels q in (0, 1) (`check_quantiles`);
- `mean(cap=None)`: E[L], or E[min(L, cap)] (what a server that stops at `cap` will generate).

The kinds:
- `LogNormal(mu, sigma)`: log1p(L) ~ Normal(mu, sigma²) (the censored head; a point head's log residuals).
- `Histogram(edges, probs, knots=None)`: mass inside shared bins (the soft-bin heads EGTP/ESTP/probe, proxy_cls),
  uniform inside each bin, or shaped like the training lengths that fell in it (`knots`, `within_bin_knots`);
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


def within_bin_knots(y: Any, edges: Any, n_segments: int = 20) -> np.ndarray:
    """[K, n_segments + 1] lengths at levels 0, 1/n_segments, …, 1 inside each of the K bins: the quantiles of
    the training lengths `y` that fall in the bin (bin_index's rule: beyond the last edge counts in the last
    bin), with the bin's own edges as the ends so that its support is kept; an empty bin is uniform.

    Why: a bin of equal-frequency edges that reaches a long tail's maximum (e.g. 700 to 7,500 tokens) holds
    mostly lengths near its lower edge; read as uniform, a median inside it lands thousands of tokens too far.
    Pinning the end knots to the edges keeps 1/n_segments of the bin's mass on each side between the edge and the
    nearest training length (a bin whose lengths are all 5 spreads 5% over [lo, 5] and 5% over [5, hi])."""
    y = np.asarray(y, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    k = edges.size - 1
    levels = np.linspace(0.0, 1.0, n_segments + 1)
    idx = np.clip(np.searchsorted(edges[1:-1], y, side="right"), 0, k - 1)
    knots = edges[:-1, None] + levels[None, :] * np.diff(edges)[:, None]  # uniform
    for j in range(k):
        inside = np.clip(y[idx == j], edges[j], edges[j + 1])
        if inside.size:
            knots[j] = np.quantile(inside, levels)
            knots[j, 0], knots[j, -1] = edges[j], edges[j + 1]
    return knots


class Histogram(LengthDistribution):
    """Bin probabilities [n, K] over shared edges [K + 1]. Inside bin j the mass follows `knots[j]` (lengths
    at equally spaced levels from the bin's lower to its upper edge, linear between them; `within_bin_knots`);
    without knots it is uniform. A zero-width bin is a point mass at its edge."""

    kind = "histogram"

    def __init__(self, edges: Any, probs: Any, knots: Any = None) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        self.probs = np.asarray(probs, dtype=np.float64)
        if self.probs.ndim != 2 or self.probs.shape[1] != self.edges.size - 1:
            raise DataError(f"Histogram: probs {self.probs.shape} do not match {self.edges.size} edges")
        if np.any(np.diff(self.edges) < 0):
            raise DataError("Histogram: edges must be non-decreasing")
        if knots is None:
            knots = np.stack([self.edges[:-1], self.edges[1:]], axis=1)
        self.knots = np.asarray(knots, dtype=np.float64)
        if self.knots.ndim != 2 or self.knots.shape[0] != self.edges.size - 1 or self.knots.shape[1] < 2:
            raise DataError(f"Histogram: knots {self.knots.shape} do not match {self.edges.size - 1} bins")
        if np.any(np.diff(self.knots, axis=1) < 0):
            raise DataError("Histogram: each bin's knots must be non-decreasing")
        self.probs = self.probs / self.probs.sum(axis=1, keepdims=True)
        self.cum = np.concatenate([np.zeros((len(self.probs), 1)), np.cumsum(self.probs, axis=1)], axis=1)

    def __len__(self) -> int:
        return self.probs.shape[0]

    def _cdf(self, y: np.ndarray) -> np.ndarray:
        n_seg = self.knots.shape[1] - 1
        out = np.zeros(y.shape)
        for j, k in enumerate(self.knots):  # the share of bin j's mass at or below y, weighted by its probability
            if k[-1] <= k[0]:
                within = (y >= k[0]).astype(np.float64)
            else:
                s = np.clip(np.searchsorted(k, y, side="right") - 1, 0, n_seg - 1)  # segment k[s] <= y < k[s + 1]
                lo, width = k[s], k[s + 1] - k[s]
                frac = np.clip((y - lo) / np.where(width > 0, width, 1.0), 0.0, 1.0)
                within = np.where(y < k[0], 0.0, np.where(y >= k[-1], 1.0, (s + frac) / n_seg))
            out += within * self.probs[:, j : j + 1]
        return out

    def quantile(self, q: Any) -> np.ndarray:
        q = check_quantiles(q)
        n_seg = self.knots.shape[1] - 1
        out = np.empty((len(self), q.size))
        for i in range(len(self)):  # per row: the bin holding level q, then the level inside that bin
            c = self.cum[i]
            j = np.clip(np.searchsorted(c, q, side="left") - 1, 0, self.edges.size - 2)
            p = np.where(self.probs[i, j] > 0, (q - c[j]) / np.where(self.probs[i, j] > 0, self.probs[i, j], 1), 0)
            pos = np.clip(p, 0, 1) * n_seg  # segment and position inside it, on the bin's knots
            s = np.minimum(np.floor(pos).astype(np.int64), n_seg - 1)
            lo = self.knots[j, s]
            out[i] = lo + (pos - s) * (self.knots[j, s + 1] - lo)
        return out

    def mean(self, cap: float | None = None) -> np.ndarray:
        if cap is None:  # each segment between two knots holds an equal share of its bin, uniformly
            return self.probs @ ((self.knots[:, :-1] + self.knots[:, 1:]) / 2).mean(axis=1)
        return super().mean(cap)

    def take(self, idx: Any) -> Histogram:
        return Histogram(self.edges, self.probs[idx], self.knots)


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
