"""The online readout as an asynchronous CPU service beside the serving loop.

Two daemon threads: a predictor that answers from the latest published weights (a snapshot swapped in
atomically after each update, so it never waits for an update to finish) and an updater that applies
completed requests to the estimator in submission order. The serving loop calls `submit_predict(x)` when
a request's prefill features are ready and `submit_update(x, y)` when it completes; neither blocks.
Applying the same updates in the same order gives exactly the synchronous result. Where the engine itself
runs on every CPU core (vLLM-CPU), an update thread beside its step stalls that step far longer than the
update takes (docs/log, "Serving on a real engine"), so the service can apply updates in the caller's thread instead
(`threaded_updates=False`): the serving loop calls it between steps.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

_STOP = object()


class OnlineService:
    """Predict/update worker threads around an `RLSRegressor`-like estimator (fitted, with `theta_`)."""

    def __init__(self, estimator: Any, *, threaded_updates: bool = True) -> None:
        """`threaded_updates=False`: `submit_update` applies the update at once in the caller's thread (a serving
        loop calling it between engine steps, when an update thread would run beside the engine's step)."""
        self.estimator = estimator
        self.threaded_updates = threaded_updates
        self._predict_q: queue.SimpleQueue = queue.SimpleQueue()
        self._update_q: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()  # guards the pending counter only
        self._idle = threading.Event()
        self._idle.set()
        self._publish()
        self._threads = [
            threading.Thread(target=self._predict_loop, name="lp-predict", daemon=True),
            threading.Thread(target=self._update_loop, name="lp-update", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- serving-loop side ---------------------------------------------------------------------------------
    def submit_predict(self, x: np.ndarray) -> Future:
        """A future holding the predicted length (tokens) of one feature row, from the latest weights."""
        fut: Future = Future()
        self._predict_q.put((np.asarray(x, dtype=np.float64).ravel(), fut))
        return fut

    def predict_now(self, x: np.ndarray) -> float:
        """The same prediction computed in the caller's thread (a d-dot product on the snapshot)."""
        return self._predict_row(np.asarray(x, dtype=np.float64).ravel())

    def submit_update(self, x: np.ndarray, y: float) -> None:
        if not self.threaded_updates:
            self.estimator.partial_fit(np.asarray(x, dtype=np.float64).reshape(1, -1), np.array([float(y)]))
            self._publish()
            return
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._update_q.put((np.asarray(x, dtype=np.float64).reshape(1, -1), float(y)))

    @property
    def pending_updates(self) -> int:
        return self._pending

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted update is applied; False on timeout."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._predict_q.put(_STOP)
        self._update_q.put(_STOP)
        for t in self._threads:
            t.join()

    def __enter__(self) -> OnlineService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker side ---------------------------------------------------------------------------------------
    def _publish(self) -> None:
        est = self.estimator
        w = est.theta_[:-1] / est.scale_  # fold the scaler into the weights: prediction is one dot
        self._snapshot = (w, float(est.theta_[-1] - est.mean_ @ w))  # a tuple swap is atomic

    def _predict_row(self, x: np.ndarray) -> float:
        w, b = self._snapshot
        return max(float(np.expm1(x @ w + b)), 0.0)

    def _predict_loop(self) -> None:
        while (item := self._predict_q.get()) is not _STOP:
            x, fut = item
            try:
                fut.set_result(self._predict_row(x))
            except Exception as e:  # a bad row fails its own future, never the service
                fut.set_exception(e)

    def _update_loop(self) -> None:
        while (item := self._update_q.get()) is not _STOP:
            x, y = item
            try:
                self.estimator.partial_fit(x, np.array([y]))
                self._publish()
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()
