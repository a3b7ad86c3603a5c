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
