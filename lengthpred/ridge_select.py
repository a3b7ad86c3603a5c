"""The ridge strength chosen by cross-validation that never scores a prompt on its own samples.

Heads fitted in long format (a prompt with k sampled lengths is k rows with identical features: the
distributional readouts, the linear head inside `lengthpred.eval.distributional`) must not choose α by
leave-one-out over rows: a held-out sample's prompt stays in training through its other samples, so LOO
rewards memorising prompts and picks too small an α (on a synthetic long-format set, α = 100 where
prompt-grouped CV picks 1000, with 35% higher test error). Rows with identical features are one prompt's
samples: `grouped_ridge_cv` folds them together (sklearn's `GroupKFold` over those groups) and keeps
RidgeCV's efficient leave-one-out where every row is its own prompt (then both are the same rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import GroupKFold

N_SPLITS = 5


def row_groups(X: np.ndarray) -> np.ndarray:
    """[n] group index per row: rows with identical features share one (a prompt's samples in long format)."""
    X = np.ascontiguousarray(np.asarray(X))
    _, inverse = np.unique(X.reshape(len(X), -1), axis=0, return_inverse=True)
    return np.asarray(inverse).reshape(-1)


def grouped_ridge_cv(alphas: Sequence[float], X: np.ndarray, groups: np.ndarray | None = None,
                     n_splits: int = N_SPLITS) -> RidgeCV:
    """An unfitted RidgeCV over `alphas` for the rows of X (fit it on those rows, in that order): efficient
    leave-one-out when every row is its own group, else `GroupKFold(min(n_splits, groups))` by group (`groups`,
    or identical rows of X), scored by mean squared error as leave-one-out is."""
    a = np.asarray(list(alphas), dtype=np.float64)
    g = row_groups(X) if groups is None else np.asarray(groups).reshape(-1)
    n_groups = len(np.unique(g))
    if n_groups == len(g):
        return RidgeCV(alphas=a)
    if n_groups < 2:
        raise ValueError(f"{len(g)} rows in {n_groups} group: prompt-grouped CV needs at least 2 prompts")
    splits = list(GroupKFold(n_splits=min(n_splits, n_groups)).split(np.zeros((len(g), 1)), groups=g))
    return RidgeCV(alphas=a, cv=splits, scoring="neg_mean_squared_error")
