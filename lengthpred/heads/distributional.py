"""Distributional readouts on the linear head's features: quantile regression and a censored log-normal.

Both standardise X, work on z = log1p(length) (quantiles are equivariant under the monotone transform, so
expm1 of a log-scale quantile is the length quantile), start from the linear head's ridge fit and keep its
ridge penalty (α chosen by prompt-grouped CV: a prompt's samples never score each other, lengthpred.ridge_select),
and return lengths in tokens from `predict`. Both take samples in long format: a prompt
with k sampled lengths is k rows of X (the same features) with k lengths; `censored` marks the samples
that hit the cap.

**quantile_linear** (`QuantileLinearHead`): one linear readout per level, fitted jointly by L-BFGS on a
smoothed pinball loss, ρ_τ(r) ≈ τ r + h·log(1 + e^{−r/h}) (h = `smoothing`, on the log scale), plus the
ridge penalty; crossing is removed by sorting each row's quantiles (Chernozhukov, Fernández-Val & Galichon
2010's rearrangement, which never raises the pinball loss). `predict` is the median. A capped sample
counts as the cap: the τ-quantile of min(L, C) is min(q_τ, C), so levels whose quantile lies below the
cap are still estimated consistently, and those above it come out at the cap (Powell's observation; a
fully censored quantile regression would fit min(xβ, C), a non-convex problem not attempted here).
sklearn's `QuantileRegressor` (an exact LP, L1 penalty) is the reference; on 1,500 × 577 features it is
too slow for a head fitted per pair and seed (see benchmarks/bench_dist.py).

**censored_lognormal** (`CensoredLogNormalHead`): a Tobit model on the log scale, log1p(L) ~ N(μ(x), σ(x)²)
with μ = xᵀw + b and log σ = c (`scale="shared"`) or xᵀv + c (`scale="linear"`). An uncapped sample adds
−log φ((z − μ)/σ) + log σ to the negative log-likelihood, a sample capped at C adds −log(1 − Φ((log1p C −
μ)/σ)): it only says L ≥ C. `censoring="ignore"` fits the same model with capped samples as if they were
exact (the "cap as value" fit every head uses today), for comparison. Fitted by scipy's L-BFGS-B with the
analytic gradient, from the naive ridge fit; the ridge penalty α|w|² is divided by 2σ₀² (σ₀: the naive
fit's residual spread), which makes the penalised least-squares and penalised likelihood agree when no
sample is censored. `predict` is E[min(L, cap_)] (`point="capped_mean"`: what a server stopping at the cap
generates, the quantity the per-prompt targets average), E[L] (`"mean"`) or the median (`"median"`).
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy import optimize, special, stats
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from lengthpred.distributions import LogNormal, QuantileGrid, check_quantiles
from lengthpred.heads.base import HEADS, BaseHead, HeadInputError, Points, check_targets
from lengthpred.heads.linear import DEFAULT_ALPHAS
from lengthpred.ridge_select import grouped_ridge_cv

DEFAULT_LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
_LOG_2PI = float(np.log(2 * np.pi))


def _censored_mask(censored: Any, n: int) -> np.ndarray:
    if censored is None:
        return np.zeros(n, dtype=bool)
    c = np.asarray(censored, dtype=bool).reshape(-1)
    if c.size != n:
        raise HeadInputError(f"censored has {c.size} entries for {n} rows")
    return c


class _LogReadout(BaseHead):
    """Shared: scaler, naive ridge start on log1p(y), persistence of the scaler."""

    input_kind = "features"
    predicts_distribution = True
    fits_samples = True  # trained on every sampled length (scripts/train.py too), a capped one censored

    def _start(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(standardised X, log1p y, ridge alpha, naive residual sd), after checking y ≥ 0."""
        if np.any(y < 0):
            raise HeadInputError("lengths must be >= 0")
        self.scaler_ = StandardScaler().fit(X)
        Z = self.scaler_.transform(X)
        z = np.log1p(y)
        alphas = [self.alpha] if self.alpha is not None else list(self.alphas)
        ridge = grouped_ridge_cv(alphas, X).fit(Z, z)  # by prompt: a prompt's samples share X
        self.alpha_ = float(ridge.alpha_)
        self._ridge = ridge
        resid = z - ridge.predict(Z)
        return Z, z, self.alpha_, float(max(resid.std(), 1e-3))

    def _scaler_state(self) -> dict[str, np.ndarray]:
        return {"scaler.mean": self.scaler_.mean_, "scaler.scale": self.scaler_.scale_}

    def _set_scaler(self, arrays: dict[str, np.ndarray], d: int) -> None:
        s = StandardScaler()
        s.mean_, s.scale_ = arrays["scaler.mean"], arrays["scaler.scale"]
        s.var_, s.n_features_in_, s.n_samples_seen_ = s.scale_**2, d, 0
        self.scaler_ = s
        self.n_features_in_ = d


@HEADS.register("quantile_linear")
class QuantileLinearHead(_LogReadout):
    """Linear quantile readouts of log1p(length) at `quantiles` (module docstring)."""

    name = "quantile_linear"
    _parameter_constraints: dict = {
        "quantiles": ["array-like"],
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "alphas": ["array-like"],
        "smoothing": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, *, quantiles: tuple[float, ...] | list[float] = DEFAULT_LEVELS, alpha: float | None = None,
                 alphas: tuple[float, ...] | list[float] = DEFAULT_ALPHAS, smoothing: float = 0.01,
                 max_iter: int = 500) -> None:
        self.quantiles = quantiles
        self.alpha = alpha
        self.alphas = alphas
        self.smoothing = smoothing
        self.max_iter = max_iter

    def fit(self, X: Any, y: Any, censored: Any = None) -> QuantileLinearHead:
        """censored is accepted for a common signature; capped samples count as the cap (docstring)."""
        self._validate_params()
        levels = check_quantiles(self.quantiles)
        X = validate_data(self, X, dtype=np.float64)
        y = check_targets(y, len(X))
        _censored_mask(censored, len(X))
        Z, z, alpha, sd0 = self._start(X, y)
        n, d = Z.shape
        m = levels.size
        pen = alpha / (2 * sd0)  # per level: pinball's gradient is ~1/(2σ) of least squares' at |r| ≈ σ
        h = float(self.smoothing)
        w0 = np.tile(self._ridge.coef_[:, None], (1, m))
        b0 = self._ridge.intercept_ + sd0 * stats.norm.ppf(levels)

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            W, b = theta[: d * m].reshape(d, m), theta[d * m:]
            r = z[:, None] - (Z @ W + b)  # [n, m]
            val = (levels * r + h * np.logaddexp(0.0, -r / h)).sum() + 0.5 * pen * (W**2).sum()
            g = levels - special.expit(-r / h)  # dρ/dr
            gW = -(Z.T @ g) + pen * W
            gb = -g.sum(axis=0)
            return float(val) / n, np.concatenate([gW.ravel(), gb]) / n

        res = optimize.minimize(loss, np.concatenate([w0.ravel(), b0]), jac=True, method="L-BFGS-B",
                                options={"maxiter": self.max_iter})
        self.coef_ = res.x[: d * m].reshape(d, m)
        self.intercept_ = res.x[d * m:]
        self.levels_ = levels
        self.n_iter_ = int(res.nit)
        del self._ridge
        return self

    def _log_quantiles(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.sort(self.scaler_.transform(X) @ self.coef_ + self.intercept_, axis=1)  # [n, m] rearranged

    def predict_dist(self, X: Any) -> QuantileGrid:
        values = np.maximum(np.expm1(self._log_quantiles(X)), 0.0)  # checks the head is fitted first
        return QuantileGrid(self.levels_, values)

    def predict(self, X: Any) -> np.ndarray:
        """The median (level 0.5, interpolated when not among `quantiles`)."""
        return self.predict_dist(X).quantile([0.5])[:, 0]

    def predict_points(self, X: Any) -> Points:
        """Median as `predict`; mean of the piecewise-linear quantile function (its tails as `QuantileGrid`)."""
        dist = self.predict_dist(X)
        median = dist.quantile([0.5])[:, 0]
        return Points(median, median, dist.mean())

    def _state(self):
        arrays = self._scaler_state() | {"coef": self.coef_, "intercept": self.intercept_, "levels": self.levels_}
        return arrays, {"n_features_in": self.n_features_in_, "alpha_": self.alpha_}

    def _set_state(self, arrays, meta, path):
        self._set_scaler(arrays, int(meta["n_features_in"]))
        self.coef_, self.intercept_, self.levels_ = arrays["coef"], arrays["intercept"], arrays["levels"]
        self.alpha_ = float(meta["alpha_"])

    @property
    def n_parameters(self) -> int:
        check_is_fitted(self)
        return int(self.coef_.size + self.intercept_.size)


@HEADS.register("censored_lognormal")
class CensoredLogNormalHead(_LogReadout):
    """Tobit readout: log1p(L) ~ N(xᵀw + b, σ²), capped samples right-censored (module docstring)."""

    name = "censored_lognormal"
    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "alphas": ["array-like"],
        "censoring": [StrOptions({"likelihood", "ignore"})],
        "scale": [StrOptions({"shared", "linear"})],
        "alpha_scale": [Interval(Real, 0, None, closed="neither")],
        "point": [StrOptions({"capped_mean", "mean", "median"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, *, alpha: float | None = None, alphas: tuple[float, ...] | list[float] = DEFAULT_ALPHAS,
                 censoring: str = "likelihood", scale: str = "shared", alpha_scale: float = 1e3,
                 point: str = "capped_mean", max_iter: int = 1000) -> None:
        self.alpha = alpha
        self.alphas = alphas
        self.censoring = censoring
        self.scale = scale
        self.alpha_scale = alpha_scale
        self.point = point
        self.max_iter = max_iter

    def fit(self, X: Any, y: Any, censored: Any = None) -> CensoredLogNormalHead:
        """X [N, d] (a row per sample), y [N] lengths (a capped one at the cap), censored [N] bool (None: none)."""
        self._validate_params()
        X = validate_data(self, X, dtype=np.float64)
        y = check_targets(y, len(X))
        cens = _censored_mask(censored, len(X))
        # the cap is the data's, whichever likelihood: the naive fit's point is E[min(L, cap)] too
        self.cap_ = float(y[cens].min()) if cens.any() else float("nan")
        if self.censoring == "ignore":
            cens = np.zeros_like(cens)
        Z, z, alpha, sd0 = self._start(X, y)
        n, d = Z.shape
        pen_w = alpha / sd0**2
        het = self.scale == "linear"
        k = d if het else 0
        obs = ~cens

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            w, b, v, c = theta[:d], theta[d], theta[d + 1: d + 1 + k], theta[d + 1 + k]
            mu = Z @ w + b
            s = (Z @ v + c) if het else np.full(n, c)
            sig = np.exp(s)
            r = (z - mu) / sig
            nll = np.where(obs, 0.5 * r**2 + s + 0.5 * _LOG_2PI, 0.0)
            dmu = np.where(obs, -r / sig, 0.0)
            ds = np.where(obs, 1.0 - r**2, 0.0)
            if cens.any():
                rc = r[cens]
                logsf = special.log_ndtr(-rc)
                mills = np.exp(-0.5 * rc**2 - 0.5 * _LOG_2PI - logsf)  # φ(r) / (1 − Φ(r))
                nll[cens] = -logsf
                dmu[cens] = -mills / sig[cens]
                ds[cens] = -mills * rc
            val = nll.sum() + 0.5 * pen_w * (w @ w) + (0.5 * self.alpha_scale * (v @ v) if het else 0.0)
            gw = Z.T @ dmu + pen_w * w
            parts = [gw, [dmu.sum()]]
            if het:
                parts.append(Z.T @ ds + self.alpha_scale * v)
            parts.append([ds.sum()])
            return float(val) / n, np.concatenate(parts) / n

        theta0 = np.concatenate([self._ridge.coef_, [self._ridge.intercept_], np.zeros(k), [np.log(sd0)]])
        res = optimize.minimize(loss, theta0, jac=True, method="L-BFGS-B", options={"maxiter": self.max_iter})
        th = res.x
        self.coef_, self.intercept_ = th[:d], float(th[d])
        self.scale_coef_ = th[d + 1: d + 1 + k]
        self.scale_intercept_ = float(th[d + 1 + k])
        self.n_iter_ = max(int(res.nit), 1)  # 0 when the ridge start is already optimal (nothing censored)
        self.converged_ = bool(res.success)
        del self._ridge
        return self

    def predict_dist(self, X: Any) -> LogNormal:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        Z = self.scaler_.transform(X)
        s = Z @ self.scale_coef_ + self.scale_intercept_ if self.scale_coef_.size else np.full(len(Z),
                                                                                                self.scale_intercept_)
        return LogNormal(Z @ self.coef_ + self.intercept_, np.exp(s))

    def predict(self, X: Any) -> np.ndarray:
        dist = self.predict_dist(X)
        if self.point == "median":
            return np.expm1(dist.mu)
        if self.point == "capped_mean" and np.isfinite(self.cap_):
            return dist.mean(cap=self.cap_)
        return dist.mean()

    def predict_points(self, X: Any) -> Points:
        """Median and mean of min(L, cap), what a capped target measures (of L where the data had no cap)."""
        dist = self.predict_dist(X)
        capped = np.isfinite(self.cap_)
        median = np.minimum(np.expm1(dist.mu), self.cap_) if capped else np.expm1(dist.mu)
        mean = dist.mean(cap=self.cap_) if capped else dist.mean()
        if self.point == "median":
            pred = np.expm1(dist.mu)
        else:
            pred = mean if self.point == "capped_mean" else dist.mean()
        return Points(pred, median, mean)

    def _state(self):
        arrays = self._scaler_state() | {"coef": self.coef_, "intercept": np.array([self.intercept_]),
                                         "scale_coef": self.scale_coef_,
                                         "scale_intercept": np.array([self.scale_intercept_])}
        return arrays, {"n_features_in": self.n_features_in_, "alpha_": self.alpha_,
                        "cap_": self.cap_ if np.isfinite(self.cap_) else None}

    def _set_state(self, arrays, meta, path):
        self._set_scaler(arrays, int(meta["n_features_in"]))
        self.coef_, self.intercept_ = arrays["coef"], float(arrays["intercept"][0])
        self.scale_coef_, self.scale_intercept_ = arrays["scale_coef"], float(arrays["scale_intercept"][0])
        self.alpha_ = float(meta["alpha_"])
        self.cap_ = float(meta["cap_"]) if meta.get("cap_") is not None else float("nan")

    @property
    def n_parameters(self) -> int:
        check_is_fitted(self)
        return int(self.coef_.size + 1 + self.scale_coef_.size + 1)


__all__ = ["CensoredLogNormalHead", "QuantileLinearHead"]
