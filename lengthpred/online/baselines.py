"""The comparison heads of the stream runner, all on the same readout as `RLSRegressor`.

Each shares its offline fit (frozen scaler, ridge on log1p length, unpenalised intercept), prediction and
input validation, and differs only in what a completed request does to the weights:
static (nothing), NLMS (a normalised gradient step), sliding-window ridge (replay: refit on stored rows).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError
from lengthpred.online.rls import RLSRegressor


class StaticReadout(RLSRegressor):
    """The offline ridge readout, frozen: completed requests are validated and counted, never learned."""

    _keeps_P = False

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__(alpha, forgetting=1.0, trace_cap=None)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def _step(self, z: np.ndarray, t: float) -> None:
        self.n_updates_ += 1


class NLMSRegressor(RLSRegressor):
    """Normalised LMS (online SGD on squared log error): θ ← θ + μ e z / (ε + ‖z‖²). O(d) per update."""

    _keeps_P = False

    def __init__(self, alpha: float = 1.0, *, step_size: float = 0.05, eps: float = 1.0) -> None:
        super().__init__(alpha, forgetting=1.0, trace_cap=None)
        self.step_size = step_size
        self.eps = eps

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"alpha": self.alpha, "step_size": self.step_size, "eps": self.eps}

    def _validate_params(self) -> None:
        super()._validate_params()
        if not 0.0 < float(self.step_size) < 2.0:
            raise ConfigError(f"NLMS step_size={self.step_size!r} must be in (0, 2) for stability")
        if not float(self.eps) > 0:
            raise ConfigError(f"NLMS eps={self.eps!r} must be > 0")

    def _step(self, z: np.ndarray, t: float) -> None:
        err = t - float(self.theta_ @ z)
        self.theta_ += (float(self.step_size) * err / (float(self.eps) + float(z @ z))) * z
        self.n_samples_seen_ += 1
        self.n_updates_ += 1


class SlidingWindowRidge(RLSRegressor):
    """Replay baseline: keep the last `window` completed rows and refit ridge on them every `refit_every`.

    With `include_source` the offline rows are replayed too. Scaler stays the offline one, so the refit is
    in the same space as every other head. Cost per refit O(n d² + d³): the cost RLS avoids.
    """

    def __init__(
        self, alpha: float = 1.0, *, window: int = 200, refit_every: int = 10, include_source: bool = False
    ) -> None:
        super().__init__(alpha, forgetting=1.0, trace_cap=None)
        self.window = window
        self.refit_every = refit_every
        self.include_source = include_source

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "window": self.window,
            "refit_every": self.refit_every,
            "include_source": self.include_source,
        }

    def _validate_params(self) -> None:
        super()._validate_params()
        if int(self.window) < 1 or int(self.refit_every) < 1:
            raise ConfigError(f"window={self.window!r} and refit_every={self.refit_every!r} must be >= 1")

    def fit(self, X: np.ndarray, y: np.ndarray) -> SlidingWindowRidge:
        super().fit(X, y)
        self._source = (self._augment(np.asarray(X, dtype=np.float64)), np.log1p(np.asarray(y, float)))
        self._buf: deque[tuple[np.ndarray, float]] = deque(maxlen=int(self.window))
        return self

    def _step(self, z: np.ndarray, t: float) -> None:
        self._buf.append((z.copy(), t))
        self.n_samples_seen_ += 1
        self.n_updates_ += 1
        if self.n_updates_ % int(self.refit_every) == 0:
            self._refit()

    def _refit(self) -> None:
        Z = np.array([r[0] for r in self._buf])
        t = np.array([r[1] for r in self._buf])
        if self.include_source:
            Z, t = np.vstack([self._source[0], Z]), np.concatenate([self._source[1], t])
        d = Z.shape[1] - 1
        G = Z.T @ Z
        G[np.arange(d), np.arange(d)] += float(self.alpha)
        self.theta_ = np.linalg.solve(G, Z.T @ t)
