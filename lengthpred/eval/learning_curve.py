"""Where the gap to the noise ceiling is, part 1: how a head's test Spearman grows with its training set.

`learning_curve` fits a head (its own search, the same budget as every fit: `lengthpred.heads.run_training`)
on `fraction` of the train prompts, drawn per domain (each domain keeps its share), `resamples` times per
fraction with seeds `seed + r` (the subsample and, for a seeded head, its initialisation), always selected on
the full validation split and scored on the full test split; every fit keeps its test predictions.

`trend` fits the inverse power law ρ(n) = a − b·n^(−c) (a the asymptote, b > 0, c > 0: the usual learning-curve
form) to the mean test Spearman per train size, and solves it for the train size at which ρ reaches `share` of the
noise ceiling: n* = (b / (a − target))^(1/c), infinite where the asymptote stays below the target. Its intervals
come from one bootstrap over test prompts, shared by every fit and by the ceiling (the same resampled prompts
give every fit's Spearman and the ceiling's estimate in a replicate, the curve is refitted per replicate), in which
each train size's draws are also resampled (`draw_means`): the test set's size and the train draws both count.
With 3 draws per size the draws' share of that uncertainty is itself roughly estimated.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from lengthpred.errors import DataError
from lengthpred.heads.base import LabeledSet
from lengthpred.heads.search import subset
from lengthpred.metrics import spearman_rows

MIN_TRAIN = 30  # a curve point with fewer train prompts is refused: a search over 8 candidates on it says nothing


@dataclass(frozen=True)
class CurvePoint:
    """One fit: its fraction of train, train size, resample, validation and test Spearman, test predictions."""

    head: str
    fraction: float
    n_train: int
    resample: int
    val_spearman: float
    test_spearman: float
    y_pred: np.ndarray
    fit_seconds: float


def check_fractions(fractions: Sequence[float], n_train: int, min_train: int = MIN_TRAIN) -> list[int]:
    """Train sizes of the fractions, or one DataError line before any fit: a fraction outside (0, 1], or one
    that leaves fewer than `min_train` prompts of the `n_train` there are."""
    sizes = []
    for f in fractions:
        if not 0 < float(f) <= 1:
            raise DataError(f"learning-curve fraction {f}: use fractions in (0, 1]")
        n = int(round(float(f) * n_train))
        if n < min_train:
            least = math.ceil(min_train / n_train * 1000) / 1000 if n_train else math.inf
            allows = (f"the smallest fraction this train set allows is {least}" if least <= 1 else
                      f"this train set is too small for any learning curve (min_train={min_train})")
            raise DataError(f"learning-curve fraction {f} of {n_train} train prompts is {n} (< {min_train}): {allows}")
        sizes.append(n)
    return sizes


def stratified_rows(domains: Sequence[str], fraction: float, seed: int) -> list[int]:
    """round(fraction · n_d) seeded rows of each domain d (all of them at fraction 1), sorted."""
    rng = np.random.default_rng(seed)
    dom = np.asarray(list(domains), dtype=object)
    rows: list[int] = []
    for d in sorted(set(dom.tolist())):
        idx = np.flatnonzero(dom == d)
        k = len(idx) if fraction >= 1 else int(round(fraction * len(idx)))
        rows += idx.tolist() if k >= len(idx) else rng.choice(idx, size=k, replace=False).tolist()
    return sorted(int(i) for i in rows)


def learning_curve(head: str, fit: Callable[[LabeledSet, int], tuple[dict[str, Any], np.ndarray]],
                   train: LabeledSet, fractions: Sequence[float], resamples: int, seed: int,
                   log: Callable[[str], None] = print, min_train: int = MIN_TRAIN) -> list[CurvePoint]:
    """`fit(train_subset, random_state) -> (metrics, test predictions)` for every fraction × resample (module
    docstring). At fraction 1 every resample reads all train prompts (only a seeded head's initialisation
    differs)."""
    check_fractions(fractions, len(train), min_train)
    domains = train.inputs.domains or [""] * len(train)
    out = []
    for f in sorted(float(x) for x in fractions):
        for r in range(int(resamples)):
            rows = stratified_rows(domains, f, seed + r)
            metrics, pred = fit(subset(train, rows), seed + r)
            out.append(CurvePoint(head, f, len(rows), r, float(metrics.get("val_spearman") or math.nan),
                                  float(metrics["spearman"]), np.asarray(pred, dtype=np.float64),
                                  float(metrics.get("fit_seconds", math.nan))))
            log(f"[gap] {head} fraction {f:g} resample {r}: n={len(rows)} test Spearman {out[-1].test_spearman:.3f}")
    return out


def power_law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a - b * np.power(n, -c)


def fit_power_law(n: Sequence[float], rho: Sequence[float]) -> tuple[float, float, float]:
    """(a, b, c) of ρ(n) = a − b·n^(−c) by least squares, a ≤ 1, b ≥ 0, 0.05 ≤ c ≤ 3 (NaNs if it fails)."""
    n, rho = np.asarray(n, dtype=np.float64), np.asarray(rho, dtype=np.float64)
    ok = np.isfinite(rho)
    if ok.sum() < 3:
        return math.nan, math.nan, math.nan
    p0 = (min(float(rho[ok].max()) + 0.05, 1.0), 1.0, 0.5)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, b, c), _ = curve_fit(power_law, n[ok], rho[ok], p0=p0, bounds=([-1.0, 0.0, 0.05], [1.0, np.inf, 3.0]),
                                     maxfev=20000)
    except (RuntimeError, ValueError):
        return math.nan, math.nan, math.nan
    return float(a), float(b), float(c)


def size_to_reach(a: float, b: float, c: float, target: float) -> float:
    """Train prompts at which the fitted curve reaches `target` (inf where its asymptote stays below)."""
    if not all(map(math.isfinite, (a, b, c))) or a <= target:
        return math.inf
    if b == 0:
        return 0.0
    return float((b / (a - target)) ** (1.0 / c))


def draw_means(rho: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[draws, B + 1] Spearmans (each draw on each bootstrap replicate; column 0 the prompts as they are) → [B + 1]:
    column 0 the mean over every draw, each replicate the mean over as many draws drawn with replacement, so an
    interval over the replicates covers the draws' spread as well as the test prompts'."""
    rho = np.atleast_2d(np.asarray(rho, dtype=np.float64))
    r, cols = rho.shape
    pick = rng.integers(0, r, size=(cols, r))
    pick[0] = np.arange(r)
    return np.take_along_axis(rho.T, pick, axis=1).mean(axis=1)


def ceiling_rows(samples: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """For [n, k] sampled lengths: a function of bootstrap index rows [B, n] → the noise ceiling of the mean of k
    samples on each replicate (√(k·r/(1+(k−1)·r)), r the mean pairwise Spearman between sample positions)."""
    S = np.asarray(samples, dtype=np.float64)
    k = S.shape[1]
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]

    def ceiling(idx: np.ndarray) -> np.ndarray:
        r = np.nanmean([spearman_rows(S[idx, a], S[idx, b]) for a, b in pairs], axis=0)
        with np.errstate(invalid="ignore"):
            rp = np.where(r > 0, r, np.nan)
            return np.sqrt(k * rp / (1 + (k - 1) * rp))

    return ceiling


@dataclass(frozen=True)
class Trend:
    """The fitted curve of one head, with percentile intervals from the test-prompt bootstrap."""

    head: str
    a: float
    a_ci: tuple[float, float]
    b: float
    c: float
    n_star: float
    n_star_ci: tuple[float, float]
    reachable_share: float  # replicates whose fitted asymptote passes the target
    target: float
    ceiling: float
    ceiling_ci: tuple[float, float]
    full_share: float  # mean test Spearman at the full train set / the ceiling
    full_share_ci: tuple[float, float]
    gain_last_doubling: float  # mean Spearman at the full train set − at half of it (paired over test prompts)
    gain_last_doubling_ci: tuple[float, float]


def trend(points: Sequence[CurvePoint], y_test: np.ndarray, samples: np.ndarray, *, share: float = 0.9,
          n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> Trend:
    """The power-law trend of one head's points, its n* for `share` of the ceiling, and their intervals."""
    pts = list(points)
    sizes = sorted({p.n_train for p in pts})
    by_size = {n: [p for p in pts if p.n_train == n] for n in sizes}
    y = np.asarray(y_test, dtype=np.float64)
    preds = {n: np.stack([p.y_pred for p in by_size[n]]) for n in sizes}  # [resamples, n_test]
    rng = np.random.default_rng(seed)
    idx = np.vstack([np.arange(len(y))[None, :], rng.integers(0, len(y), size=(n_boot, len(y)))])  # row 0: as is
    ceil = ceiling_rows(samples)(idx)  # [B + 1]
    rho = np.stack([draw_means(np.stack([spearman_rows(y[idx], pr[idx]) for pr in preds[n]]), rng) for n in sizes],
                   axis=1)  # [B + 1, sizes]
    target = share * ceil
    fits = [fit_power_law(sizes, rho[b]) for b in range(len(idx))]
    a = np.array([f[0] for f in fits])
    n_star = np.array([size_to_reach(*fits[b], target[b]) for b in range(len(idx))])
    lo, hi = (1 - confidence) / 2, 1 - (1 - confidence) / 2

    def q(v: np.ndarray) -> tuple[float, float]:
        v = v[~np.isnan(v)]
        return (float(np.quantile(v, lo, method="inverted_cdf")), float(np.quantile(v, hi, method="inverted_cdf"))
                ) if len(v) else (math.nan, math.nan)

    full, half = sizes[-1], min(sizes, key=lambda n: abs(n - sizes[-1] / 2))
    fs = rho[:, -1] / ceil
    gain = rho[:, sizes.index(full)] - rho[:, sizes.index(half)]
    return Trend(pts[0].head, float(a[0]), q(a[1:]), float(fits[0][1]), float(fits[0][2]), float(n_star[0]),
                 q(n_star[1:]),
                 float(np.mean(np.isfinite(n_star[1:]))), float(target[0]), float(ceil[0]), q(ceil[1:]), float(fs[0]),
                 q(fs[1:]), float(gain[0]), q(gain[1:]))


def points_frame(points: Sequence[CurvePoint]) -> pd.DataFrame:
    return pd.DataFrame([{"head": p.head, "fraction": p.fraction, "n_train": p.n_train, "resample": p.resample,
                          "val_spearman": p.val_spearman, "test_spearman": p.test_spearman,
                          "fit_seconds": p.fit_seconds} for p in points])
