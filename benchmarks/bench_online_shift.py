"""Gain of RLS over the static readout vs planted shift size, on the synthetic drifting linear model.

    .venv/bin/python benchmarks/bench_online_shift.py            # ≈20 s of CPU (1.5 min wall on the busy box)

A control for the real-data runs: the source→target weight change is known, so the table shows what RLS
can recover when the premise holds (a linear readout whose weights moved) and that it costs nothing at
shift 0. Spearman of the at-arrival predictions over the whole stream and on the held-out target test.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from lengthpred.online import (
    HeadSpec,
    NLMSRegressor,
    RLSRegressor,
    ServingCompletion,
    SlidingWindowRidge,
    StaticReadout,
    run_stream,
)
from lengthpred.online.synthetic import drifting_stream


def heads(alpha: float) -> dict[str, HeadSpec]:
    out = {"static": HeadSpec(StaticReadout(alpha), update=False)}
    out |= {f"rls@{lam:g}": HeadSpec(RLSRegressor(alpha, forgetting=lam)) for lam in (1.0, 0.999, 0.99)}
    out["sgd"] = HeadSpec(NLMSRegressor(alpha))
    out["window"] = HeadSpec(SlidingWindowRidge(alpha, window=200, refit_every=5))
    out["oracle_refit"] = HeadSpec(StaticReadout(alpha), fit_on="source+stream", update=False)
    out["indomain"] = HeadSpec(StaticReadout(alpha), fit_on="stream", update=False)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--n-stream", type=int, default=300)
    args = ap.parse_args()
    rows = []
    for shift in args.shifts:
        for seed in range(args.seeds):
            data = drifting_stream(d=args.d, n_source=300, n_stream=args.n_stream, shift=shift, seed=seed)
            comp = ServingCompletion(load=0.7, seed=seed)  # below its capacity: labels keep arriving
            res = run_stream(heads(10.0), data, comp, record_every=50, progress=False)
            rows.append(res.summary.assign(shift=shift, seed=seed))
    df = pd.concat(rows)
    for col in ("stream_spearman", "test_spearman"):
        t = df.pivot_table(index="shift", columns="head", values=col, aggfunc="mean", sort=False)
        t["rls@0.99 − static"] = t["rls@0.99"] - t["static"]  # absolute: static can sit near zero
        print(
            f"\n{col} (mean of {args.seeds} seeds, d={args.d}, stream {args.n_stream}, delayed completions)"
        )
        print(t.round(3).to_string())
    upd = df.groupby("head")["update_ms"].mean().dropna()
    print("\nmean update ms:", {k: round(float(v), 3) for k, v in upd.items()}, f"(np {np.__version__})")


if __name__ == "__main__":
    main()
