"""A_min: lower-bound-first with the bound raised to the tokens generated (lengthpred.sched.core.bounds)."""

from __future__ import annotations

import numpy as np

from lengthpred.sched import HardwareProfile, Workload, capacity, make_policy, simulate, summarize
from lengthpred.sched.core.workload import arrival_times


def _setup(n: int = 300, seed: int = 0):
    prof = HardwareProfile(name="t", t_base=0.01, t_seq=0.002, t_ctx=1e-5, t_prefill_token=1e-3,
                           t_swap_token=1e-4, max_batch=8, token_budget=10**6, kv_blocks=10**6, block_size=16)
    rng = np.random.default_rng(seed)
    out = np.maximum(np.rint(np.exp(rng.normal(4.5, 0.8, n))), 1).astype(int)
    prm = rng.integers(10, 200, n)
    lam = 0.9 * capacity(prof, prm, out, np.zeros(n), False)
    return prof, Workload(arrival_times(n, lam, rng=rng), prm, out)


def test_with_exact_bounds_and_no_preemption_amin_is_sjf():
    prof, wl = _setup()
    a = simulate(wl, prof, make_policy("amin", preemptive=False), wl.output.astype(float))
    b = simulate(wl, prof, make_policy("sjf"), wl.output.astype(float))
    np.testing.assert_allclose(a.finish, b.finish)


def test_keys_rise_with_tokens_and_agree_between_paths():
    prof, wl = _setup(50)
    pol = make_policy("amin")
    simulate(wl, prof, pol, np.full(50, 10.0))  # binds the policy
    idx = np.array([0, 1, 2])
    tokens = np.array([0.0, 9.0, 40.0])
    keys = pol.running_keys(idx, np.zeros(3, int), tokens)
    np.testing.assert_allclose(keys, [10.0, 10.0, 41.0])
    assert [pol.running_key(int(i), 0, float(t)) for i, t in zip(idx, tokens, strict=True)] == keys.tolist()


def test_a_small_bound_on_a_long_request_is_caught_by_preemption():
    """Bounds that underestimate the long requests: preemptive A_min evicts them once they pass the waiting
    requests' bounds (SJF on the same bounds never does); without preemption it orders as SJF does."""
    prof, wl = _setup(400, seed=1)
    bounds = np.where(wl.output > 150, 20.0, wl.output.astype(float))  # the long ones hide behind 20
    amin = summarize(simulate(wl, prof, make_policy("amin"), bounds))
    sjf = summarize(simulate(wl, prof, make_policy("sjf"), bounds))
    assert amin["preemptions"] > 0 and sjf["preemptions"] == 0
    calm = summarize(simulate(wl, prof, make_policy("amin", preemptive=False), bounds))
    assert calm["per_token_latency_mean"] == sjf["per_token_latency_mean"]
