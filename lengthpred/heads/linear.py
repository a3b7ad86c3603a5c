"""LEAP's linear readout (standardised features → ridge on log1p(length)) and the prompt-length baseline.

Both are sklearn's `TransformedTargetRegressor(Pipeline([..., StandardScaler, Ridge]))`. Saving keeps only
the numbers (scaler mean/scale, ridge coef/intercept/alpha, smearing factor) and `load` rebuilds the
sklearn objects.

Back-transform (target="log1p"): `back_transform="mean"` (default) predicts the expected length with
Duan's smearing estimator, ŷ = S · exp(ẑ) − 1, S = mean of exp(leave-one-out residual) on the training
rows (lengthpred.heads.smearing); "median" predicts expm1(ẑ), the length at the centre of the log-scale
errors (lower MAE on skewed lengths, but biased low as an expected length). Whichever is configured,
`predict_points` gives both (`mean_smearing_` is Duan's S for either setting). The RLS head
(lengthpred.online.rls) continues the readout with the plain expm1.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from lengthpred.heads.base import HEADS, BaseHead, HeadInputError, Points, check_targets
from lengthpred.heads.smearing import ridge_loo_residuals, smeared_expm1, smearing_factor
from lengthpred.ridge_select import grouped_ridge_cv

DEFAULT_ALPHAS = (0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def log1p_nonneg(X: np.ndarray) -> np.ndarray:
    """log1p of counts; negatives (impossible for token counts) are clipped to 0 rather than NaN."""
    return np.log1p(np.maximum(X, 0.0))


@HEADS.register("linear")
class LinearHead(BaseHead):
    """Ridge readout on one pooled feature.

    alpha: ridge strength; None picks it from `alphas` by efficient leave-one-out CV on the training
    set (RidgeCV), by prompt-grouped CV where rows repeat a prompt's features (long format;
    lengthpred.ridge_select). `scripts/train.py` instead selects it on the validation split (`select:` in the
    head config). target: "log1p" fits log1p(length) and predicts expm1 (lengths must be ≥ 0);
    "raw" fits tokens directly. log_features: apply log1p to X first (the prompt-length baseline).
    back_transform: "mean" (smearing, `smearing_` = S) or "median" (expm1, S = 1); module docstring.
    """

    name = "linear"
    input_kind = "features"
    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "alphas": ["array-like"],
        "target": [StrOptions({"log1p", "raw"})],
        "log_features": ["boolean"],
        "back_transform": [StrOptions({"mean", "median"})],
    }

    def __init__(
        self,
        *,
        alpha: float | None = None,
        alphas: tuple[float, ...] | list[float] = DEFAULT_ALPHAS,
        target: str = "log1p",
        log_features: bool = False,
        back_transform: str = "mean",
    ) -> None:
        self.alpha = alpha
        self.alphas = alphas
        self.target = target
        self.log_features = log_features
        self.back_transform = back_transform

    def _pipeline(
        self, ridge: Ridge | RidgeCV, scaler: StandardScaler | None = None
    ) -> TransformedTargetRegressor:
        steps: list[tuple[str, Any]] = []
        if self.log_features:
            steps.append(("log1p", FunctionTransformer(log1p_nonneg)))
        steps += [("scale", scaler or StandardScaler()), ("ridge", ridge)]
        if self.target == "log1p":
            return TransformedTargetRegressor(Pipeline(steps), func=np.log1p, inverse_func=np.expm1)
        return TransformedTargetRegressor(Pipeline(steps))

    def fit(self, X: Any, y: Any) -> LinearHead:
        self._validate_params()
        X = validate_data(self, X, dtype=np.float64)
        y = check_targets(y, len(X))
        if self.target == "log1p" and np.any(y < 0):
            raise HeadInputError("target='log1p' needs lengths >= 0; use target='raw' for signed targets")
        ridge = Ridge(alpha=self.alpha) if self.alpha is not None else grouped_ridge_cv(self.alphas, X)
        self.model_ = self._pipeline(ridge).fit(X, y)
        fitted = self.model_.regressor_.named_steps["ridge"]
        self.alpha_ = float(self.alpha if self.alpha is not None else fitted.alpha_)
        self.coef_ = np.asarray(fitted.coef_, dtype=np.float64)
        self.intercept_ = float(fitted.intercept_)
        self.mean_smearing_ = self._smearing(X, y)
        # what `predict` applies; predict_points' mean always uses mean_smearing_
        self.smearing_ = self.mean_smearing_ if self.back_transform == "mean" else 1.0
        return self

    def _smearing(self, X: np.ndarray, y: np.ndarray) -> float:
        """Duan's S on the ridge's exact leave-one-out log residuals (1.0 for a raw target)."""
        if self.target != "log1p":
            return 1.0
        Z = self.model_.regressor_[:-1].transform(X)  # what the ridge saw: [log1p →] scaler
        resid = np.log1p(y) - (Z @ self.coef_ + self.intercept_)
        return smearing_factor(ridge_loo_residuals(Z, resid, self.alpha_))

    def predict(self, X: Any) -> np.ndarray:
        return self.predict_points(X).pred

    def predict_points(self, X: Any) -> Points:
        """log1p target: median expm1(ẑ), mean S · exp(ẑ) − 1 (None for a head saved without its S).
        Raw target: the ridge estimates the mean; it has no median."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if self.target != "log1p":
            raw = np.asarray(self.model_.predict(X), dtype=np.float64)
            return Points(raw, None, raw)
        z = self.model_.regressor_.predict(X)  # log1p scale
        mean = smeared_expm1(z, self.mean_smearing_) if math.isfinite(self.mean_smearing_) else None
        return Points(smeared_expm1(z, self.smearing_), np.expm1(z), mean)

    # The readout in the standardised space is what RLS (online adaptation) continues from.
    @property
    def scaler_(self) -> StandardScaler:
        check_is_fitted(self)
        return self.model_.regressor_.named_steps["scale"]

    def _state(self):
        s = self.scaler_
        arrays = {
            "scaler.mean": s.mean_,
            "scaler.scale": s.scale_,
            "ridge.coef": self.coef_,
            "ridge.intercept": np.array([self.intercept_]),
        }
        meta = {"alpha_": self.alpha_, "n_features_in": self.n_features_in_, "smearing": self.smearing_}
        meta["mean_smearing"] = self.mean_smearing_ if math.isfinite(self.mean_smearing_) else None
        return arrays, meta

    def _set_state(self, arrays, meta, path):
        d = int(meta["n_features_in"])
        scaler = StandardScaler()
        scaler.mean_, scaler.scale_ = arrays["scaler.mean"], arrays["scaler.scale"]
        scaler.var_ = scaler.scale_**2
        scaler.n_features_in_, scaler.n_samples_seen_ = d, 0
        ridge = Ridge(alpha=meta["alpha_"])
        ridge.coef_, ridge.intercept_, ridge.n_features_in_ = (
            arrays["ridge.coef"],
            float(arrays["ridge.intercept"][0]),
            d,
        )
        model = self._pipeline(ridge, scaler)
        if self.log_features:
            model.regressor.named_steps["log1p"].fit(np.zeros((1, d)))
        model.regressor_ = model.regressor
        model._fit_transformer(np.ones((2, 1)))
        model._training_dim = 1
        self.model_ = model
        self.alpha_, self.coef_, self.intercept_ = float(meta["alpha_"]), ridge.coef_, ridge.intercept_
        self.smearing_ = float(meta.get("smearing", 1.0))  # heads saved before smearing predicted expm1
        self.mean_smearing_ = self._saved_mean_smearing(meta)
        self.n_features_in_ = d

    def _saved_mean_smearing(self, meta: dict[str, Any]) -> float:
        """S of a saved head; NaN (no mean) where it was not kept: saved before smearing, or with
        back_transform="median" before `mean_smearing` was saved (those stored the S they applied, 1)."""
        if meta.get("mean_smearing") is not None:
            return float(meta["mean_smearing"])
        if self.target != "log1p":
            return 1.0
        if "smearing" in meta and self.back_transform == "mean" and "mean_smearing" not in meta:
            return float(meta["smearing"])
        return math.nan

    @property
    def n_parameters(self) -> int:
        """Readout weights + bias (the scaler is a fixed affine map folded into them)."""
        check_is_fitted(self)
        return int(self.coef_.size + 1)


@HEADS.register("prompt_len")
class PromptLenHead(LinearHead):
    """Regression of log1p(length) on log1p(prompt tokens): the baseline of "long in, long out"."""

    name = "prompt_len"
    input_kind = "n_prompt_tokens"

    def __init__(
        self,
        *,
        alpha: float | None = 1e-3,
        alphas: tuple[float, ...] | list[float] = DEFAULT_ALPHAS,
        target: str = "log1p",
        log_features: bool = True,
        back_transform: str = "mean",
    ) -> None:
        super().__init__(
            alpha=alpha, alphas=alphas, target=target, log_features=log_features, back_transform=back_transform
        )
