"""Baselines any claim must beat: the train median, and the median of the prompt's domain."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import _num_samples, check_is_fitted, validate_data

from lengthpred.heads.base import HEADS, BaseHead, check_targets


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
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return np.full(_num_samples(X), self.constant_, dtype=np.float64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        tags.input_tags.sparse = True
        tags.no_validation = True
        return tags

    def _state(self):
        return {"constant": np.array([self.constant_])}, {
            "n_features_in": getattr(self, "n_features_in_", None)
        }

    def _set_state(self, arrays, meta, path):
        self.constant_ = float(arrays["constant"][0])
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
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=False)
        return np.array([self.medians_.get(k, self.global_median_) for k in self._keys(X)], dtype=np.float64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags

    def _state(self):
        keys = list(self.medians_)
        values = np.array([self.medians_[k] for k in keys] + [self.global_median_])
        return {"medians": values}, {"keys": [list(k) for k in keys], "n_features_in": self.n_features_in_}

    def _set_state(self, arrays, meta, path):
        values = arrays["medians"]
        self.medians_ = {tuple(k): float(v) for k, v in zip(meta["keys"], values[:-1], strict=True)}
        self.global_median_ = float(values[-1])
        self.n_features_in_ = meta["n_features_in"]
