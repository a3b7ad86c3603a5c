"""Concatenated-layers readout: several layers' pooled states side by side → standardise → PCA → ridge.

X is `len(layers)` equal-width blocks, one per layer in `layers` order (the train stage stacks
`hs.L<l>.<pooling>` for each layer of the head config's `layers`, each layer's poolings side by side);
`use` picks the blocks the readout reads, so a set of layers is a constructor keyword that `select:` can
choose on validation like α and `n_components`. The target and back-transform are LinearHead's (ridge on
log1p(length), Duan smearing from the ridge's leave-one-out residuals in the PCA space).

The fitted map is linear in the chosen columns, so it is stored folded (one weight per column + a bias):
`n_parameters` counts those, as LinearHead's count folds its scaler.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.decomposition import PCA
from sklearn.linear_model import Ridge
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from lengthpred.heads.base import HEADS, BaseHead, HeadInputError, Points, check_targets
from lengthpred.heads.linear import DEFAULT_ALPHAS
from lengthpred.heads.smearing import ridge_loo_residuals, smeared_expm1, smearing_factor
from lengthpred.ridge_select import grouped_ridge_cv


def block_columns(width: int, layers: list[int] | None, use: list[int] | None) -> np.ndarray:
    """Column indices of the `use` layers in an X of `width` columns holding one equal block per layer of
    `layers` (None: X is one block, all of it read); a HeadInputError when they do not fit."""
    if layers is None:
        if use is not None:
            raise HeadInputError("`use` picks among `layers`: set `layers` (the blocks of X) too")
        return np.arange(width)
    layers = [int(v) for v in layers]
    if not layers or len(set(layers)) != len(layers):
        raise HeadInputError(f"layers={layers}: need distinct layers, at least one")
    if width % len(layers):
        raise HeadInputError(f"X has {width} columns: not {len(layers)} equal blocks (layers={layers})")
    wanted = set(layers) if use is None else {int(v) for v in use}
    if not wanted or not wanted <= set(layers):
        raise HeadInputError(f"use={use}: must be a non-empty subset of layers={layers}")
    chosen = [v for v in layers if v in wanted]
    w = width // len(layers)
    return np.concatenate([np.arange(layers.index(v) * w, (layers.index(v) + 1) * w) for v in chosen])


@HEADS.register("concat")
class ConcatLinearHead(BaseHead):
    """Ridge on the top principal components of several standardised layers (module docstring).

    layers: the layers of X's blocks, in order (None: X is one block); use: the layers read (None: all);
    n_components: PCA dimensions (capped at min(n_train, columns) and reported as `n_components_`; None:
    no PCA); alpha: ridge strength (None: RidgeCV over `alphas` by leave-one-out on train); target,
    back_transform: as LinearHead.
    """

    name = "concat"
    input_kind = "features"
    _parameter_constraints: dict = {
        "layers": ["array-like", None],
        "use": ["array-like", None],
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "alphas": ["array-like"],
        "target": [StrOptions({"log1p", "raw"})],
        "back_transform": [StrOptions({"mean", "median"})],
    }

    def __init__(
        self,
        *,
        layers: list[int] | None = None,
        use: list[int] | None = None,
        n_components: int | None = 64,
        alpha: float | None = None,
        alphas: tuple[float, ...] | list[float] = DEFAULT_ALPHAS,
        target: str = "log1p",
        back_transform: str = "mean",
    ) -> None:
        self.layers = layers
        self.use = use
        self.n_components = n_components
        self.alpha = alpha
        self.alphas = alphas
        self.target = target
        self.back_transform = back_transform

    def fit(self, X: Any, y: Any) -> ConcatLinearHead:
        self._validate_params()
        X = validate_data(self, X, dtype=np.float64)
        y = check_targets(y, len(X))
        if self.target == "log1p" and np.any(y < 0):
            raise HeadInputError("target='log1p' needs lengths >= 0; use target='raw' for signed targets")
        cols = block_columns(X.shape[1], self.layers, self.use)
        Xs = X[:, cols]
        scaler = StandardScaler().fit(Xs)
        Z = scaler.transform(Xs)
        k = None if self.n_components is None else min(int(self.n_components), *Z.shape)
        pca = PCA(n_components=k, random_state=0).fit(Z) if k else None
        P = pca.transform(Z) if pca is not None else Z
        t = np.log1p(y) if self.target == "log1p" else y
        ridge = Ridge(alpha=self.alpha) if self.alpha is not None else grouped_ridge_cv(self.alphas, Xs)
        ridge.fit(P, t)
        self.alpha_ = float(self.alpha if self.alpha is not None else ridge.alpha_)
        self.n_components_ = int(P.shape[1]) if pca is not None else None
        # fold scaler → PCA → ridge into one linear map of the chosen columns
        w_z = pca.components_.T @ ridge.coef_ if pca is not None else ridge.coef_
        b = float(ridge.intercept_) - (float(pca.mean_ @ w_z) if pca is not None else 0.0)
        self.columns_ = cols
        self.coef_ = w_z / scaler.scale_
        self.intercept_ = b - float(scaler.mean_ @ self.coef_)
        self.mean_smearing_ = 1.0
        if self.target == "log1p":
            resid = t - ridge.predict(P)
            self.mean_smearing_ = smearing_factor(ridge_loo_residuals(P, resid, self.alpha_))
        # what `predict` applies; predict_points' mean always uses mean_smearing_ (as LinearHead)
        self.smearing_ = self.mean_smearing_ if self.back_transform == "mean" else 1.0
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self.predict_points(X).pred

    def predict_points(self, X: Any) -> Points:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        z = X[:, self.columns_] @ self.coef_ + self.intercept_
        if self.target != "log1p":
            return Points(z, None, z)
        return Points(smeared_expm1(z, self.smearing_), np.expm1(z), smeared_expm1(z, self.mean_smearing_))

    def _state(self):
        arrays = {
            "columns": self.columns_.astype(np.int64),
            "coef": self.coef_,
            "intercept": np.array([self.intercept_]),
        }
        meta = {
            "alpha_": self.alpha_,
            "n_components_": self.n_components_,
            "n_features_in": self.n_features_in_,
            "smearing": self.smearing_,
            "mean_smearing": self.mean_smearing_,
        }
        return arrays, meta

    def _set_state(self, arrays, meta, path):
        self.columns_ = np.asarray(arrays["columns"], dtype=np.int64)
        self.coef_ = np.asarray(arrays["coef"], dtype=np.float64)
        self.intercept_ = float(arrays["intercept"][0])
        self.alpha_, self.n_components_ = float(meta["alpha_"]), meta["n_components_"]
        self.smearing_, self.n_features_in_ = float(meta["smearing"]), int(meta["n_features_in"])
        self.mean_smearing_ = float(meta.get("mean_smearing", self.smearing_))

    @property
    def n_parameters(self) -> int:
        """One folded weight per column read + the bias."""
        check_is_fitted(self)
        return int(self.coef_.size + 1)
