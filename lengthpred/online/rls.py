"""Recursive least squares on the ridge readout: warm-started from the offline fit, updated per completion.

Space: the offline `linear` head's (StandardScaler → Ridge(alpha) on log1p(length)). The scaler is fitted
once, in `fit`, and frozen; updates live in that standardised space with a log1p target.

Intercept: an augmented column of ones with *no* penalty. Ridge with an unpenalised intercept is exactly
sklearn's `Ridge(fit_intercept=True)` (which centres X and y), so with forgetting 1 the state after
`fit(A).partial_fit(B)` is the ridge solution on A∪B in A's standardised space:
    z = [x_std, 1],  P₀ = (ZᵀZ + diag(α,…,α,0))⁻¹,  θ₀ = P₀ Zᵀ log1p(y).

Targets: one rule for `fit` and `partial_fit`: a length must be finite and >= 0 (an answer that ends at
once is a real 0-token length; log1p(0) = 0). Prediction is expm1 of the log1p-scale readout, the length
at the centre of the log-scale errors; unlike the offline `linear` head's default it has no smearing
factor (lengthpred.heads.smearing), since the residual distribution moves with every update.

Storage: P = c·M with only M's upper triangle kept current (BLAS `dsymv`/`dsyr`), so P is symmetric by
construction, an update costs about one and a half passes over a d×d matrix, and the division by λ is a
scalar (`c ← c/λ`) instead of a pass. Blow-up guard: when trace(P) exceeds `trace_cap`·trace(P₀) (the
"wind-up" of unexcited directions under λ < 1), P is scaled back to that trace; a non-finite or
non-positive diagonal resets P to P₀'s mean variance times the identity (counted in `resets_`).
"""

from __future__ import annotations

import json
import logging
import numbers
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file
from scipy.linalg import cho_solve, lapack

from lengthpred.errors import ConfigError, DataError
from lengthpred.integrity import save_tensors
from lengthpred.online import _blas

log = logging.getLogger(__name__)

_C_RENORM = 1e50  # fold the scalar c back into M before it can overflow under λ < 1


def _upper_to_full(m: np.ndarray) -> np.ndarray:
    u = np.triu(m)
    return u + np.triu(u, 1).T


class RLSRegressor:
    """Ridge readout on log1p(length) updated online by recursive least squares with forgetting.

    `fit(X, y)` is the offline ridge fit (and resets state); `partial_fit(X, y)` applies one RLS step per
    valid row, in order. Rows with a missing, non-finite or negative length, non-finite features, or a
    wrong feature count are skipped and counted in `rejected_` (state unchanged for them); a length of 0
    is valid, as in `fit`.
    """

    _keeps_P = True  # baselines that never use P skip its O(d³) inverse

    def __init__(
        self, alpha: float = 1.0, *, forgetting: float = 1.0, trace_cap: float | None = 10.0
    ) -> None:
        self.alpha = alpha
        self.forgetting = forgetting
        self.trace_cap = trace_cap

    # -- sklearn protocol -------------------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"alpha": self.alpha, "forgetting": self.forgetting, "trace_cap": self.trace_cap}

    def set_params(self, **params: Any) -> RLSRegressor:
        for k, v in params.items():
            if k not in self.get_params():
                raise ConfigError(f"RLSRegressor has no parameter {k!r}; valid: {sorted(self.get_params())}")
            setattr(self, k, v)
        return self

    def _validate_params(self) -> None:
        lam = self.forgetting
        if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not (0.0 < float(lam) <= 1.0):
            raise ConfigError(f"online forgetting factor λ={lam!r} must be in (0, 1]")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, numbers.Real) or not self.alpha > 0:
            raise ConfigError(f"ridge alpha={self.alpha!r} must be > 0")
        if self.trace_cap is not None and not float(self.trace_cap) >= 1.0:
            raise ConfigError(f"trace_cap={self.trace_cap!r} must be >= 1 (a multiple of trace(P0)) or null")

    def fit(self, X: np.ndarray, y: np.ndarray) -> RLSRegressor:
        self._validate_params()
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or y.ndim != 1 or len(X) != len(y) or len(X) == 0:
            raise DataError(f"fit needs X [n, d] and y [n] with n >= 1; got {X.shape} and {y.shape}")
        if not (np.isfinite(X).all() and np.isfinite(y).all() and (y >= 0).all()):
            raise DataError("fit: X and y must be finite and every length >= 0")
        n, d = X.shape
        self.mean_ = X.mean(axis=0)
        scale = X.std(axis=0)
        scale[scale < 10 * np.finfo(np.float64).eps] = 1.0  # as StandardScaler: constant columns kept at 1
        self.scale_ = scale
        Z = self._augment(X)  # [n, d+1]
        G = Z.T @ Z
        G[np.arange(d), np.arange(d)] += float(self.alpha)
        # G is SPD (the ones column has n > 0, the others +α): Cholesky, then P from it (upper triangle)
        c, info = lapack.dpotrf(G, lower=0)
        if info != 0:
            raise DataError(f"ridge Gram matrix is not positive definite (LAPACK info={info})")
        self.theta_ = cho_solve((c, False), Z.T @ np.log1p(y))
        self._c = 1.0
        self._M = None
        if self._keeps_P:
            Pu, info = lapack.dpotri(c, lower=0)  # upper triangle of G⁻¹: all the symmetric kernels read
            self._M = np.asfortranarray(np.triu(Pu))
            self.trace0_ = float(np.trace(Pu))
        self.n_features_in_ = d
        self.n_samples_seen_ = n
        self.n_updates_ = 0
        self.rejected_ = 0
        self.resets_ = 0
        return self

    @classmethod
    def from_linear_head(cls, head: Any, X: np.ndarray, **params: Any) -> RLSRegressor:
        """Warm start from a fitted `linear` head (lengthpred.heads): its scaler, alpha and weights;
        P₀ from X, the rows it was fitted on. Equals `cls(alpha=head.alpha_).fit(X, y)` (tested). The
        head's smearing factor is not carried over: RLS predicts expm1 of the readout (module docstring)."""
        if getattr(head, "target", "log1p") != "log1p" or getattr(head, "log_features", False):
            raise ConfigError("RLS continues a linear head with target='log1p' and log_features=False only")
        est = cls(alpha=float(head.alpha_), **params)
        est._validate_params()
        X = np.asarray(X, dtype=np.float64)
        scaler = head.scaler_
        est.mean_ = np.asarray(scaler.mean_, dtype=np.float64)
        est.scale_ = np.asarray(scaler.scale_, dtype=np.float64)
        Z = est._augment(X)
        d = X.shape[1]
        G = Z.T @ Z
        G[np.arange(d), np.arange(d)] += est.alpha
        c, info = lapack.dpotrf(G, lower=0)
        if info != 0:
            raise DataError(f"ridge Gram matrix is not positive definite (LAPACK info={info})")
        est.theta_ = np.r_[np.asarray(head.coef_, dtype=np.float64), float(head.intercept_)]
        Pu, _ = lapack.dpotri(c, lower=0)
        est._M, est._c, est.trace0_ = np.asfortranarray(np.triu(Pu)), 1.0, float(np.trace(Pu))
        est.n_features_in_, est.n_samples_seen_ = d, len(X)
        est.n_updates_ = est.rejected_ = est.resets_ = 0
        return est

    def _augment(self, X: np.ndarray) -> np.ndarray:
        Xs = (X - self.mean_) / self.scale_
        return np.hstack([Xs, np.ones((len(Xs), 1))])

    def _check_fitted(self) -> None:
        if not hasattr(self, "theta_"):
            raise DataError("RLSRegressor is not fitted: call fit(X, y) first")

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1] != self.n_features_in_:
            raise DataError(f"predict: X has {X.shape[1]} features, fitted with {self.n_features_in_}")
        return ((X - self.mean_) / self.scale_) @ self.theta_[:-1] + self.theta_[-1]

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted output length in tokens (≥ 0)."""
        return np.maximum(np.expm1(self.predict_log(X)), 0.0)

    def partial_fit(self, X: np.ndarray, y: np.ndarray | float | None) -> RLSRegressor:
        """One RLS step per valid row; before any `fit`, the first batch is an offline fit."""
        self._validate_params()
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        y_arr = np.full(len(X), np.nan) if y is None else np.atleast_1d(np.asarray(y, dtype=np.float64))
        if not hasattr(self, "theta_"):
            ok = self._valid_rows(X, y_arr, X.shape[1])
            if not ok.any():
                raise DataError("partial_fit on an unfitted RLSRegressor needs at least one valid row")
            self.fit(X[ok], y_arr[ok])
            self.rejected_ = int((~ok).sum())
            return self
        ok = self._valid_rows(X, y_arr, self.n_features_in_)
        self.n_rejected_last_ = int((~ok).sum())
        if self.n_rejected_last_:
            self.rejected_ += self.n_rejected_last_
            log.warning(
                "RLS: rejected %d of %d rows (bad length, size or NaN)", self.n_rejected_last_, len(X)
            )
        if ok.any():
            Z = self._augment(X[ok])
            for z_row, t in zip(Z, np.log1p(y_arr[ok]), strict=True):
                self._step(np.ascontiguousarray(z_row), float(t))
        return self

    def _valid_rows(self, X: np.ndarray, y: np.ndarray, d: int) -> np.ndarray:
        if X.ndim != 2 or X.shape[1] != d or len(y) != len(X):
            return np.zeros(max(len(X), len(y)), dtype=bool)
        return np.isfinite(X).all(axis=1) & np.isfinite(y) & (y >= 0)  # the same rule as fit

    def _step(self, z: np.ndarray, t: float) -> None:
        lam = float(self.forgetting)
        u = self._c * _blas.symv(self._M, z)  # P z
        s = lam + float(z @ u)
        if not (np.isfinite(s) and s > 0):
            self._reset_P()
            return
        err = t - float(self.theta_ @ z)
        self.theta_ += (err / s) * u
        # P ← (P − u uᵀ/s)/λ  with P = cM:  M ← M − u uᵀ/(c s),  c ← c/λ
        self._M = _blas.syr(-1.0 / (self._c * s), u, self._M)
        self._c /= lam
        self.n_samples_seen_ += 1
        self.n_updates_ += 1
        self._guard()

    def _guard(self) -> None:
        diag = self._M.diagonal()
        if not (np.isfinite(diag).all() and (diag > 0).all()):
            self._reset_P()
            return
        if self._c > _C_RENORM:
            self._M *= self._c
            self._c = 1.0
        if self.trace_cap is not None and self.forgetting < 1.0:
            tr = self._c * float(diag.sum())
            cap = float(self.trace_cap) * self.trace0_
            if tr > cap:
                self._c *= cap / tr

    def _reset_P(self) -> None:
        d1 = self.n_features_in_ + 1
        self._M = np.asfortranarray(np.eye(d1) * (self.trace0_ / d1))
        self._c = 1.0
        self.resets_ += 1
        log.warning(
            "RLS: P lost positive definiteness; reset to the prior's mean variance (reset %d)", self.resets_
        )

    # -- learned attributes -----------------------------------------------------------------------------
    @property
    def coef_(self) -> np.ndarray:
        """Weights in the standardised feature space (those of the offline linear head's Ridge)."""
        self._check_fitted()
        return self.theta_[:-1].copy()

    @property
    def intercept_(self) -> float:
        self._check_fitted()
        return float(self.theta_[-1])

    @property
    def P_(self) -> np.ndarray:
        """Inverse regularised Gram matrix [d+1, d+1] (last row/column: the intercept)."""
        self._check_fitted()
        if self._M is None:
            raise DataError(f"{type(self).__name__} keeps no P (only RLS does)")
        return self._c * _upper_to_full(self._M)

    @property
    def n_parameters(self) -> int:
        return int(self.n_features_in_ + 1)

    # -- persistence --------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        self._check_fitted()
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        arrays = {"theta": self.theta_, "mean": self.mean_, "scale": self.scale_}
        if self._M is not None:
            arrays["P"] = self.P_
        save_tensors(save_file, arrays, out / "rls.safetensors")
        meta = {
            "class": "RLSRegressor",
            "params": self.get_params(),
            "n_features_in": self.n_features_in_,
            "n_samples_seen": self.n_samples_seen_,
            "n_updates": self.n_updates_,
            "rejected": self.rejected_,
            "resets": self.resets_,
            "trace0": getattr(self, "trace0_", None),
        }
        (out / "rls.json").write_text(json.dumps(meta, indent=2))
        return out

    @classmethod
    def load(cls, directory: str | Path) -> RLSRegressor:
        d = Path(directory)
        if not (d / "rls.json").exists() or not (d / "rls.safetensors").exists():
            raise DataError(f"{d} holds no saved RLS head (rls.json + rls.safetensors)")
        meta = json.loads((d / "rls.json").read_text())
        t = load_file(str(d / "rls.safetensors"))
        est = cls(**meta["params"])
        est.theta_ = t["theta"].astype(np.float64)
        est._M = np.asfortranarray(np.triu(t["P"].astype(np.float64))) if "P" in t else None
        est._c = 1.0
        est.mean_, est.scale_ = t["mean"], t["scale"]
        est.n_features_in_ = int(meta["n_features_in"])
        est.n_samples_seen_ = int(meta["n_samples_seen"])
        est.n_updates_ = int(meta["n_updates"])
        est.rejected_ = int(meta["rejected"])
        est.resets_ = int(meta["resets"])
        if meta["trace0"] is not None:
            est.trace0_ = float(meta["trace0"])
        return est
