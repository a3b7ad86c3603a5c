"""Names of the stream heads (`rls@λ`, `rls@λ+mean`) and the ridge alpha of a source fit.

The heads and completion model of a config are built in `lengthpred.stages.adapt`."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.preprocessing import StandardScaler


def rls_name(forgetting: float) -> str:
    """`rls@1`, `rls@0.999`: the head name in curves and predictions files."""
    return f"rls@{float(forgetting):g}"


def mean_oracle_name(forgetting: float) -> str:
    """`rls@1+mean`: RLS updated with the mean of each prompt's samples (an oracle no server has)."""
    return f"{rls_name(forgetting)}+mean"


def select_alpha(X: np.ndarray, y: np.ndarray, alphas: list[float]) -> float:
    """The linear head's choice when alpha is null: RidgeCV (efficient LOO) in standardised log1p space."""
    Xs = StandardScaler().fit_transform(np.asarray(X, dtype=np.float64))
    return float(RidgeCV(alphas=np.asarray(alphas, dtype=np.float64)).fit(Xs, np.log1p(y)).alpha_)
