"""Simulated requests per second of wall time: 100k requests at high load (target >= 50k/s).

    .venv/bin/python benchmarks/bench_sched.py                 # a100-llama2-7b, load 0.98, 100k requests
    .venv/bin/python benchmarks/bench_sched.py --hardware cpu-smollm2-135m --load 1.2 --n 100000
    .venv/bin/python benchmarks/bench_sched.py --policies srpt --spec-policies none   # one policy
    .venv/bin/python benchmarks/bench_sched.py --policies fcfs,mlfq --spec-policies none --preemption swap \
        --max-preemptions none                                   # preemption mode and cap (default: recompute, 2)

The second block runs with speculative decoding (acceptance rates ~ Beta(7, 3), LAPS-SD's setting) on
the same lengths and prompts, its arrivals scaled to the same load of the faster server.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from lengthpred.sched import Workload, capacity, get_profile, make_policy, simulate, summarize
from lengthpred.sched.core.workload import arrival_times, noisy_prediction, synthetic_lengths


def _run(label: str, wl: Workload, prof, pred: np.ndarray, speculative: bool, **sim) -> None:
    name, _, arg = label.partition(":")
    pol = make_policy(name, **({"stability": arg} if arg else {}))
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(wl, prof, pol, pred if pol.needs_prediction else None, speculative=speculative, **sim)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    s = summarize(res)
    # wall time is the target's measure; CPU time says how much of it other load on a shared machine took
    print(f"{label:<16} {len(wl) / dt:>10,.0f} requests/s  ({dt:.2f} s wall, {len(wl) / dc:,.0f}/s of CPU time; "
          f"{res.n_events:,} events, {int(s['preemptions']):,} preemptions, "
          f"ptl mean {s['per_token_latency_mean'] * 1e3:.1f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="a100-llama2-7b")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--load", type=float, default=0.98)
    ap.add_argument("--policies", default="fcfs,sjf,oracle-sjf,srpt,oracle-srpt,mlfq")
    ap.add_argument("--spec-policies", default="fcfs,mlfq,laps-sd,laps-sd:stderr",
                    help="policies run with speculative decoding ('none': skip); laps-sd:stderr sets stability")
    ap.add_argument("--preemption", default="recompute", choices=("recompute", "swap"))
    ap.add_argument("--max-preemptions", default="2", help="priority preemptions per request; 'none': no cap")
    args = ap.parse_args()
    cap = None if args.max_preemptions == "none" else int(args.max_preemptions)
    sim = {"preemption": args.preemption, "max_preemptions": cap}
    rng = np.random.default_rng(0)
    prof = get_profile(args.hardware)
    out = synthetic_lengths(args.n, rng=rng)
    prm = rng.integers(16, 512, args.n)
    gaps = arrival_times(args.n, 1.0, rng=rng)
    wl = Workload(gaps / (args.load * capacity(prof, prm, out)), prm, out)
    pred = noisy_prediction(out, 0.6, rng=rng)
    print(f"{args.hardware}, {args.n} requests, load {args.load}, {args.preemption}, cap {cap}")
    for label in args.policies.split(","):
        _run(label, wl, prof, pred, speculative=False, **sim)
    if args.spec_policies == "none":
        return
    acc = rng.beta(7.0, 3.0, args.n)
    spec = Workload(gaps / (args.load * capacity(prof, prm, out, acc, speculative=True)), prm, out, acc)
    print(f"speculative decoding (n_draft {prof.n_draft}, acceptance ~ Beta(7, 3)), load {args.load}")
    for label in args.spec_policies.split(","):
        _run(label, spec, prof, pred, speculative=True, **sim)


if __name__ == "__main__":
    main()
