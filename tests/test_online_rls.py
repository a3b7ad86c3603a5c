"""RLSRegressor: ridge equivalence, forgetting, bad input, persistence."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.compose import TransformedTargetRegressor
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from lengthpred.errors import ConfigError, DataError
from lengthpred.online import NLMSRegressor, RLSRegressor, SlidingWindowRidge, StaticReadout


def _rows(rng: np.random.Generator, n: int, d: int, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d) + 2.0 + shift
    z = 4.0 + 0.3 * X @ rng.normal(size=d) / np.sqrt(d) + 0.3 * rng.normal(size=n)
    return X, np.expm1(np.clip(z, 0.5, 8.0))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_fit_matches_linear_head_pipeline():
    rng = np.random.default_rng(0)
    A, yA = _rows(rng, 120, 24)
    m = RLSRegressor(alpha=5.0).fit(A, yA)
    ref = TransformedTargetRegressor(
        Pipeline([("scale", StandardScaler()), ("ridge", Ridge(alpha=5.0))]),
        func=np.log1p,
        inverse_func=np.expm1,
    ).fit(A, yA)
    ridge = ref.regressor_.named_steps["ridge"]
    assert _rel(m.coef_, ridge.coef_) < 1e-9
    assert abs(m.intercept_ - ridge.intercept_) < 1e-9
    np.testing.assert_allclose(m.predict(A), ref.predict(A), rtol=1e-8)


@pytest.mark.parametrize("batch", [1, 7, 200])
def test_lambda_one_partial_fit_equals_ridge_on_union(batch):
    """THE test: fit(A).partial_fit(B) == Ridge on A∪B in A's standardised space, same alpha."""
    rng = np.random.default_rng(1)
    A, yA = _rows(rng, 150, 40)
    B, yB = _rows(rng, 200, 40, shift=0.7)
    m = RLSRegressor(alpha=3.0, forgetting=1.0).fit(A, yA)
    for i in range(0, len(B), batch):
        m.partial_fit(B[i : i + batch], yB[i : i + batch])
    sc = StandardScaler().fit(A)
    ridge = Ridge(alpha=3.0).fit(sc.transform(np.vstack([A, B])), np.log1p(np.concatenate([yA, yB])))
    assert _rel(m.coef_, ridge.coef_) < 1e-6
    assert abs(m.intercept_ - ridge.intercept_) / abs(ridge.intercept_) < 1e-6
    assert m.n_samples_seen_ == 350 and m.n_updates_ == 200
    # P is the inverse regularised Gram of the union (unpenalised intercept column), and symmetric
    Z = np.hstack([sc.transform(np.vstack([A, B])), np.ones((350, 1))])
    G = Z.T @ Z + np.diag([3.0] * 40 + [0.0])
    assert _rel(m.P_, np.linalg.inv(G)) < 1e-6
    np.testing.assert_array_equal(m.P_, m.P_.T)


def test_forgetting_tracks_drift_and_static_does_not():
    rng = np.random.default_rng(2)
    d = 10
    w_s, w_t = rng.normal(size=d) / np.sqrt(d), rng.normal(size=d) / np.sqrt(d)
    A = rng.normal(size=(300, d))
    B = rng.normal(size=(400, d))
    yA, yB = np.expm1(5 + 0.3 * A @ w_s), np.expm1(5 + 0.3 * B @ w_t)
    rls = RLSRegressor(alpha=1.0, forgetting=0.98).fit(A, yA).partial_fit(B, yB)
    static = StaticReadout(alpha=1.0).fit(A, yA).partial_fit(B, yB)
    Xt = rng.normal(size=(200, d))
    zt = 5 + 0.3 * Xt @ w_t
    err_rls = np.abs(rls.predict_log(Xt) - zt).mean()
    err_static = np.abs(static.predict_log(Xt) - zt).mean()
    assert err_rls < 0.05 < err_static
    assert np.isfinite(rls.P_).all() and np.trace(rls.P_) <= 10.0 * rls.trace0_ * (1 + 1e-9)


@pytest.mark.parametrize("lam", [0.0, 1.5, -0.1, float("nan"), True])
def test_bad_forgetting_is_config_error(lam):
    X, y = _rows(np.random.default_rng(3), 20, 3)
    with pytest.raises(ConfigError, match="forgetting"):
        RLSRegressor(forgetting=lam).fit(X, y)


@pytest.mark.parametrize(
    "make_bad",
    [
        lambda x, y: (x, np.array([np.nan])),  # missing length
        lambda x, y: (x, np.array([-3.0])),  # negative
        lambda x, y: (x[:, :-1], y),  # wrong feature size
        lambda x, y: (np.where(np.arange(x.shape[1]) == 2, np.nan, x), y),  # NaN feature
        lambda x, y: (x, None),
    ],
)
@pytest.mark.parametrize("cls", [RLSRegressor, NLMSRegressor, SlidingWindowRidge])
def test_bad_update_rejected_with_count_state_unchanged(make_bad, cls):
    rng = np.random.default_rng(4)
    X, y = _rows(rng, 60, 6)
    m = cls(alpha=1.0).fit(X, y)
    before = {k: np.copy(getattr(m, k)) for k in ("theta_", "_M")} | {"n": m.n_samples_seen_}
    m.partial_fit(*make_bad(X[:1], y[:1]))
    assert m.rejected_ == 1
    np.testing.assert_array_equal(m.theta_, before["theta_"])
    np.testing.assert_array_equal(m._M, before["_M"])
    assert m.n_samples_seen_ == before["n"]
    # a mixed batch: the good rows are learned, the bad ones counted
    yb = y[:4].copy()
    yb[1] = -1
    m.partial_fit(X[:4], yb)
    assert m.rejected_ == 2 and m.n_updates_ == 3


def test_zero_length_is_one_rule_for_fit_and_partial_fit():
    """An answer that ends at once (0 tokens) is a valid length for both fit and partial_fit."""
    rng = np.random.default_rng(9)
    A, yA = _rows(rng, 50, 5)
    B, yB = _rows(rng, 6, 5)
    yA[3] = yB[2] = 0.0
    batch = RLSRegressor(alpha=2.0).fit(np.vstack([A, B]), np.concatenate([yA, yB]))
    m = RLSRegressor(alpha=2.0).fit(A, yA)
    m.partial_fit(B, yB)
    assert m.rejected_ == 0 and m.n_updates_ == 6
    sc = StandardScaler().fit(A)  # = batch ridge on A∪B in A's space (RLS keeps the first scaler)
    ridge = Ridge(alpha=2.0).fit(sc.transform(np.vstack([A, B])), np.log1p(np.concatenate([yA, yB])))
    assert _rel(m.coef_, ridge.coef_) < 1e-8
    assert batch.rejected_ == 0
    with pytest.raises(DataError, match=">= 0"):
        RLSRegressor().fit(A, -yA)


def test_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(5)
    X, y = _rows(rng, 80, 8)
    m = RLSRegressor(alpha=2.0, forgetting=0.99).fit(X[:50], y[:50]).partial_fit(X[50:], y[50:])
    m.save(tmp_path / "h")
    assert not list((tmp_path / "h").glob("*.pkl"))
    m2 = RLSRegressor.load(tmp_path / "h")
    np.testing.assert_array_equal(m2.predict(X), m.predict(X))
    assert m2.get_params() == m.get_params() and m2.n_samples_seen_ == 80
    # continuing after load gives the same state as continuing the original
    m.partial_fit(X[:5], y[:5])
    m2.partial_fit(X[:5], y[:5])
    np.testing.assert_allclose(m2.theta_, m.theta_, rtol=1e-12)
    with pytest.raises(DataError):
        RLSRegressor.load(tmp_path / "nothing")


def test_unfitted_predict_and_partial_fit_start():
    X, y = _rows(np.random.default_rng(6), 30, 4)
    with pytest.raises(DataError, match="not fitted"):
        RLSRegressor().predict(X)
    m = RLSRegressor(alpha=1.0).partial_fit(X, y)  # first batch = offline fit
    np.testing.assert_allclose(m.theta_, RLSRegressor(alpha=1.0).fit(X, y).theta_)


def test_gil_free_blas_matches_scipy():
    from scipy.linalg import blas

    from lengthpred.online import _blas

    rng = np.random.default_rng(7)
    A = rng.normal(size=(9, 9))
    A = np.asfortranarray(A @ A.T)
    u = rng.normal(size=9)
    assert _blas.GIL_FREE
    np.testing.assert_allclose(_blas.symv(A, u), blas.dsymv(1.0, A, u), rtol=1e-12)
    ref = blas.dsyr(-0.3, u, a=A.copy(order="F"))
    np.testing.assert_allclose(np.triu(_blas.syr(-0.3, u, A)), np.triu(ref), rtol=1e-12)


def test_warm_start_from_the_linear_head():
    from lengthpred.heads.linear import LinearHead

    rng = np.random.default_rng(8)
    A, yA = _rows(rng, 90, 12)
    B, yB = _rows(rng, 40, 12, shift=0.5)
    head = LinearHead(alpha=4.0).fit(A, yA)
    warm = RLSRegressor.from_linear_head(head, A, forgetting=1.0)
    ref = RLSRegressor(alpha=4.0).fit(A, yA)
    np.testing.assert_allclose(warm.theta_, ref.theta_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(warm.P_, ref.P_, rtol=1e-10)
    # RLS predicts expm1 of the readout: the head's "median" back-transform, its default without smearing
    np.testing.assert_allclose(warm.predict(B), (head.predict(B) + 1) / head.smearing_ - 1, rtol=1e-8)
    median = LinearHead(alpha=4.0, back_transform="median").fit(A, yA)
    np.testing.assert_allclose(warm.predict(B), median.predict(B), rtol=1e-8)
    warm.partial_fit(B, yB)
    ref.partial_fit(B, yB)
    np.testing.assert_allclose(warm.theta_, ref.theta_, rtol=1e-8, atol=1e-10)
