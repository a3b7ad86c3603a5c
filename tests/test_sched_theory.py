"""The simulator against queueing theory: M/M/1, SRPT optimality, conservation."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.sched import HardwareProfile, Workload, make_policy, simulate, summarize
from lengthpred.sched.core.workload import arrival_times, noisy_prediction


def _single_server(dt: float = 1e-3) -> HardwareProfile:
    """Batch 1, a fixed step time, free prefill/preemption, memory never binding."""
    return HardwareProfile(name="mm1", t_base=dt, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                           max_batch=1, token_budget=10**9, kv_blocks=10**9, block_size=16)


def test_mm1_fcfs_mean_response_matches_theory():
    # service = geometric(mean m) steps × dt ≈ exponential with mean 1 s → μ = 1; λ = 0.5 → E[T] = 1/(μ−λ) = 2 s
    # (the exact M/G/1 value for the geometric service is 1.9995 s)
    rng = np.random.default_rng(0)
    n, m, lam = 60_000, 1000, 0.5
    out = rng.geometric(1.0 / m, size=n)
    wl = Workload(arrival_times(n, lam, rng=rng), np.zeros(n, int), out)
    res = simulate(wl, _single_server(1.0 / m), make_policy("fcfs"))
    mean_t = summarize(res)["jct_mean"]
    assert mean_t == pytest.approx(1.0 / (1.0 - lam), rel=0.05)
    # and Little's law's other side: utilisation = λ·E[S]
    busy = (out / m).sum() / res.end_time
    assert busy == pytest.approx(lam, rel=0.03)


def test_mm1_waiting_grows_with_load():
    rng = np.random.default_rng(1)
    n, m = 20_000, 100
    out = rng.geometric(1.0 / m, size=n)
    gaps = rng.exponential(1.0, size=n)
    jct = []
    for lam in (0.3, 0.6, 0.8):
        wl = Workload(np.cumsum(gaps) / lam, np.zeros(n, int), out)
        jct.append(summarize(simulate(wl, _single_server(1.0 / m), make_policy("fcfs")))["jct_mean"])
    assert jct[0] < jct[1] < jct[2]
    assert jct[2] == pytest.approx(1 / (1 - 0.8), rel=0.15)


@pytest.mark.parametrize("seed", range(5))
def test_srpt_with_exact_lengths_has_the_least_mean_response(seed):
    rng = np.random.default_rng(seed)
    n = 400
    out = np.maximum(1, rng.lognormal(4, 1.2, n).astype(int))
    wl = Workload(arrival_times(n, 0.9 / out.mean() * 1e3, rng=rng), np.zeros(n, int), out)
    prof = _single_server()
    pred = noisy_prediction(out, 0.6, rng=rng)
    kw = {"max_preemptions": None}
    srpt = summarize(simulate(wl, prof, make_policy("oracle-srpt"), **kw))["jct_mean"]
    others = {
        "fcfs": simulate(wl, prof, make_policy("fcfs"), **kw),
        "oracle-sjf": simulate(wl, prof, make_policy("oracle-sjf"), **kw),
        "sjf": simulate(wl, prof, make_policy("sjf"), pred, **kw),
        "srpt": simulate(wl, prof, make_policy("srpt"), pred, **kw),
        "mlfq": simulate(wl, prof, make_policy("mlfq", quantum=4), **kw),
        "rank": simulate(wl, prof, make_policy("rank"), -pred, **kw),
    }
    for name, res in others.items():
        assert srpt <= summarize(res)["jct_mean"] * (1 + 1e-9), name
    # it is a strict improvement over FCFS on heavy-tailed instances
    assert srpt < 0.9 * summarize(others["fcfs"])["jct_mean"]


@pytest.mark.parametrize("hardware", ["cpu-smollm2-135m", "a100-llama2-7b"])
def test_conservation_across_policies(hardware):
    from lengthpred.sched import capacity, get_profile

    prof = get_profile(hardware)
    rng = np.random.default_rng(3)
    n = 1500
    out = np.maximum(1, rng.lognormal(5, 1, n).astype(int))
    prm = rng.integers(10, 300, n)
    wl = Workload(arrival_times(n, 0.95 * capacity(prof, prm, out), rng=rng), prm, out)
    pred = noisy_prediction(out, 0.6, rng=rng)
    outcomes = []
    for pol in ["fcfs", "sjf", "srpt", "oracle-sjf", "oracle-srpt", "mlfq"]:
        for pre in ["recompute", "swap"]:
            res = simulate(wl, prof, make_policy(pol), pred, preemption=pre)
            assert res.finished.all(), (pol, pre)
            assert np.all(res.first_token >= res.arrival) and np.all(res.finish >= res.first_token)
            outcomes.append((pol, pre, int(res.output[res.finished].sum()), int(res.finished.sum())))
    assert {(o[2], o[3]) for o in outcomes} == {(int(out.sum()), n)}
