"""Fit time of the distributional readouts on bench-sized synthetic features (1,500 × 577) on this machine.

    .venv/bin/python benchmarks/bench_dist.py              # quantile_linear, censored_lognormal (both ways)
    .venv/bin/python benchmarks/bench_dist.py --sklearn    # plus sklearn's QuantileRegressor at the median

sklearn's QuantileRegressor is the exact LP (HiGHS) with an L1 penalty; it is timed at one level only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lengthpred.heads import CensoredLogNormalHead, QuantileLinearHead


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--d", type=int, default=577)
    ap.add_argument("--sklearn", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    z = 5 + X[:, :10].sum(axis=1) * 0.15 + 0.6 * rng.normal(size=args.n)
    L = np.round(np.expm1(z))
    capped = L >= 256
    y = np.minimum(L, 256)
    for name, head in [("quantile_linear (7 levels, joint L-BFGS)", QuantileLinearHead(alpha=100.0)),
                       ("censored_lognormal", CensoredLogNormalHead(alpha=100.0)),
                       ("censored_lognormal censoring=ignore", CensoredLogNormalHead(alpha=100.0, censoring="ignore"))]:
        t = time.perf_counter()
        head.fit(X, y, censored=capped)
        print(f"{name}: {time.perf_counter() - t:.2f} s ({head.n_iter_} iterations)", flush=True)
    if args.sklearn:
        from sklearn.linear_model import QuantileRegressor

        t = time.perf_counter()
        QuantileRegressor(quantile=0.5, alpha=0.01, solver="highs").fit(X, np.log1p(y))
        print(f"sklearn QuantileRegressor (one level, highs): {time.perf_counter() - t:.2f} s", flush=True)


if __name__ == "__main__":
    main()
