"""A planted drifting linear model: log1p(length) = x·w + b + noise, with w and the feature mean shifting.

Used by the tests (RLS must recover the target weights, the static readout must not) and the benchmark.
"""

from __future__ import annotations

import numpy as np

from lengthpred.online.stream import StreamData


def drifting_stream(
    d: int = 16,
    n_source: int = 300,
    n_stream: int = 400,
    n_test: int = 200,
    shift: float = 1.0,
    noise: float = 0.2,
    seed: int = 0,
) -> StreamData:
    """Source rows from weights w_s, target rows from w_t = w_s + shift·δ (‖δ‖ ≈ ‖w_s‖), plus a mean shift."""
    rng = np.random.default_rng(seed)
    w_s = rng.normal(size=d) / np.sqrt(d)
    delta = rng.normal(size=d) / np.sqrt(d)
    w_t = w_s + shift * delta - shift * w_s  # at shift=1 the target ignores the source direction
    mu_t = 0.5 * shift * rng.normal(size=d)

    def draw(n: int, w: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = rng.normal(size=(n, d)) + mu
        z = 4.0 + X @ w + noise * rng.normal(size=n)
        return X.astype(np.float32), np.expm1(np.clip(z, 0.0, 8.0))

    Xs, ys = draw(n_source, w_s, np.zeros(d))
    Xr, yr = draw(n_stream, w_t, mu_t)
    Xt, yt = draw(n_test, w_t, mu_t)
    return StreamData(Xs, ys, Xr, yr, Xt, yt)
