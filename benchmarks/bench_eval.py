"""How long scoring takes: all metrics with 1000 bootstrap resamples, paired bootstrap, noise ceiling.

.venv/bin/python benchmarks/bench_eval.py
"""

from __future__ import annotations

import time

import numpy as np

from lengthpred.metrics import METRICS, evaluate, noise_ceiling, paired_bootstrap


def timed(fn, *args, reps: int = 3, **kw) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args, **kw)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    no_kendall = [m for m in METRICS.names() if m != "kendall"]
    print(f"metrics: {', '.join(METRICS.names())}; n_boot=1000; best of 3 (s)")
    for n in (12, 100, 500, 2000):
        t = np.round(rng.gamma(2.0, 120.0, n))
        p = t + rng.normal(0, 90, n)
        q = p + 10 * rng.normal(size=n)
        print(
            f"  n={n:5d}: all metrics {timed(evaluate, t, p, n_boot=1000):6.3f}  "
            f"without kendall {timed(evaluate, t, p, no_kendall, n_boot=1000):6.3f}  "
            f"paired spearman {timed(paired_bootstrap, t, p, q, n_boot=1000):6.3f}"
        )
    for n, k in ((12, 4), (60, 4), (300, 10)):
        mu = rng.normal(size=n)
        s = mu[:, None] + rng.normal(0, 1, (n, k))
        print(
            f"  noise ceiling n={n:4d} k={k:2d}: point {timed(noise_ceiling, s):6.3f}  "
            f"with 1000-resample CI {timed(noise_ceiling, s, n_boot=1000, reps=1):6.3f}"
        )


if __name__ == "__main__":
    main()
