"""Back-transform of the log-target heads: Duan's smearing on exact ridge leave-one-out residuals."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from lengthpred.heads import ProxyRegHead, build_head, load_head
from lengthpred.heads.smearing import ridge_loo_residuals, smeared_expm1, smearing_factor


@pytest.mark.parametrize("n, d", [(40, 5), (25, 60)])  # primal (d <= n) and dual (d > n) form
def test_ridge_loo_residuals_equal_refits_without_the_row(n, d):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(n, d))
    z = Z @ rng.normal(size=d) + rng.normal(size=n)
    fit = Ridge(alpha=3.0).fit(Z, z)
    loo = ridge_loo_residuals(Z, z - fit.predict(Z), 3.0)
    brute = [z[i] - Ridge(alpha=3.0).fit(np.delete(Z, i, 0), np.delete(z, i)).predict(Z[i : i + 1])[0] for i in range(n)]
    np.testing.assert_allclose(loo, brute, rtol=1e-8, atol=1e-10)


def test_smearing_factor_and_back_transform():
    assert smearing_factor(np.zeros(5)) == 1.0
    r = np.array([-0.5, 0.5])
    assert smearing_factor(r) == pytest.approx(np.cosh(0.5))  # > 1: the mean of exp lies above exp(0)
    np.testing.assert_allclose(smeared_expm1(np.log1p([9.0]), 2.0), [19.0])
    assert np.isfinite(smearing_factor(np.array([1e4, 0.0])))  # one wild residual cannot overflow it


def _log_normal(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    w = np.random.default_rng(9).normal(size=d) * 0.3 / np.sqrt(d)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.expm1(5.0 + X @ w * 4 + 0.7 * rng.normal(size=n))


def test_linear_head_smearing_matches_held_out_mean_when_features_outnumber_rows():
    """d > n: in-sample ridge residuals give S near 1; the leave-one-out S is close to the held-out one, so
    the smeared head's mean prediction matches the mean held-out length and the plain expm1 falls short."""
    X, y = _log_normal(150, 300, 0)
    Xt, yt = _log_normal(4000, 300, 1)
    head = build_head("linear", alpha=100.0).fit(X, y)
    median = build_head("linear", alpha=100.0, back_transform="median").fit(X, y)
    z_in = np.log1p(median.predict(X))
    s_in = smearing_factor(np.log1p(y) - z_in)
    s_held = smearing_factor(np.log1p(yt) - np.log1p(median.predict(Xt)))
    assert s_in < 1.2 and s_held > 1.5
    assert head.smearing_ == pytest.approx(s_held, rel=0.15)
    assert abs(head.predict(Xt).mean() / yt.mean() - 1) < 0.1
    assert median.predict(Xt).mean() < 0.85 * yt.mean()  # biased low as an expected length


def test_prompt_len_and_raw_target_and_roundtrip(tmp_path):
    X, y = _log_normal(120, 1, 2)
    n_tok = np.exp(X) * 50
    head = build_head("prompt_len").fit(n_tok, y)
    assert head.smearing_ > 1.0
    loaded = load_head(head.save(tmp_path / "p"))
    assert loaded.smearing_ == head.smearing_
    np.testing.assert_array_equal(loaded.predict(n_tok), head.predict(n_tok))
    assert build_head("linear", target="raw", alpha=1.0).fit(X, y).smearing_ == 1.0


def test_proxy_reg_smears_its_back_transform():
    """The proxy's smearing factor comes from its training predictions (no encoder needed to test it)."""
    rng = np.random.default_rng(3)
    y = np.expm1(5 + 0.6 * rng.normal(size=200))
    raw_train = np.full(200, np.expm1(5.0))
    head = ProxyRegHead()
    head._calibrate(raw_train, y)
    assert head.smearing_ == pytest.approx(np.exp(np.log1p(y) - 5.0).mean())
    head.target_mean_, head.target_std_ = 5.0, 1.0
    head._outputs = lambda texts: np.zeros((len(texts), 1))  # the encoder's output: ẑ = 5
    np.testing.assert_allclose(head.predict(["a", "b"]), head.smearing_ * np.exp(5.0) - 1)
    points = head.predict_points(["a", "b"])
    np.testing.assert_allclose(points.median, np.expm1([5.0, 5.0]))
    np.testing.assert_allclose(points.mean, head.predict(["a", "b"]))
