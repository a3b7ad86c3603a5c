"""Baselines any claim must beat: the train median, and the median of the prompt's domain.

Both predict a median; `predict_points` also gives the matching mean (of train, of the domain's train rows).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.utils.validation import _num_samples, check_is_fitted, validate_data

from lengthpred.heads.base import HEADS, BaseHead, Points, check_targets


@HEADS.register("constant")
class ConstantHead(BaseHead):
    """Predicts the training median for every prompt (X is only counted)."""

    name = "constant"
    input_kind = "ids"

    def __init__(self) -> None:
        pass

    def fit(self, X: Any, y: Any) -> ConstantHead:
        validate_data(self, X, skip_check_array=True)
        y = check_targets(y, _num_samples(X))
        if len(y) == 0:
            raise ValueError("y must not be empty")
        self.constant_ = float(np.median(y))
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return np.full(_num_samples(X), self.constant_, dtype=np.float64)

    def predict_points(self, X: Any) -> Points:
        """Median and mean of the training lengths (no mean for a head saved before it was kept)."""
        pred = self.predict(X)
        mean = np.full(len(pred), self.mean_) if math.isfinite(self.mean_) else None
        return Points(pred, pred, mean)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        tags.input_tags.sparse = True
        tags.no_validation = True
        return tags

    def _state(self):
        return {"constant": np.array([self.constant_]), "mean": np.array([self.mean_])}, {
            "n_features_in": getattr(self, "n_features_in_", None)
        }

    @property
    def n_parameters(self) -> int:
        """The one number `predict` uses (the mean is an alternative point, not an extra input)."""
        check_is_fitted(self)
        return 1

    def _set_state(self, arrays, meta, path):
        self.constant_ = float(arrays["constant"][0])
        self.mean_ = float(arrays["mean"][0]) if "mean" in arrays else math.nan
        if meta.get("n_features_in") is not None:
            self.n_features_in_ = meta["n_features_in"]


@HEADS.register("domain_median")
class DomainMedianHead(BaseHead):
    """Median length of the prompt's group (the domain label); unseen groups get the overall median.

    X: [n, k] labels (a `[n, 1]` column of domain names in practice); each row is one group key.
    """

    name = "domain_median"
    input_kind = "domains"

    def __init__(self) -> None:
        pass

    def _keys(self, X: Any) -> list[tuple]:
        X = np.asarray(X, dtype=object)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        return [tuple(row) for row in X.tolist()]

    def fit(self, X: Any, y: Any) -> DomainMedianHead:
        X = validate_data(self, X, dtype=None, ensure_all_finite=False)
        y = check_targets(y, len(X))
        self.global_median_ = float(np.median(y))
        groups: dict[tuple, list[float]] = {}
        for key, value in zip(self._keys(X), y, strict=True):
            groups.setdefault(key, []).append(value)
        self.medians_ = {k: float(np.median(v)) for k, v in groups.items()}
        self.global_mean_ = float(np.mean(y))
        self.means_ = {k: float(np.mean(v)) for k, v in groups.items()}
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False)
        return np.array([self.medians_.get(k, self.global_median_) for k in self._keys(X)], dtype=np.float64)

    def predict_points(self, X: Any) -> Points:
        """The group's median and mean (overall ones for unseen groups; no mean for older saves)."""
        median = self.predict(X)
        keys = self._keys(validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False))
        mean = None
        if self.means_ is not None:
            mean = np.array([self.means_.get(k, self.global_mean_) for k in keys], dtype=np.float64)
        return Points(median, median, mean)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags

    def _state(self):
        keys = list(self.medians_)
        values = np.array([self.medians_[k] for k in keys] + [self.global_median_])
        means = np.array([self.means_[k] for k in keys] + [self.global_mean_])
        return {"medians": values, "means": means}, {
            "keys": [list(k) for k in keys],
            "n_features_in": self.n_features_in_,
        }

    @property
    def n_parameters(self) -> int:
        """The medians `predict` uses (the means are an alternative point, not extra inputs)."""
        check_is_fitted(self)
        return len(self.medians_) + 1

    def _set_state(self, arrays, meta, path):
        values = arrays["medians"]
        self.medians_ = {tuple(k): float(v) for k, v in zip(meta["keys"], values[:-1], strict=True)}
        self.global_median_ = float(values[-1])
        self.means_, self.global_mean_ = None, math.nan  # saved before means were kept
        if "means" in arrays:
            m = arrays["means"]
            self.means_ = {tuple(k): float(v) for k, v in zip(meta["keys"], m[:-1], strict=True)}
            self.global_mean_ = float(m[-1])
        self.n_features_in_ = meta["n_features_in"]
