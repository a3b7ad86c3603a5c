"""What the scheduler knows about a request's length: predictors seen through one small protocol.

A predictor is asked once per request, when it arrives (``predict(i, now)``), and told each true length
when its request finishes (``on_complete(i, length, now)``) so online-adapted predictors can update.
``remaining(i, generated)`` (optional) refines the remaining length of a running request for SRPT.
Static predictors expose ``values`` so the simulator can skip per-request calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from lengthpred.distributions.keys import tie_beta
from lengthpred.errors import DataError


@runtime_checkable
class Predictor(Protocol):
    def predict(self, i: int, now: float) -> float: ...

    def on_complete(self, i: int, length: int, now: float) -> None: ...


class ArrayPredictor:
    """Fixed predictions aligned with the workload's requests (e.g. a head's `y_pred`, or LTR scores)."""

    def __init__(self, values: np.ndarray, name: str = "array") -> None:
        self.values = np.asarray(values, dtype=float)
        self.name = name
        if self.values.ndim != 1 or not np.all(np.isfinite(self.values)):
            raise DataError(f"predictor {name}: predictions must be a finite 1-D array")

    def predict(self, i: int, now: float) -> float:
        return float(self.values[i])

    def on_complete(self, i: int, length: int, now: float) -> None:
        pass

    def remaining(self, i: int, generated: float) -> float:
        """Outlived its prediction: expect as many tokens again as it has made beyond it (a heavy tail)."""
        p = self.values[i]
        return float(p - generated) if generated < p else float(generated - p + 1.0)

    def remaining_many(self, idx: np.ndarray, generated: np.ndarray) -> np.ndarray:
        p = self.values[idx]
        return np.where(generated < p, p - generated, generated - p + 1.0)


class QueueTIEPredictor:
    """TIE's key with its queue rule (arXiv 2604.00499; its vLLM patch): E + β·CVaR_0.9 per request, β =
    clip(0.1 · waiting / batch cap, 0.1, 0.5) taken from the waiting queue (the request included) when the
    request is predicted, at its arrival, and then kept. `mean`, `tail`: E[min(L, cap)] and CVaR_0.9 aligned
    with the workload's requests. The simulator hands it its queue (`reads_queue`, `bind_queue`)."""

    reads_queue = True

    def __init__(self, mean: np.ndarray, tail: np.ndarray, name: str = "tie-queue") -> None:
        self.mean, self.tail = np.asarray(mean, dtype=float), np.asarray(tail, dtype=float)
        self.name = name
        if self.mean.shape != self.tail.shape or self.mean.ndim != 1 or not (
                np.all(np.isfinite(self.mean)) and np.all(np.isfinite(self.tail))):
            raise DataError(f"predictor {name}: mean and tail must be finite 1-D arrays of one length")
        self._waiting: Callable[[], int] | None = None
        self.max_batch = 1
        self.betas: list[float] = []  # the β each prediction used, in prediction order

    def bind_queue(self, waiting: Callable[[], int], max_batch: int) -> None:
        self._waiting, self.max_batch = waiting, int(max_batch)

    def predict(self, i: int, now: float) -> float:
        if self._waiting is None:
            raise DataError(f"predictor {self.name}: no queue bound (the simulator binds it)")
        beta = tie_beta(self._waiting() + 1, self.max_batch)
        self.betas.append(beta)
        return float(self.mean[i] + beta * self.tail[i])

    def on_complete(self, i: int, length: int, now: float) -> None:
        pass


class CallablePredictor:
    """Wrap `fn(i, now) -> tokens` and an optional `update(i, length, now)` (an online head's hooks)."""

    def __init__(self, fn: Callable[[int, float], float],
                 update: Callable[[int, int, float], None] | None = None, name: str = "callable") -> None:
        self.fn, self.update, self.name = fn, update, name

    def predict(self, i: int, now: float) -> float:
        return float(self.fn(i, now))

    def on_complete(self, i: int, length: int, now: float) -> None:
        if self.update is not None:
            self.update(i, length, now)


class OnlineScaledPredictor:
    """A numpy-only online adapter: base predictions × a correction learned from finished requests.

    The correction is exp of an exponentially weighted mean of log(true / predicted) with forgetting
    `forget`; it fixes a predictor whose scale is off (a domain shift) while keeping its ranking. The
    RLS readout of the online stage plugs in the same way through `CallablePredictor`.
    """

    def __init__(self, base: np.ndarray, forget: float = 0.99, name: str = "online-scaled") -> None:
        self.base = np.asarray(base, dtype=float)
        self.forget, self.name = forget, name
        self.log_ratio_, self.weight_ = 0.0, 0.0
        self.n_updates_ = 0

    def predict(self, i: int, now: float) -> float:
        corr = self.log_ratio_ / self.weight_ if self.weight_ > 0 else 0.0
        return float(self.base[i] * np.exp(corr))

    def on_complete(self, i: int, length: int, now: float) -> None:
        self.log_ratio_ = self.forget * self.log_ratio_ + np.log(length / max(self.base[i], 1e-9))
        self.weight_ = self.forget * self.weight_ + 1.0
        self.n_updates_ += 1


class OraclePredictor(ArrayPredictor):
    """The true lengths: the bound every predictor lives under."""

    def __init__(self, lengths: np.ndarray) -> None:
        super().__init__(np.asarray(lengths, dtype=float), name="oracle")

    def remaining(self, i: int, generated: float) -> float:
        return float(self.values[i] - generated)

    def remaining_many(self, idx: np.ndarray, generated: np.ndarray) -> np.ndarray:
        return self.values[idx] - generated
