"""The ridge alpha of a source fit (the stream heads' names, `rls@λ`, are in `lengthpred.names`).

The heads and completion model of a config are built in `lengthpred.stages.adapt`."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.preprocessing import StandardScaler


def select_alpha(X: np.ndarray, y: np.ndarray, alphas: list[float]) -> float:
    """The linear head's choice when alpha is null: RidgeCV (efficient LOO) in standardised log1p space."""
    Xs = StandardScaler().fit_transform(np.asarray(X, dtype=np.float64))
    return float(RidgeCV(alphas=np.asarray(alphas, dtype=np.float64)).fit(Xs, np.log1p(y)).alpha_)
