"""Prompt-grouped choice of the ridge strength on long-format rows (a prompt's samples share its features)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.model_selection import GroupKFold

from lengthpred.heads import CensoredLogNormalHead, LinearHead, QuantileLinearHead
from lengthpred.ridge_select import grouped_ridge_cv, row_groups

ALPHAS = (1.0, 10.0, 100.0, 1000.0, 10000.0)


def long_format(n_prompts: int = 300, k: int = 3, d: int = 100, seed: int = 0):
    """Few informative features, a per-prompt effect the features do not carry, and sampling noise: the
    setting where row-level LOO leaks (a held-out sample's prompt effect is in its siblings' rows)."""
    rng = np.random.default_rng(seed)
    beta = np.zeros(d)
    beta[:3] = [0.4, -0.3, 0.2]
    X = rng.normal(size=(n_prompts, d))
    mu = 4.5 + X @ beta + 1.0 * rng.normal(size=n_prompts)  # prompt effect beyond the features
    Xl = np.repeat(X, k, axis=0)
    y = np.expm1(np.repeat(mu, k) + 0.3 * rng.normal(size=n_prompts * k))
    groups = np.repeat(np.arange(n_prompts), k)
    return Xl, np.maximum(y, 0.0), groups


def test_row_groups_are_identical_rows():
    X = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0], [1.0, 2.0]])
    g = row_groups(X)
    assert g[0] == g[1] == g[3] != g[2]


def test_unique_rows_keep_efficient_leave_one_out():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(80, 5)), rng.normal(size=80)
    ours = grouped_ridge_cv(ALPHAS, X)
    assert ours.cv is None
    assert ours.fit(X, y).alpha_ == RidgeCV(alphas=np.asarray(ALPHAS)).fit(X, y).alpha_


def test_long_format_rows_are_folded_by_prompt():
    X, y, groups = long_format()
    z = np.log1p(y)
    ours = grouped_ridge_cv(ALPHAS, X).fit(X, z)
    # the same rule written out: GroupKFold by prompt, mean squared error per alpha
    folds = list(GroupKFold(n_splits=5).split(X, groups=groups))
    mse = [np.mean([np.mean((Ridge(alpha=a).fit(X[tr], z[tr]).predict(X[te]) - z[te]) ** 2) for tr, te in folds])
           for a in ALPHAS]
    assert ours.alpha_ == ALPHAS[int(np.argmin(mse))]
    loo = RidgeCV(alphas=np.asarray(ALPHAS)).fit(X, z).alpha_
    assert loo < ours.alpha_  # row-level LOO leaks each prompt into its own validation: it shrinks less
    # ... and pays for it on fresh prompts (the expected log length is 4.5 + X beta)
    rng = np.random.default_rng(9)
    Xt = rng.normal(size=(2000, X.shape[1]))
    truth = 4.5 + Xt[:, :3] @ np.array([0.4, -0.3, 0.2])
    err = {a: np.mean((Ridge(alpha=a).fit(X, z).predict(Xt) - truth) ** 2) for a in (loo, ours.alpha_)}
    assert err[ours.alpha_] < 0.8 * err[loo]


@pytest.mark.parametrize("make", [LinearHead, CensoredLogNormalHead, QuantileLinearHead])
def test_heads_fitted_in_long_format_choose_alpha_by_prompt(make):
    X, y, groups = long_format()
    head = make().fit(X, y)
    Z = head.scaler_.transform(X) if hasattr(head, "scaler_") else X
    expected = grouped_ridge_cv(head.alphas, X, groups).fit(Z, np.log1p(y)).alpha_
    assert head.alpha_ == expected
