"""Simulated requests per second of wall time: 100k requests at high load (target >= 50k/s).

    .venv/bin/python benchmarks/bench_sched.py                 # a100-llama2-7b, load 0.98, 100k requests
    .venv/bin/python benchmarks/bench_sched.py --hardware cpu-smollm2-135m --load 1.2 --n 100000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from lengthpred.sched import Workload, capacity, get_profile, make_policy, simulate, summarize
from lengthpred.sched.workload import arrival_times, noisy_prediction, synthetic_lengths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="a100-llama2-7b")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--load", type=float, default=0.98)
    ap.add_argument("--policies", default="fcfs,sjf,oracle-sjf,srpt,oracle-srpt,mlfq")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    prof = get_profile(args.hardware)
    out = synthetic_lengths(args.n, rng=rng)
    prm = rng.integers(16, 512, args.n)
    wl = Workload(arrival_times(args.n, args.load * capacity(prof, prm, out), rng=rng), prm, out)
    pred = noisy_prediction(out, 0.6, rng=rng)
    print(f"{args.hardware}, {args.n} requests, load {args.load}")
    for name in args.policies.split(","):
        pol = make_policy(name)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = simulate(wl, prof, pol, pred if pol.needs_prediction else None)
        dt = time.perf_counter() - t0
        s = summarize(res)
        print(f"{name:<12} {args.n / dt:>10,.0f} requests/s  ({dt:.2f} s, {res.n_events:,} events, "
              f"{int(s['preemptions']):,} preemptions, ptl mean {s['per_token_latency_mean'] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
