"""The ridge alpha of a source fit (the stream heads' names, `rls@λ`, are in `lengthpred.names`).

The heads and completion model of a config are built in `lengthpred.stages.adapt`."""

from __future__ import annotations

import numpy as np
from sklearn.preprocessing import StandardScaler

from lengthpred.ridge_select import grouped_ridge_cv


def select_alpha(X: np.ndarray, y: np.ndarray, alphas: list[float]) -> float:
    """The linear head's choice when alpha is null: RidgeCV in standardised log1p space (efficient LOO, or
    prompt-grouped folds where rows repeat a prompt's features: lengthpred.ridge_select)."""
    X = np.asarray(X, dtype=np.float64)
    Xs = StandardScaler().fit_transform(X)
    return float(grouped_ridge_cv(alphas, X).fit(Xs, np.log1p(y)).alpha_)
