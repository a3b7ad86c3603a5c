"""Corpus-level length metrics with bootstrap CIs, a paired bootstrap and the sampling-noise ceiling.

Every metric is a function of (y_true, y_pred) in tokens, registered in `METRICS` with a
`higher_is_better` flag (lm-eval-harness style). A metric that needs variation (a correlation) on
fewer than 2 distinct values is `UNDEFINED`, never 0 and never a silent NaN; so is its CI.
Point estimates come from scipy.stats / sklearn.metrics; the bootstrap uses vectorised numpy twins of
the same formulas (tests hold them equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from lengthpred.errors import DataError
from lengthpred.registry import Registry

DEFAULT_BUCKET_EDGES: tuple[float, ...] = (64, 128, 256, 512, 1024, 2048)
_KENDALL_DENSE_MAX = 200  # above this n, Kendall rows use scipy one at a time
_CHUNK = 256  # bootstrap replicates evaluated per block, bounding memory at 256 × n floats


class Undefined:
    """The value of a metric that does not exist on these data (e.g. Spearman of a constant)."""

    _instance: Undefined | None = None

    def __new__(cls) -> Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED = Undefined()
MetricValue = float | Undefined


def is_undefined(x: object) -> bool:
    return x is UNDEFINED


def _defined(x: float) -> MetricValue:
    return UNDEFINED if not math.isfinite(x) else float(x)


@dataclass(frozen=True)
class Metric:
    """One metric: `point` (scipy/sklearn, 1-D) and `batched` (numpy, rows of [B, n] → [B])."""

    name: str
    point: Callable[..., float]
    batched: Callable[..., np.ndarray]
    higher_is_better: bool
    needs_variation: bool = False  # undefined unless both inputs have ≥ 2 distinct values
    unit: str = ""  # "tokens" for error metrics, "" for correlations and fractions
    # the point prediction the metric rewards ("median": absolute error, "mean": squared error): scorers of
    # predictions files use that column where the head recorded it (lengthpred.seeds.POINT_COLUMNS), y_pred
    # otherwise; None: always y_pred (rank metrics, which any monotone map of a prediction leaves unchanged)
    rewards: str | None = None

    def __call__(self, y_true: Any, y_pred: Any, **params: Any) -> MetricValue:
        t, p = _as_pair(y_true, y_pred)
        if not self._defined_on(t[None], p[None])[0]:
            return UNDEFINED
        return _defined(float(self.point(t, p, **params)))

    def _defined_on(self, T: np.ndarray, P: np.ndarray) -> np.ndarray:
        ok = np.full(T.shape[0], T.shape[1] >= (2 if self.needs_variation else 1))
        if self.needs_variation and T.shape[1]:  # (np.ptp has no value on empty rows)
            ok &= (np.ptp(T, axis=1) > 0) & (np.ptp(P, axis=1) > 0)
        return ok

    def on_rows(self, T: np.ndarray, P: np.ndarray, **params: Any) -> np.ndarray:
        """The metric of each row pair; NaN marks an undefined row (internal use only)."""
        out = np.full(T.shape[0], np.nan)
        ok = self._defined_on(T, P)
        if ok.any():
            out[ok] = self.batched(T[ok], P[ok], **params)
        return out


METRICS: Registry[Metric] = Registry("metric")


def _register(metric: Metric) -> Metric:
    return METRICS.register(metric.name)(metric)


def _as_pair(y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=np.float64).ravel()
    p = np.asarray(y_pred, dtype=np.float64).ravel()
    if t.shape != p.shape:
        raise DataError(f"y_true has {t.size} values but y_pred has {p.size}")
    if not (np.isfinite(t).all() and np.isfinite(p).all()):
        raise DataError("y_true / y_pred contain NaN or inf; drop or fix those rows before scoring")
    return t, p


# --- vectorised row-wise formulas -----------------------------------------------------------------
def _rows_pearson(T: np.ndarray, P: np.ndarray) -> np.ndarray:
    tc = T - T.mean(axis=1, keepdims=True)
    pc = P - P.mean(axis=1, keepdims=True)
    den = np.sqrt((tc * tc).sum(axis=1) * (pc * pc).sum(axis=1))
    return np.clip((tc * pc).sum(axis=1) / den, -1.0, 1.0)


def _rows_spearman(T: np.ndarray, P: np.ndarray) -> np.ndarray:
    return _rows_pearson(stats.rankdata(T, axis=1), stats.rankdata(P, axis=1))


def _pair_signs(X: np.ndarray) -> np.ndarray:
    # [b, n, n] int8: +1 where x_i > x_j, -1 where x_i < x_j, 0 on ties (both triangles, so sums count twice)
    return (X[:, :, None] > X[:, None, :]).astype(np.int8) - (X[:, :, None] < X[:, None, :])


def _rows_kendall(T: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Kendall tau-b per row: Σ sx·sy / √(Σ sx² · Σ sy²) over pairs (sx = sign of the pair's order)."""
    n = T.shape[1]
    if n > _KENDALL_DENSE_MAX:  # O(n²) memory per row: fall back to scipy's O(n log n), one row at a time
        return np.array([stats.kendalltau(t, p).statistic for t, p in zip(T, P, strict=True)])
    out = np.empty(T.shape[0])
    step = max(1, 8_000_000 // (n * n))
    for s in range(0, T.shape[0], step):
        sx, sy = _pair_signs(T[s : s + step]), _pair_signs(P[s : s + step])
        num = (sx * sy).sum(axis=(1, 2), dtype=np.int64)
        den = np.sqrt(
            np.count_nonzero(sx, axis=(1, 2)) * np.count_nonzero(sy, axis=(1, 2)).astype(np.float64)
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + step] = num / den
    return out


def _bucket_ids(x: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    return np.digitize(x, np.asarray(sorted(edges), dtype=np.float64), right=False)


def _bucket_accuracy(t: np.ndarray, p: np.ndarray, edges: Sequence[float] = DEFAULT_BUCKET_EDGES) -> Any:
    return (_bucket_ids(t, edges) == _bucket_ids(p, edges)).mean(axis=-1)


def _within(tol: float) -> Callable[..., Any]:
    def fn(t: np.ndarray, p: np.ndarray) -> Any:
        return (np.abs(p - t) <= tol).mean(axis=-1)

    return fn


_register(Metric("spearman", lambda t, p: stats.spearmanr(t, p).statistic, _rows_spearman, True, True))
_register(Metric("kendall", lambda t, p: stats.kendalltau(t, p).statistic, _rows_kendall, True, True))
_register(Metric("pearson", lambda t, p: stats.pearsonr(t, p).statistic, _rows_pearson, True, True))
_register(
    Metric(
        "mae",
        skm.mean_absolute_error,
        lambda T, P: np.abs(P - T).mean(axis=1),
        False,
        unit="tokens",
        rewards="median",
    )
)
_register(
    Metric(
        "rmse",
        skm.root_mean_squared_error,
        lambda T, P: np.sqrt(((P - T) ** 2).mean(axis=1)),
        False,
        unit="tokens",
        rewards="mean",
    )
)
_register(
    Metric(
        "median_ae",
        skm.median_absolute_error,
        lambda T, P: np.median(np.abs(P - T), axis=1),
        False,
        unit="tokens",
    )
)
_register(Metric("bucket_accuracy", _bucket_accuracy, _bucket_accuracy, True))
_register(Metric("within_50", _within(50), _within(50), True))
_register(Metric("within_100", _within(100), _within(100), True))


# --- estimates with bootstrap CIs -----------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """A metric value with its percentile bootstrap CI; any part may be UNDEFINED."""

    metric: str
    value: MetricValue
    ci_low: MetricValue
    ci_high: MetricValue
    n: int
    higher_is_better: bool


def _resample_blocks(n: int, n_boot: int, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_boot:
        b = min(_CHUNK, n_boot - done)
        yield rng.integers(0, n, size=(b, n))
        done += b


def _percentile_ci(reps: np.ndarray, confidence: float) -> tuple[MetricValue, MetricValue]:
    """Percentile CI over the defined replicates; undefined when fewer than half are defined."""
    ok = reps[np.isfinite(reps)]
    if reps.size == 0 or ok.size < 0.5 * reps.size:
        return UNDEFINED, UNDEFINED
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ok, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def evaluate(
    y_true: Any,
    y_pred: Any,
    metrics: Sequence[str] | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Estimate]:
    """Every requested metric with a seeded percentile bootstrap CI (the same resamples for all metrics).

    `params` passes keywords to single metrics, e.g. `{"bucket_accuracy": {"edges": [100, 300]}}`.
    `n_boot=0` skips the bootstrap (CIs UNDEFINED).
    """
    t, p = _as_pair(y_true, y_pred)
    names = list(metrics) if metrics is not None else METRICS.names()
    chosen = [METRICS.get(m) for m in names]
    params = params or {}
    reps = {m.name: [] for m in chosen}
    if t.size and n_boot > 0:
        for idx in _resample_blocks(t.size, n_boot, seed):
            T, P = t[idx], p[idx]  # [b, n]
            for m in chosen:
                reps[m.name].append(m.on_rows(T, P, **params.get(m.name, {})))
    out: dict[str, Estimate] = {}
    for m in chosen:
        value = m(t, p, **params.get(m.name, {}))
        lo: MetricValue
        hi: MetricValue
        if is_undefined(value) or not reps[m.name]:
            lo = hi = UNDEFINED
        else:
            lo, hi = _percentile_ci(np.concatenate(reps[m.name]), confidence)
        out[m.name] = Estimate(m.name, value, lo, hi, int(t.size), m.higher_is_better)
    return out


@dataclass(frozen=True)
class PairedDifference:
    """metric(A) − metric(B) on the same prompts; `p_value` is the fraction of resamples where A is
    not better than B (orientation from `higher_is_better`), a one-sided bootstrap p-value."""

    metric: str
    diff: MetricValue
    ci_low: MetricValue
    ci_high: MetricValue
    p_value: MetricValue
    n: int


def paired_bootstrap(y_true: Any, pred_a: Any, pred_b: Any, metric: str = "spearman", **kw: Any) -> PairedDifference:
    """Paired bootstrap of the difference between two predictors scored on the same prompts (keywords as
    `paired_bootstrap_seeds`: n_boot, seed, confidence, params)."""
    return paired_bootstrap_seeds(y_true, [pred_a], [pred_b], metric, **kw)


def paired_bootstrap_seeds(
    y_true: Any,
    preds_a: Sequence[Any],
    preds_b: Sequence[Any],
    metric: str = "spearman",
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    params: Mapping[str, Any] | None = None,
) -> PairedDifference:
    """Paired bootstrap of mean-over-seeds metric(A) − mean-over-seeds metric(B): every seed's predictions of
    both heads are scored on the same resample of prompts, so the interval carries the prompts' noise and the
    seed means carry the seeds'. UNDEFINED when any seed's metric is."""
    if not len(preds_a) or not len(preds_b):
        raise ValueError("paired_bootstrap_seeds: each head needs at least one seed's predictions")
    t = _as_pair(y_true, preds_a[0])[0]
    a = [_as_pair(y_true, p)[1] for p in preds_a]
    b = [_as_pair(y_true, p)[1] for p in preds_b]
    m = METRICS.get(metric)
    kw = dict(params or {})
    va, vb = [m(t, x, **kw) for x in a], [m(t, x, **kw) for x in b]
    if any(is_undefined(v) for v in va + vb):
        return PairedDifference(metric, UNDEFINED, UNDEFINED, UNDEFINED, UNDEFINED, int(t.size))

    def seed_mean(T: np.ndarray, preds: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
        return np.mean([m.on_rows(T, x[idx], **kw) for x in preds], axis=0)

    diffs = [seed_mean(t[idx], a, idx) - seed_mean(t[idx], b, idx) for idx in _resample_blocks(t.size, n_boot, seed)]
    d = np.concatenate(diffs) if diffs else np.empty(0)
    lo, hi = _percentile_ci(d, confidence)
    ok = d[np.isfinite(d)]
    sign = 1.0 if m.higher_is_better else -1.0
    p_value: MetricValue = float(np.mean(sign * ok <= 0)) if ok.size else UNDEFINED
    diff = float(np.mean([float(v) for v in va])) - float(np.mean([float(v) for v in vb]))
    return PairedDifference(metric, diff, lo, hi, p_value, int(t.size))


# --- the noise ceiling (RESEARCH.md "The ceiling every predictor lives under") ----------------------
def spearman(x: Any, y: Any) -> MetricValue:
    """Spearman's rho, UNDEFINED on fewer than 2 distinct values in either input."""
    return METRICS.get("spearman")(x, y)


def spearman_or_nan(x: Any, y: Any) -> float:
    """`spearman` as a float for tables and arrays: NaN where it is UNDEFINED."""
    r = spearman(x, y)
    return math.nan if is_undefined(r) else float(r)


def spearman_rows(T: Any, P: Any) -> np.ndarray:
    """`spearman` of each row of T [B, n] with the same row of P [B, n]; NaN where a row's is UNDEFINED."""
    return METRICS.get("spearman").on_rows(np.asarray(T, dtype=np.float64), np.asarray(P, dtype=np.float64))


def spearman_brown(r: MetricValue, k: float) -> MetricValue:
    """Reliability of the mean of k samples from the single-sample reliability r."""
    if is_undefined(r) or r <= 0:
        return UNDEFINED
    return float(k * r / (1.0 + (k - 1.0) * r))


def _sqrt(r: MetricValue) -> MetricValue:
    return UNDEFINED if is_undefined(r) or r <= 0 else float(math.sqrt(min(r, 1.0)))


def _mean_defined(values: Sequence[MetricValue]) -> MetricValue:
    ok = [float(v) for v in values if not is_undefined(v)]
    return float(np.mean(ok)) if ok else UNDEFINED


@dataclass(frozen=True)
class NoiseCeiling:
    """How well any predictor could rank prompts, given that one prompt's length is itself random.

    Every field is an *estimate* from a finite set of prompts and samples, so it has its own sampling
    error (`ci`, from `noise_ceiling(n_boot > 0)`): a head whose score reaches or exceeds the estimate on a
    small test set is within that error, not above the ceiling.

    - `loo`: Spearman of one sample vs the mean of the prompt's other samples (averaged over which
      sample is held out); RESEARCH.md's measured figure.
    - `pairwise_r`: mean Spearman between two samples of the same prompts (single-sample reliability);
      `ceiling_single = √r` and `ceiling_mean_k = √(k·r/(1+(k−1)·r))` (Spearman–Brown) bound a perfect
      predictor of the expected length against a one-sample or a mean-of-k target.
    - `split_half_r`: Spearman between the means of two random halves of each prompt's samples;
      corrected to single-sample (`split_half_single`) and mean-of-k (`split_half_mean_k`) ceilings.
    """

    n_prompts: int
    k: float
    loo: MetricValue
    pairwise_r: MetricValue
    ceiling_single: MetricValue
    ceiling_mean_k: MetricValue
    split_half_r: MetricValue
    split_half_single: MetricValue
    split_half_mean_k: MetricValue
    extra: dict[str, Any] = field(default_factory=dict)
    # bootstrap-over-prompts CIs keyed like `as_dict` (ceiling_loo, ceiling_pairwise_r, ceiling_single,
    # ceiling_mean_k); empty unless noise_ceiling(n_boot > 0)
    ci: dict[str, tuple[MetricValue, MetricValue]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, MetricValue]:
        return {
            "ceiling_loo": self.loo,
            "ceiling_pairwise_r": self.pairwise_r,
            "ceiling_single": self.ceiling_single,
            "ceiling_mean_k": self.ceiling_mean_k,
            "ceiling_split_half_r": self.split_half_r,
            "ceiling_split_half_single": self.split_half_single,
            "ceiling_split_half_mean_k": self.split_half_mean_k,
        }


def noise_ceiling(
    samples: Sequence[Sequence[float]],
    *,
    k: float | None = None,
    n_splits: int = 20,
    max_pairs: int = 45,
    seed: int = 0,
    n_boot: int = 0,
    confidence: float = 0.95,
) -> NoiseCeiling:
    """Noise ceiling from per-prompt lists of sampled lengths (ragged allowed; prompts with < 2 samples
    are ignored). `k` is the number of samples averaged in the target (default: the median count)."""
    rows = [np.asarray(s, dtype=np.float64) for s in samples]
    rows = [r for r in rows if r.size >= 2]
    counts = np.array([r.size for r in rows])
    kk = float(k if k is not None else (np.median(counts) if rows else 1.0))
    if len(rows) < 3:
        return NoiseCeiling(len(rows), kk, *([UNDEFINED] * 7))
    rng = np.random.default_rng(seed)
    k_max = int(counts.max())

    # (1) leave-one-out: held-out sample j (prompts with > j samples) vs the mean of the others
    loo = []
    for j in range(k_max):
        have = counts > j
        if have.sum() < 3:
            break
        held = np.array([r[j] for r in rows if r.size > j])
        rest = np.array([(r.sum() - r[j]) / (r.size - 1) for r in rows if r.size > j])
        loo.append(spearman(held, rest))

    # (2) mean pairwise Spearman between sample positions a < b
    pairs = [(a, b) for a in range(k_max) for b in range(a + 1, k_max) if (counts > b).sum() >= 3]
    if len(pairs) > max_pairs:
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), max_pairs, replace=False))]
    pair_r = [
        spearman([r[a] for r in rows if r.size > b], [r[b] for r in rows if r.size > b]) for a, b in pairs
    ]
    r = _mean_defined(pair_r)

    # (3) split-half: each prompt's samples split at random into two halves, means correlated
    half_r = []
    for _ in range(n_splits):
        h1, h2 = [], []
        for row in rows:
            perm = rng.permutation(row)
            cut = row.size // 2
            h1.append(perm[:cut].mean())
            h2.append(perm[cut:].mean())
        half_r.append(spearman(h1, h2))
    rh = _mean_defined(half_r)
    half = float(np.median(counts)) / 2.0  # samples per half
    # inverse Spearman–Brown: reliability of one sample from that of a mean of `half` samples
    r1 = UNDEFINED if is_undefined(rh) or rh <= 0 else float(rh / (half - (half - 1.0) * rh))
    return NoiseCeiling(
        n_prompts=len(rows),
        k=kk,
        loo=_mean_defined(loo),
        pairwise_r=r,
        ceiling_single=_sqrt(r),
        ceiling_mean_k=_sqrt(spearman_brown(r, kk)),
        split_half_r=rh,
        split_half_single=_sqrt(r1),
        split_half_mean_k=_sqrt(spearman_brown(r1, kk)),
        extra={"n_pairs": len(pairs), "n_splits": n_splits},
        ci=_ceiling_ci(rows, kk, n_boot, seed, confidence, max_pairs) if n_boot > 0 else {},
    )


def _ceiling_ci(
    rows: list[np.ndarray], k: float, n_boot: int, seed: int, confidence: float, max_pairs: int
) -> dict[str, tuple[MetricValue, MetricValue]]:
    """Percentile CIs by resampling prompts, vectorised over replicates. Uses the rectangular part of the
    data (prompts with at least the median number of samples, their first that many samples)."""
    kc = int(np.median([r.size for r in rows]))
    S = np.array([r[:kc] for r in rows if r.size >= kc])  # [n, kc]
    if S.shape[0] < 3:
        return {}
    rng = np.random.default_rng(seed + 1)
    pairs = [(a, b) for a in range(kc) for b in range(a + 1, kc)]
    if len(pairs) > max_pairs:
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), max_pairs, replace=False))]
    sp = METRICS.get("spearman")
    reps: dict[str, list[np.ndarray]] = {"ceiling_pairwise_r": [], "ceiling_loo": []}
    for idx in _resample_blocks(S.shape[0], n_boot, seed + 1):
        B = S[idx]  # [b, n, kc]
        reps["ceiling_pairwise_r"].append(
            np.nanmean([sp.on_rows(B[:, :, a], B[:, :, c]) for a, c in pairs], axis=0)
        )
        rest = (B.sum(axis=2, keepdims=True) - B) / (kc - 1)  # mean of the other samples
        reps["ceiling_loo"].append(
            np.nanmean([sp.on_rows(B[:, :, j], rest[:, :, j]) for j in range(kc)], axis=0)
        )
    r = np.concatenate(reps["ceiling_pairwise_r"])
    with np.errstate(invalid="ignore"):
        rpos = np.where(r > 0, r, np.nan)
        draws = {
            "ceiling_pairwise_r": r,
            "ceiling_loo": np.concatenate(reps["ceiling_loo"]),
            "ceiling_single": np.sqrt(np.minimum(rpos, 1.0)),
            "ceiling_mean_k": np.sqrt(k * rpos / (1.0 + (k - 1.0) * rpos)),
        }
    return {name: _percentile_ci(v, confidence) for name, v in draws.items()}


def sign_flip_p(d: np.ndarray) -> float:
    """Two-sided p-value of mean(d) = 0 by the exact sign-flip permutation test (NaN with no finite pair)."""
    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return math.nan
    if len(d) < 2 or not np.any(d):  # one pair: both signs give the same |mean|, p = 1
        return 1.0
    n_res = np.inf if len(d) <= 20 else 100_000  # exact up to 2^20 sign patterns
    res = stats.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                                 permutation_type="samples", n_resamples=n_res, alternative="two-sided",
                                 random_state=0)
    return float(res.pvalue)
