"""RLS for the censored log-normal readout: a capped completion updates the readout with what it says.

Why not exact RLS: RLS is the exact recursion of a least-squares problem. The censored (Tobit) likelihood is
not quadratic in the weights, and neither is the pinball loss of a quantile readout, so neither has a
finite-state exact recursion; their offline fits need every past row (the quantile readout's subgradient
steps would be the online alternative, with a step size to tune and none of RLS's guarantees).

What this does instead: one step of EM per completion (stochastic EM; the Buckley–James imputation). The
readout models z = log1p(L) ~ N(θᵀx̃, σ²). An uncapped completion updates θ by the ordinary RLS step on z.
A completion capped at C (z ≥ c = log1p C) is replaced by its conditional mean under the current model,

    ẑ = μ + σ·λ(a),  a = (c − μ)/σ,  λ(a) = φ(a)/(1 − Φ(a))  (the inverse Mills ratio),

which always lies above the cap, and the same RLS step is taken on ẑ. σ² is tracked as a running mean of
the squared residual (for a capped one its conditional expectation σ²(1 + a·λ(a)) is used, with a decay of
1 − λ under forgetting λ < 1, else 1/n). Iterated to convergence over a fixed set of rows, EM reaches the
censored maximum-likelihood fit; online, each row is imputed once, with the parameters of its time. With no
capped completion it is exactly `RLSRegressor` (tested). `predict_dist` gives the log-normal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special

from lengthpred.distributions import LogNormal
from lengthpred.errors import DataError
from lengthpred.online.rls import RLSRegressor

_LOG_2PI = float(np.log(2 * np.pi))


def inverse_mills(a: np.ndarray | float) -> np.ndarray:
    """φ(a) / (1 − Φ(a)), computed in logs (finite for large a, where it tends to a)."""
    a = np.asarray(a, dtype=np.float64)
    return np.exp(-0.5 * a**2 - 0.5 * _LOG_2PI - special.log_ndtr(-a))


class CensoredRLS(RLSRegressor):
    """RLS on log1p(length) where a capped completion counts as its conditional mean above the cap."""

    def fit(self, X: np.ndarray, y: np.ndarray, censored: Any = None) -> CensoredRLS:
        """Offline ridge on log1p(y) (capped rows as the cap), σ from its residuals; prefer
        `from_censored_head`, which starts from the censored likelihood's fit."""
        super().fit(X, y)
        resid = np.log1p(np.asarray(y, dtype=np.float64)) - self.predict_log(X)
        self.sigma_ = float(max(resid.std(), 1e-3))
        self.n_censored_ = 0
        return self

    @classmethod
    def from_censored_head(cls, head: Any, X: np.ndarray, **params: Any) -> CensoredRLS:
        """Warm start from a fitted `censored_lognormal` head (shared σ): its scaler, weights, σ and ridge
        alpha; P₀ from X, the feature rows it was fitted on."""
        if getattr(head, "scale_coef_", np.zeros(0)).size:
            raise DataError("CensoredRLS continues a censored_lognormal head with scale='shared' only")
        est = cls.from_linear_head(_AsLinear(head), X, **params)
        est.sigma_ = float(np.exp(head.scale_intercept_))
        est.n_censored_ = 0
        return est

    def partial_fit(self, X: np.ndarray, y: Any, censored: Any = None) -> CensoredRLS:
        """One step per row; `censored[i]` marks a length that hit the cap (y[i] is the cap)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        y_arr = np.atleast_1d(np.asarray(y, dtype=np.float64))
        cens = np.zeros(len(y_arr), dtype=bool) if censored is None else np.atleast_1d(np.asarray(censored, bool))
        if len(cens) != len(y_arr):
            raise DataError(f"censored has {len(cens)} entries for {len(y_arr)} lengths")
        if not hasattr(self, "theta_"):
            return self.fit(X, y_arr, cens)
        for k in range(len(X)):
            row, t = X[k:k + 1], y_arr[k:k + 1]
            if not self._valid_rows(row, t, self.n_features_in_).all():
                super().partial_fit(row, t)  # counted and logged as rejected by the parent
                continue
            mu = float(self.predict_log(row)[0])
            z = float(np.log1p(t[0]))
            if cens[k]:
                a = (z - mu) / self.sigma_
                lam = float(inverse_mills(a))
                target, sq = mu + self.sigma_ * lam, self.sigma_**2 * (1.0 + a * lam)
                self.n_censored_ += 1
            else:
                target, sq = z, (z - mu) ** 2
            w = (1.0 - float(self.forgetting)) if self.forgetting < 1 else 1.0 / (self.n_samples_seen_ + 1)
            self.sigma_ = float(np.sqrt(max((1 - w) * self.sigma_**2 + w * sq, 1e-6)))
            super().partial_fit(row, np.expm1(np.array([target])))
        return self

    def predict_dist(self, X: np.ndarray) -> LogNormal:
        return LogNormal(self.predict_log(X), self.sigma_)


class _AsLinear:
    """A censored head seen through the attributes `RLSRegressor.from_linear_head` reads."""

    target = "log1p"
    log_features = False

    def __init__(self, head: Any) -> None:
        self.alpha_, self.scaler_ = head.alpha_, head.scaler_
        self.coef_, self.intercept_ = head.coef_, head.intercept_


__all__ = ["CensoredRLS", "inverse_mills"]
