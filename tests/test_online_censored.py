"""CensoredRLS: a capped completion updates the readout with its conditional mean above the cap."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.errors import DataError
from lengthpred.heads import CensoredLogNormalHead
from lengthpred.online.censored import CensoredRLS, inverse_mills
from lengthpred.online.rls import RLSRegressor


def stream(n: int, seed: int, shift: float = 0.0, cap: float = 150.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    mu = 4.6 + shift + X[:, :2] @ np.array([0.5, -0.4])
    L = np.floor(np.expm1(mu + 0.6 * rng.normal(size=n)))
    return X, mu, np.minimum(L, cap), L >= cap


def test_inverse_mills_matches_its_definition_and_stays_finite():
    from scipy import stats

    a = np.array([-2.0, 0.0, 1.5])
    np.testing.assert_allclose(inverse_mills(a), stats.norm.pdf(a) / stats.norm.sf(a), rtol=1e-10)
    assert np.isfinite(inverse_mills(40.0)) and abs(inverse_mills(40.0) - 40.0) < 0.1


def test_without_capped_rows_it_is_plain_rls():
    X, _, y, _ = stream(200, 0, cap=1e9)
    a = CensoredRLS(alpha=1.0).fit(X[:100], y[:100]).partial_fit(X[100:], y[100:])
    b = RLSRegressor(alpha=1.0).fit(X[:100], y[:100]).partial_fit(X[100:], y[100:])
    np.testing.assert_allclose(a.theta_, b.theta_, rtol=1e-10)


def test_capped_completions_move_the_readout_up_where_naive_rls_stays_low():
    """Fitted offline on one domain, streamed a longer one (shifted up by 0.5 in log length) capped at 150:
    the censored updates track the shift; plain RLS on capped-as-value lengths cannot pass the cap."""
    X0, _, y0, c0 = stream(400, 1)
    head = CensoredLogNormalHead(alpha=1.0).fit(X0, y0, censored=c0)
    cens = CensoredRLS.from_censored_head(head, X0, forgetting=0.995)
    naive = RLSRegressor.from_linear_head(_linear(X0, y0), X0, forgetting=0.995)
    X1, mu1, y1, c1 = stream(1500, 2, shift=0.5)
    assert c1.mean() > 0.4
    cens.partial_fit(X1, y1, censored=c1)
    naive.partial_fit(X1, y1)
    Xt, mut, _, _ = stream(500, 3, shift=0.5)
    err_c = np.abs(cens.predict_log(Xt) - mut).mean()
    err_n = np.abs(naive.predict_log(Xt) - mut).mean()
    assert err_c < 0.15 and err_c < 0.5 * err_n
    assert abs(cens.sigma_ - 0.6) < 0.15 and cens.n_censored_ == int(c1.sum())
    assert cens.predict_dist(Xt).mu.shape == (500,)
    with pytest.raises(DataError, match="censored has"):
        cens.partial_fit(X1[:2], y1[:2], censored=[True])


def _linear(X, y):
    from lengthpred.heads import LinearHead

    return LinearHead(alpha=1.0).fit(X, y)
