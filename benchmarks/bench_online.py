"""Cost of the online readout: RLS update vs a d×d mat-vec, prediction vs a d-dot, async overlap.

    .venv/bin/python benchmarks/bench_online.py            # d = 576 and 4096
    .venv/bin/python benchmarks/bench_online.py --dims 576 --prefill-ms 20

Prints one table. BLAS threads are whatever the environment sets (OPENBLAS_NUM_THREADS etc.; printed).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from lengthpred.online import RLSRegressor
from lengthpred.online._blas import GIL_FREE
from lengthpred.online.service import OnlineService


def _best(fn, reps: int, rounds: int = 9) -> float:
    """Best-of-rounds mean seconds per call (the machine is shared: the minimum is the cleanest)."""
    return _compare({"f": fn}, reps, rounds)["f"]


def _compare(fns: dict, reps: int, rounds: int = 9) -> dict[str, float]:
    """Interleaved best-of-rounds timings, so load from other processes hits every candidate alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / reps)
    return best


def bench_dim(d: int, rng: np.random.Generator, prefill_ms: float, n_requests: int) -> dict[str, float]:
    n0 = max(2 * d, 200)
    X0 = rng.normal(size=(n0, d)).astype(np.float32)
    y0 = np.expm1(4 + 0.3 * X0 @ rng.normal(size=d) / np.sqrt(d))
    est = RLSRegressor(alpha=10.0, forgetting=0.999).fit(X0, y0)
    reps, rounds = (100, 9) if d <= 1024 else (10, 7)
    xs = rng.normal(size=(reps * rounds + 1, d))
    ys = np.expm1(4 + 0.1 * rng.normal(size=len(xs)))
    it = iter(range(len(xs)))

    def upd() -> None:
        k = next(it)
        est.partial_fit(xs[k : k + 1], ys[k : k + 1])

    r: dict[str, float] = {"d": d}
    A = np.asfortranarray(rng.normal(size=(d + 1, d + 1)))
    v = rng.normal(size=d + 1)
    z = np.ascontiguousarray(np.r_[xs[0] / est.scale_, 1.0])
    t = _compare({"update": upd, "step": lambda: est._step(z, 4.0), "matvec": lambda: A @ v}, reps, rounds)
    r["update_ms"], r["step_ms"], r["matvec_ms"] = 1e3 * t["update"], 1e3 * t["step"], 1e3 * t["matvec"]
    r["update_over_matvec"] = r["update_ms"] / r["matvec_ms"]
    w, x1 = rng.normal(size=d), rng.normal(size=d)
    r["dot_us"] = 1e6 * _best(lambda: w @ x1, 2000)
    r["predict_est_us"] = 1e6 * _best(lambda: est.predict(x1), 2000)
    # async service under a simulated serving loop: a prefill (GPU busy, GIL free: sleep) per request,
    # the prediction needed right after it, and two completed requests arriving per step (a backlog)
    with OnlineService(est) as svc:
        r["predict_snapshot_us"] = 1e6 * _best(lambda: svc.predict_now(x1), 2000)
        lat, backlog = [], []
        for k in range(n_requests):
            for j in range(2):
                svc.submit_update(xs[(2 * k + j) % len(xs)], ys[(2 * k + j) % len(xs)])
            time.sleep(prefill_ms / 1e3)  # prefill of request k
            t0 = time.perf_counter()
            fut = svc.submit_predict(xs[k])
            fut.result()
            lat.append(time.perf_counter() - t0)
            backlog.append(svc.pending_updates)
        left = svc.pending_updates
        svc.drain()
    lat_ms = 1e3 * np.array(lat)
    r["async_predict_p50_ms"] = float(np.median(lat_ms))
    r["async_predict_p99_ms"] = float(np.quantile(lat_ms, 0.99))
    r["mean_backlog"] = float(np.mean(backlog))
    # share of the updates applied while the serving loop was still running (hidden behind prefill)
    r["update_work_hidden_frac"] = 1.0 - left / (2 * n_requests)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[576, 4096])
    ap.add_argument("--prefill-ms", type=float, default=50.0, help="simulated prefill per request")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    threads = {k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS")}
    print(
        f"BLAS threads env: {threads or 'unset'}; GIL-free BLAS path: {GIL_FREE}; prefill {args.prefill_ms} ms"
    )
    rng = np.random.default_rng(args.seed)
    rows = [bench_dim(d, rng, args.prefill_ms, args.requests) for d in args.dims]
    cols = list(rows[0])
    print(" | ".join(f"{c:>12s}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]:12.3f}" if isinstance(r[c], float) else f"{r[c]:12d}" for c in cols))
    for r in rows:
        verdict = "OK" if r["update_over_matvec"] <= 3.0 else "ABOVE TARGET"
        print(
            f"d={r['d']}: RLS update {r['update_ms']:.3f} ms = {r['update_over_matvec']:.2f}× a d×d mat-vec "
            f"({r['matvec_ms']:.3f} ms; target ≤3×: {verdict}; the RLS step alone, without input checks, "
            f"{r['step_ms']:.3f} ms = {r['step_ms'] / r['matvec_ms']:.2f}×); prediction {r['predict_snapshot_us']:.1f} µs "
            f"(snapshot) / {r['predict_est_us']:.1f} µs (estimator) vs d-dot {r['dot_us']:.2f} µs; async prediction "
            f"p50 {r['async_predict_p50_ms']:.3f} ms, p99 {r['async_predict_p99_ms']:.3f} ms with "
            f"{r['mean_backlog']:.1f} updates queued; {100 * r['update_work_hidden_frac']:.0f}% of update work "
            "applied while the serving loop ran (the rest drained after it)"
        )


if __name__ == "__main__":
    main()
