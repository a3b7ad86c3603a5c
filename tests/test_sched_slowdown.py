"""The simulator's `slowdown` intervals: steps inside one take `factor` times as long (a server sharing its
CPU with a live predictor, lengthpred.serve.fidelity)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from lengthpred.errors import ConfigError
from lengthpred.sched import HardwareProfile, Workload, make_policy, simulate

PROF = HardwareProfile("t", t_base=0.01, t_seq=0.002, t_ctx=1e-5, t_prefill_token=1e-4, t_swap_token=0.0,
                       max_batch=4, token_budget=2048, kv_blocks=400, block_size=16)


def _workload(n: int = 30, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(np.sort(rng.uniform(0, 120, n)), rng.integers(10, 200, n), rng.integers(5, 300, n))


def _run(wl: Workload, prof: HardwareProfile = PROF, policy: str = "fcfs", **kw):
    return simulate(wl, prof, make_policy(policy), max_preemptions=None, horizon=math.inf, **kw)


@pytest.mark.parametrize("policy", ["fcfs", "oracle-sjf"])
def test_a_slowdown_over_the_whole_run_equals_a_slower_profile(policy):
    wl = _workload()
    slow = dataclasses.replace(PROF, t_base=2 * PROF.t_base, t_seq=2 * PROF.t_seq, t_ctx=2 * PROF.t_ctx,
                               t_prefill_token=2 * PROF.t_prefill_token)
    a = _run(wl, PROF, policy, slowdown=[(0.0, 1e9, 2.0)])
    b = _run(wl, slow, policy)
    np.testing.assert_allclose(a.first_token, b.first_token, rtol=1e-9)
    np.testing.assert_allclose(a.finish, b.finish, rtol=1e-9)


def test_factor_one_or_an_interval_after_the_run_changes_nothing():
    wl = _workload()
    base = _run(wl)
    for slowdown in ([(1.0, 5.0, 1.0), (7.0, 9.0, 1.0)], [(base.finish.max() + 1, base.finish.max() + 5, 3.0)]):
        r = _run(wl, slowdown=slowdown)
        np.testing.assert_allclose(r.finish, base.finish, rtol=1e-12)
        np.testing.assert_allclose(r.first_token, base.first_token, rtol=1e-12)


def test_a_slowdown_delays_only_what_runs_during_or_after_it():
    wl = _workload()
    base = _run(wl)
    t0, t1 = 8.0, 10.0
    r = _run(wl, slowdown=[(t0, t1, 1.5)])
    before = base.finish < t0
    np.testing.assert_allclose(r.finish[before], base.finish[before], rtol=1e-12)
    assert (r.finish[~before] >= base.finish[~before] - 1e-12).all()
    assert (r.finish[~before] > base.finish[~before] + 1e-6).any()
    # a step that starts inside the interval is slowed by the factor; none of them gains more than the
    # interval's extra time plus one slowed step
    assert (r.finish - base.finish).max() <= 0.5 * (t1 - t0) + 2 * (PROF.t_base + 4 * PROF.t_seq + 0.1)


@pytest.mark.parametrize("bad", [[(2.0, 1.0, 1.5)], [(0.0, 2.0, 1.5), (1.0, 3.0, 1.5)], [(0.0, 1.0, 0.0)]])
def test_bad_slowdown_intervals_are_refused(bad):
    with pytest.raises(ConfigError, match="slowdown"):
        _run(_workload(5), slowdown=bad)
