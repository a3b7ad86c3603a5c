"""Distributional heads: the censored log-normal recovers what the "cap as value" fit gets wrong, quantile
readouts are calibrated and never cross, the soft-bin heads expose their bins, point heads refuse."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.distributions import Histogram, LogNormal, Observations, QuantileGrid, coverage
from lengthpred.errors import ConfigError
from lengthpred.heads import (
    CensoredLogNormalHead,
    EGTPHead,
    LinearHead,
    NoDistributionError,
    ProbeHead,
    QuantileLinearHead,
    load_head,
)

SIGMA = 0.6


def planted(n: int, seed: int, d: int = 6, cap: float = 200.0):
    """Prompts whose log1p-length is linear in X plus N(0, SIGMA²) noise, 3 samples each, capped at `cap`."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    mu = 4.8 + X[:, :3] @ np.array([0.5, -0.3, 0.2])
    Xs, mus = np.repeat(X, 3, axis=0), np.repeat(mu, 3)
    L = np.floor(np.expm1(mus + SIGMA * rng.normal(size=mus.size)))
    return X, mu, Xs, np.minimum(L, cap), L >= cap, L


def test_censored_fit_recovers_mean_and_spread_that_the_naive_fit_shrinks():
    X, mu, Xs, y, capped, _ = planted(600, seed=0)
    assert 0.2 < capped.mean() < 0.45
    cens = CensoredLogNormalHead(alpha=1.0).fit(Xs, y, censored=capped)
    naive = CensoredLogNormalHead(alpha=1.0, censoring="ignore").fit(Xs, y, censored=capped)
    Xt = np.random.default_rng(9).normal(size=(400, X.shape[1]))
    mut = 4.8 + Xt[:, :3] @ np.array([0.5, -0.3, 0.2])
    dc, dn = cens.predict_dist(Xt), naive.predict_dist(Xt)
    assert abs(dc.sigma[0] - SIGMA) < 0.05
    assert dn.sigma[0] < SIGMA - 0.1  # the cap pulls the spread in
    assert np.abs(dc.mu - mut).mean() < 0.05
    assert np.abs(dc.mu - mut).mean() < 0.5 * np.abs(dn.mu - mut).mean()
    # the share beyond 1.5 × the cap, known from the uncapped truth
    t = 300.0
    truth = 1 - LogNormal(mut, SIGMA).cdf(np.full(len(mut), t))
    assert np.abs((1 - dc.cdf(np.full(len(mut), t))) - truth).mean() < 0.02
    assert np.abs((1 - dn.cdf(np.full(len(mut), t))) - truth).mean() > 0.05
    assert cens.converged_
    # both know the data's cap, so both points are E[min(L, cap)] (the naive one's lower: its spread is shrunk)
    assert naive.cap_ == cens.cap_ == y[capped].min()
    assert (naive.predict(Xt) <= cens.cap_).all() and (cens.predict(Xt) <= cens.cap_).all()


def test_censored_head_without_censoring_is_the_ridge_on_log_lengths():
    X, _, Xs, _, _, L = planted(200, seed=1, cap=1e9)
    cens = CensoredLogNormalHead(alpha=10.0, point="median").fit(Xs, L)
    lin = LinearHead(alpha=10.0, back_transform="median").fit(Xs, L)
    np.testing.assert_allclose(cens.predict(X), lin.predict(X), rtol=1e-4)


def test_censored_head_linear_scale_and_point_options_and_save_load(tmp_path):
    X, _, Xs, y, capped, _ = planted(200, seed=3)
    head = CensoredLogNormalHead(alpha=1.0, scale="linear").fit(Xs, y, censored=capped)
    assert head.scale_coef_.shape == (X.shape[1],)
    loaded = load_head(head.save(tmp_path / "h"))
    np.testing.assert_allclose(loaded.predict(X), head.predict(X))
    np.testing.assert_allclose(loaded.predict_quantiles(X, [0.1, 0.9]), head.predict_quantiles(X, [0.1, 0.9]))
    capped_mean = head.predict(X)
    assert np.all(capped_mean <= 200) and np.all(head.set_params(point="mean").predict(X) >= capped_mean)


def test_quantile_head_is_calibrated_below_the_cap_and_never_crosses(tmp_path):
    X, mu, Xs, y, capped, L = planted(500, seed=4, cap=1e9)
    head = QuantileLinearHead(alpha=1.0, quantiles=(0.1, 0.25, 0.5, 0.75, 0.9)).fit(Xs, y)
    Xt, _, Xts, _, _, Lt = planted(300, seed=5, cap=1e9)
    q = head.predict_quantiles(Xt, [0.1, 0.5, 0.9])
    assert np.all(np.diff(q, axis=1) >= 0)
    Lt3 = Lt.reshape(-1, 3)
    for k, level in enumerate([0.1, 0.5, 0.9]):
        assert abs((Lt3 <= q[:, [k]]).mean() - level) < 0.04
    assert isinstance(head.predict_dist(Xt), QuantileGrid)
    np.testing.assert_allclose(head.predict(Xt), q[:, 1], rtol=1e-9)
    loaded = load_head(head.save(tmp_path / "q"))
    np.testing.assert_allclose(loaded.predict_quantiles(Xt, [0.3]), head.predict_quantiles(Xt, [0.3]))
    with pytest.raises(ConfigError, match="strictly increasing"):
        head.predict_quantiles(Xt, [0.9, 0.1])


@pytest.mark.parametrize("klass", [EGTPHead, ProbeHead])
def test_soft_bin_heads_expose_their_bins(klass):
    X, _, Xs, y, capped, _ = planted(150, seed=6)
    head = klass(epochs=10, lr=1e-2, hidden=8, n_threads=1).fit(Xs.astype(np.float32), y)
    dist = head.predict_dist(X.astype(np.float32))
    assert isinstance(dist, Histogram)
    np.testing.assert_allclose(dist.probs, head.predict_bins(X.astype(np.float32)), atol=1e-6)  # float32 sums
    mid = (head.bin_edges_[:-1] + head.bin_edges_[1:]) / 2  # uniform in a bin: its mean is the midpoint
    np.testing.assert_allclose(dist.mean(), dist.probs @ mid, rtol=1e-9)
    q = head.predict_quantiles(X.astype(np.float32), [0.1, 0.5, 0.9])
    assert np.all(np.diff(q, axis=1) >= 0)


def test_point_heads_say_they_cannot_give_a_distribution():
    X, _, Xs, y, _, _ = planted(50, seed=7)
    head = LinearHead(alpha=1.0).fit(Xs, y)
    with pytest.raises(NoDistributionError, match="'linear' predicts a point.*censored_lognormal") as e:
        head.predict_quantiles(X, [0.5])
    assert "\n" not in str(e.value)


def test_coverage_of_a_censored_fit_on_held_out_capped_samples_is_near_nominal():
    X, _, Xs, y, capped, _ = planted(600, seed=8)
    head = CensoredLogNormalHead(alpha=1.0).fit(Xs, y, censored=capped)
    Xt, _, _, yt, ct, _ = planted(300, seed=10)
    obs = Observations(np.repeat(np.arange(300), 3), yt, ct, 200.0)
    cov, decided = coverage(head.predict_dist(Xt), obs, 0.8)
    assert abs(cov.mean() - 0.8) < 0.04
    naive = CensoredLogNormalHead(alpha=1.0, censoring="ignore").fit(Xs, y, censored=capped)
    cov_n, _ = coverage(naive.predict_dist(Xt), obs, 0.8)
    assert cov_n.mean() < cov.mean()
