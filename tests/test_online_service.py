"""OnlineService: predictions served while updates are backlogged; final state equals the synchronous one."""

from __future__ import annotations

import threading

import numpy as np

from lengthpred.online import RLSRegressor
from lengthpred.online.service import OnlineService


class _GatedRLS(RLSRegressor):
    """Updates wait on a gate, so a backlog is guaranteed while the test predicts."""

    gate = threading.Event()

    def partial_fit(self, X, y):
        assert self.gate.wait(10.0)
        return super().partial_fit(X, y)


def test_predictions_served_during_update_backlog_and_final_state_matches_sync():
    rng = np.random.default_rng(0)
    d = 32
    X = rng.normal(size=(200, d))
    y = np.expm1(4 + 0.3 * X @ rng.normal(size=d) / np.sqrt(d))
    A, yA, B, yB = X[:100], y[:100], X[100:], y[100:]
    sync = RLSRegressor(alpha=1.0, forgetting=0.995).fit(A, yA).partial_fit(B, yB)
    est = _GatedRLS(alpha=1.0, forgetting=0.995).fit(A, yA)
    offline_pred = est.predict(B[:5])
    with OnlineService(est) as svc:
        for xb, yb in zip(B, yB, strict=True):
            svc.submit_update(xb, yb)
        futs = [svc.submit_predict(xb) for xb in B[:5]]
        preds = [f.result(timeout=5.0) for f in futs]
        assert svc.pending_updates == 100  # served with every update still waiting
        np.testing.assert_allclose(preds, offline_pred, rtol=1e-10)
        assert svc.predict_now(B[0]) == preds[0]
        _GatedRLS.gate.set()
        assert svc.drain(timeout=30.0)
        assert svc.pending_updates == 0
        np.testing.assert_allclose(est.theta_, sync.theta_, rtol=1e-12)
        np.testing.assert_allclose(svc.submit_predict(B[0]).result(5.0), sync.predict(B[:1])[0], rtol=1e-9)
        bad = svc.submit_predict(np.ones(d + 1))  # a wrong-size row fails its own future only
        assert bad.exception(timeout=5.0) is not None
        assert svc.submit_predict(B[1]).result(5.0) > 0
