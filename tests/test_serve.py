"""The replay loop, priority mapping, metrics and profile fit against the fake engine, whose step times are
known exactly (so each test knows the right answer)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve import (
    FakeEngine,
    NoPredictor,
    ServeRequest,
    TablePredictor,
    VirtualClock,
    get_policy,
    replay,
)
from lengthpred.serve.experiment import ServeSettings, fidelity_summary, run_grid
from lengthpred.serve.fidelity import busy_intervals, contention_factor, errors, sim_metrics, simulate_run
from lengthpred.serve.metrics import SLO, blank_latencies, latency_metrics, real_run_metrics
from lengthpred.serve.priority import by_sim_policy
from lengthpred.serve.profile_fit import fit_profile, step_durations
from lengthpred.serve.workload import PromptPool, draw_requests, make_requests, unit_arrivals

PROF = HardwareProfile("test", t_base=0.01, t_seq=0.002, t_ctx=1e-5, t_prefill_token=1e-4, t_swap_token=0.0,
                       max_batch=4, token_budget=4096, kv_blocks=100_000, block_size=16)


def _requests(n: int, seed: int = 0, gap: float = 0.4) -> list[ServeRequest]:
    rng = np.random.default_rng(seed)
    L, P = rng.integers(5, 200, n), rng.integers(10, 300, n)
    arr = np.cumsum(rng.exponential(gap, n))
    return [ServeRequest(f"r{i}", f"p{i}", list(range(int(P[i]))), int(L[i]), float(arr[i]), float(L[i]))
            for i in range(n)]


def _run(reqs, policy="fcfs", predictor=None, prof=PROF, **kw):
    clock = VirtualClock(start=123.456)  # a non-zero origin: times must be relative to the run's start
    eng = FakeEngine(prof, clock)
    return replay(reqs, eng, get_policy(policy), predictor or NoPredictor(), clock, **kw), eng


def test_one_request_alone_has_the_known_timings():
    req = ServeRequest("a", "p", list(range(100)), 3, 1.0, 3.0)
    run, _ = _run([req])
    r = run.requests.iloc[0]
    prefill_step = PROF.t_base + PROF.t_seq + PROF.t_ctx * 100 + PROF.t_prefill_token * 100
    assert r["added"] == pytest.approx(1.0) and r["ready"] == pytest.approx(1.0)
    assert r["first_token"] == pytest.approx(1.0 + prefill_step)
    decode = [PROF.t_base + PROF.t_seq + PROF.t_ctx * (100 + k) for k in (1, 2)]
    assert r["finish"] == pytest.approx(1.0 + prefill_step + sum(decode))
    assert r["output_tokens"] == 3 and r["status"] == "finished"
    assert list(run.steps["batch"]) == [1, 1, 1] and list(run.steps["prefill_tokens"]) == [100, 0, 0]


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "oracle"])
def test_replay_on_the_fake_engine_equals_the_simulator(policy):
    """Same cost model, same admission rule: every request's first token and finish agree to rounding."""
    reqs = _requests(60)
    rng = np.random.default_rng(1)
    pred = TablePredictor({r.prompt_id: r.length * math.exp(rng.normal(0, 0.5)) for r in reqs}, "noisy")
    run, _ = _run(reqs, policy, pred if policy == "sjf" else None)
    assert run.steps["n_waiting"].max() > 0  # requests did wait, so the order mattered
    assert_simulator_equals(run, policy, PROF)


def assert_simulator_equals(run, policy: str, prof: HardwareProfile) -> None:
    """The simulator's replay of a fake-engine run: every first token, finish and metric to rounding."""
    sim = simulate_run(run.requests, get_policy(policy), prof)
    np.testing.assert_allclose(sim["first_token"], run.requests["first_token"], atol=1e-9)
    np.testing.assert_allclose(sim["finish"], run.requests["finish"], atol=1e-9)
    if "split" in run.requests.columns:  # prefill first: the same decodes yield, and their stalls end alike
        np.testing.assert_array_equal(sim["split"], run.requests["split"])
        np.testing.assert_allclose(sim["resumed"], run.requests["resumed"], atol=1e-9)
    real = real_run_metrics(run.requests, run.steps, run.end, SLO())
    for e in errors(real, sim_metrics(sim, SLO())):
        if math.isnan(e["real"]) and math.isnan(e["sim"]):
            continue  # a statistic neither run has (e.g. no answer of 16 tokens or more)
        assert abs(e["signed_err"]) < 1e-9, e


def test_priority_mapping():
    assert get_policy("fcfs").priority(123.4, 50) == 0
    assert get_policy("sjf").priority(123.4, 50) == 123
    assert get_policy("sjf").priority(-5.0, 50) == 0
    assert get_policy("sjf").priority(1e12, 50) == 2**31 - 1
    assert get_policy("oracle").priority(None, 50) == 50
    with pytest.raises(ConfigError):
        get_policy("sjf").priority(None, 50)
    with pytest.raises(ConfigError, match="valid: fcfs, sjf, oracle"):
        get_policy("srpt")
    assert get_policy("oracle").sim_policy == "oracle-sjf" and by_sim_policy("oracle-sjf").name == "oracle"
    assert get_policy("oracle").predictor_label("x") == "clairvoyant"
    assert get_policy("fcfs").predictor_label("x") == "none"


@pytest.mark.parametrize("policy,order", [("fcfs", [0, 1, 2, 3]), ("oracle", [3, 1, 2, 0]), ("sjf", [2, 0, 3, 1])])
def test_a_burst_is_served_in_priority_order(policy, order):
    """One slot, four requests at t=0: FCFS serves by arrival, the oracle by true length, SJF by prediction."""
    lengths = [40, 10, 20, 5]
    reqs = [ServeRequest(f"r{i}", f"p{i}", [1] * 8, n, 0.0, n) for i, n in enumerate(lengths)]
    pred = TablePredictor({"p0": 2.0, "p1": 9.0, "p2": 1.0, "p3": 3.0}, "pred")
    prof = HardwareProfile(**{**PROF.to_dict(), "max_batch": 1})
    run, _ = _run(reqs, policy, pred if policy == "sjf" else None, prof=prof)
    got = run.requests.sort_values("first_token")["rid"].tolist()
    assert got == [f"r{i}" for i in order]


def test_metrics_on_known_arrays():
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    first = np.array([1.0, 2.0, 5.0, np.nan])
    finish = np.array([3.0, 4.0, 12.0, np.nan])
    output = np.array([3, 1, 8, 5])
    rejected = np.array([False, False, False, True])
    m = latency_metrics(arrival, first, finish, output, rejected, end=12.0, slo=SLO(ttft_s=2.0, tpot_s=1.0))
    assert m["per_token_latency_mean"] == pytest.approx(np.mean([3 / 3, 3 / 1, 10 / 8]))
    assert m["ttft_mean"] == pytest.approx(np.mean([1, 1, 3]))
    assert m["tpot_mean"] == pytest.approx(np.mean([2 / 2, 7 / 7]))  # the 1-token request has no TPOT
    assert m["jct_mean"] == pytest.approx(np.mean([3, 3, 10]))
    assert m["throughput"] == pytest.approx(12 / 12)
    assert m["goodput"] == pytest.approx(2 / 12)  # the third misses the TTFT SLO
    assert m["slo_attainment"] == pytest.approx(2 / 3)
    assert (m["n_finished"], m["n_rejected"], m["n_unfinished"]) == (3, 1, 0)
    assert math.isnan(blank_latencies(m)["per_token_latency_mean"]) and blank_latencies(m)["n_finished"] == 3


def test_profile_fit_recovers_the_fake_engines_coefficients():
    run, eng = _run(_requests(80, gap=0.2))
    fit = fit_profile([run.steps], eng.limits, skip=0)
    for k in ("t_base", "t_seq", "t_ctx", "t_prefill_token"):
        assert getattr(fit.profile, k) == pytest.approx(getattr(PROF, k), rel=1e-6), k
    assert fit.r2 == pytest.approx(1.0) and fit.rel_rmse < 1e-9
    assert fit.profile.max_batch == PROF.max_batch


def test_step_durations_charge_loop_time_only_when_back_to_back():
    s = pd.DataFrame({"t_start": [0.0, 1.5, 3.0, 10.0], "t_end": [1.0, 2.0, 4.0, 11.0],
                      "idle_before": [True, False, False, True]})
    np.testing.assert_allclose(step_durations(s), [1.0, 1.0, 2.0, 1.0])


def test_busy_intervals_merge_the_prediction_waits():
    r = pd.DataFrame({"arrival": [0.0, 1.0, 5.0, 9.0], "ready": [2.0, 3.0, 5.0, 9.5]})
    assert busy_intervals(r, 1.2) == [(0.0, 3.0, 1.2), (9.0, 9.5, 1.2)]
    assert busy_intervals(r, 1.0) == []


def test_contention_factor_is_the_slowdown_of_steps_that_overlap_a_prediction():
    # every step 1.1x the profile (machine drift, not contention); those with a prediction in flight 1.25x more
    rng = np.random.default_rng(0)
    n = 60
    batch, ctx, pf = rng.integers(1, 5, n), rng.integers(100, 1000, n), np.where(np.arange(n) % 7 == 0, 200, 0)
    busy = np.arange(n) % 3 == 0
    dur = 1.1 * np.where(busy, 1.25, 1.0) * (PROF.step_time(batch, ctx) + PROF.t_prefill_token * pf)
    start = np.arange(n) * 1.0
    steps = pd.DataFrame({"t_start": start, "t_end": start + dur, "idle_before": True, "batch": batch,
                          "ctx_tokens": ctx, "prefill_tokens": pf, "n_predicting": busy.astype(int)})
    assert contention_factor([steps], PROF, skip=0) == pytest.approx(1.25)
    assert contention_factor([steps.assign(n_predicting=0)], PROF, skip=0) == 1.0


def test_contention_slows_the_replay_only_while_requests_wait_for_predictions():
    run, _ = _run(_requests(30))
    pol = get_policy("fcfs")
    base = simulate_run(run.requests, pol, PROF)
    assert simulate_run(run.requests, pol, PROF, contention=2.0)["finish"].equals(base["finish"])  # no waits
    req = run.requests.copy()
    req.loc[10:12, "ready"] = req.loc[10:12, "arrival"] + 1.0
    waited, slowed = simulate_run(req, pol, PROF), simulate_run(req, pol, PROF, contention=2.0)
    early = waited["finish"] < req.loc[10, "arrival"]
    assert early.any() and (slowed["finish"][early] == waited["finish"][early]).all()
    assert (slowed["finish"][~early] >= waited["finish"][~early] - 1e-12).all()
    assert (slowed["finish"] > waited["finish"] + 1e-6).any()


def test_rejected_requests_are_counted_not_dropped():
    reqs = _requests(5)
    reqs[2] = ServeRequest("long", "p", [1] * 2040, 100, reqs[2].arrival, 100.0)  # 2140 > max_model_len 2048
    run, _ = _run(reqs)
    r = run.requests.set_index("rid")
    assert r.loc["long", "status"] == "rejected" and "max_model_len" in r.loc["long", "reason"]
    m = real_run_metrics(run.requests, run.steps, run.end, SLO())
    assert (m["n_rejected"], m["n_finished"]) == (1, 4)


def test_horizon_cuts_the_run_and_reports_unfinished():
    run, eng = _run(_requests(30, gap=0.01), horizon=1.0)
    assert run.horizon_hit and not eng.has_unfinished()
    assert (run.requests["status"] == "unfinished").sum() > 0


def _pool(n: int = 30, seed: int = 0) -> PromptPool:
    rng = np.random.default_rng(seed)
    return PromptPool([f"p{i:02d}" for i in range(n)], [[1] * int(rng.integers(10, 200)) for _ in range(n)],
                      [list(rng.integers(5, 300, 3)) for _ in range(n)])


def test_workload_draw_is_paired_and_arrivals_have_the_stated_rate():
    pool = _pool()
    a, b = draw_requests(pool, 20, seed=3), draw_requests(pool, 20, seed=3)
    assert a == b and len({e for e, _ in a}) == 20  # distinct prompts while the pool lasts
    u = unit_arrivals(20, seed=3)
    assert u[0] == 0 and (len(u) - 1) / u[-1] == pytest.approx(1.0)
    reqs = make_requests(pool, a, u / 0.5, tag="x")
    assert [r.arrival for r in reqs] == sorted(r.arrival for r in reqs)
    assert all(r.length == max(pool.samples[pool.ids.index(r.prompt_id)][s], 1)
               for r, (e, s) in zip(sorted(reqs, key=lambda r: int(r.rid[2:])), a, strict=True))


def test_trace_arrivals_replay_one_window_per_repeat_and_refuse_a_short_trace():
    trace = np.cumsum(np.random.default_rng(0).exponential(1.0, 100))
    w0, w1 = unit_arrivals(20, 0, "trace", trace=trace), unit_arrivals(20, 1, "trace", trace=trace)
    for w, lo in ((w0, 0), (w1, 20)):  # each repeat its own stretch of the trace, its shape kept
        want = trace[lo:lo + 20] - trace[lo]
        np.testing.assert_allclose(w, want * 19 / want[-1])
    with pytest.raises(DataError, match="repeat 4 needs times 80 to 99"):
        unit_arrivals(20, 4, "trace", trace=trace[:90])
    shuffled = np.random.default_rng(1).permutation(trace)  # a file out of time order: windows of time still
    np.testing.assert_allclose(unit_arrivals(20, 1, "trace", trace=shuffled), w1)


def _grid(loads, policies=("fcfs", "sjf", "oracle"), seeds=(0, 1)):
    pool = _pool()
    pred = {i: float(np.mean(s)) for i, s in zip(pool.ids, pool.samples, strict=True)}
    clock = VirtualClock()
    eng = FakeEngine(PROF, clock)
    s = ServeSettings(loads=list(loads), seeds=list(seeds), n_requests=25, policies=list(policies),
                      calibration_requests=12, fit_skip=0)
    make = lambda pol: ("mean", TablePredictor(pred, "mean") if pol == "sjf" else NoPredictor())  # noqa: E731
    return run_grid(eng, pool, s, make, clock=clock, progress=lambda m: None)


def test_grid_on_the_fake_engine_is_reproduced_by_the_simulator():
    res = _grid([0.8, 0.95])
    assert set(res.runs["hardware"]) == {"fake", "sim:fitted-fake"}
    assert set(res.runs["policy"]) == {"fcfs", "sjf", "oracle-sjf"}
    assert set(res.runs["predictor"]) == {"none", "mean", "clairvoyant"}
    assert res.fit.r2 == pytest.approx(1.0)
    assert res.fidelity["abs_err"].max() < 1e-6 and res.fidelity_all["abs_err"].max() < 1e-6
    assert res.calibration is not None and res.calibration.steps["n_waiting"].max() > 0  # the burst queued
    assert not res.overload
    fs = fidelity_summary(res.fidelity)
    assert set(fs["n"]) == {2}
    q = res.runs[(res.runs["metric"] == "queue_max") & (res.runs["hardware"] == "fake")]
    assert q["value"].max() > 0  # requests waited: the policies had something to order
    assert (res.requests["output_tokens"] == res.requests["target_tokens"]).all()  # identical work


def test_a_load_above_capacity_is_reported_as_overload_not_latency():
    res = _grid([1.2], policies=("fcfs",), seeds=(0,))
    assert res.overload and res.overload[0]["load"] == 1.2
    real = res.runs[res.runs["hardware"] == "fake"].set_index("metric")["value"]
    assert real["overload"] == 1 and math.isnan(real["per_token_latency_mean"]) and real["n_finished"] > 0
    assert res.fidelity.empty
