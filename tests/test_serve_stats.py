"""The serving statistics (issue 24, items 2-4): paired tests and intervals over repeats, one request's weight,
the vLLM-bench latencies, per-run fidelity and step-time drift, and the calibration check on synthetic steps
(no engine: the fake engine's exact step times, perturbed as a quiet or a busy machine would)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.serve.calibration_check import CheckBounds, check_calibration
from lengthpred.serve.clock import VirtualClock
from lengthpred.serve.experiment import ServeSettings, calibrate, fidelity_summary, resimulate, run_grid
from lengthpred.serve.fake import FakeEngine
from lengthpred.serve.fidelity import at_speed, step_drift
from lengthpred.serve.metrics import SLO, itl_metrics, latency_metrics
from lengthpred.serve.paired import gain_interval, paired_gains, sign_flip_p
from lengthpred.serve.predictor import NoPredictor, TablePredictor
from lengthpred.serve.priority import get_policy
from lengthpred.serve.replay import replay
from lengthpred.serve.report import fidelity_table
from lengthpred.serve.report_stats import latency_table, paired_table, per_token_table
from lengthpred.serve.workload import ServeRequest

from .test_serve import PROF, _pool


def _burst(n: int = 24, seed: int = 0) -> pd.DataFrame:
    """The steps of a burst of n requests at t = 0 on the fake engine (exact step times)."""
    rng = np.random.default_rng(seed)
    reqs = [ServeRequest(f"r{i}", f"p{i}", [1] * int(rng.integers(10, 300)), int(rng.integers(5, 200)), 0.0, 0.0)
            for i in range(n)]
    clock = VirtualClock()
    return replay(reqs, FakeEngine(PROF, clock), get_policy("fcfs"), NoPredictor(), clock).steps


def _retime(steps: pd.DataFrame, factor: np.ndarray) -> pd.DataFrame:
    """The same steps back to back, each `factor` times as long."""
    d = (steps["t_end"] - steps["t_start"]).to_numpy() * factor
    end = np.cumsum(d)
    return steps.assign(t_start=end - d, t_end=end, idle_before=False)


def test_sign_flip_test_is_exact_over_repeats():
    assert sign_flip_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 8)  # the smallest p 3 repeats allow
    assert sign_flip_p(np.arange(1.0, 11.0)) == pytest.approx(2 / 1024)
    assert sign_flip_p(np.array([1.0, -1.0, 2.0, -2.0])) == pytest.approx(1.0)
    assert math.isnan(sign_flip_p(np.array([np.nan])))
    assert sign_flip_p(np.array([0.3])) == 1.0  # one repeat shows nothing


def test_an_interval_needs_ten_repeats_and_says_so_otherwise():
    rng = np.random.default_rng(0)
    lo, hi, note = gain_interval(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5]))
    assert math.isnan(lo) and math.isnan(hi) and note == "3 repeats: too few for an interval"
    f = rng.uniform(1, 2, 12)
    lo, hi, note = gain_interval(f, 0.7 * f * rng.uniform(0.9, 1.1, 12))
    assert lo < 0.3 < hi and 0 < lo and "bootstrap" in note


def _paired_runs(n_seeds: int, short_wait: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two policies on the same 10 requests per repeat; under FCFS, request 0 of repeat 0 (a 2-token
    answer) waits `short_wait` s; every other request has the same latencies under both."""
    req_rows, run_rows = [], []
    for s in range(n_seeds):
        for pol, pred in (("fcfs", "none"), ("oracle-sjf", "clairvoyant")):
            rows = []
            for k in range(10):
                out = 2 if k == 0 else 100
                wait = short_wait if (k == 0 and s == 0 and pol == "fcfs") else 1.0 + 0.1 * s
                rows.append({"rid": f"s{s}-l0.9-{pol}-{k}", "arrival": float(k), "first_token": k + wait,
                             "finish": k + wait + 0.05 * out, "output_tokens": out, "status": "finished",
                             "policy": pol, "predictor": pred, "load": 0.9, "seed": s})
            r = pd.DataFrame(rows)
            m = latency_metrics(r["arrival"], r["first_token"], r["finish"], r["output_tokens"],
                                np.zeros(len(r), bool), end=float(r["finish"].max()), slo=SLO())
            run_rows += [{"policy": pol, "predictor": pred, "load": 0.9, "seed": s, "metric": k, "value": v}
                         for k, v in m.items()]
            req_rows += rows
    return pd.DataFrame(run_rows), pd.DataFrame(req_rows)


def test_leave_one_out_shows_one_request_carrying_the_gain():
    runs, reqs = _paired_runs(3, short_wait=13.0)
    pg = paired_gains(runs, reqs, SLO()).set_index("metric")
    ptl = pg.loc["per_token_latency_mean"]
    assert ptl["gain"] > 0.5 and ptl["interval"] == "3 repeats: too few for an interval"
    assert ptl["loo_low"] == pytest.approx(0.0, abs=1e-12)  # without the 2-token answer there is no gain
    assert ptl["loo_request"] == "seed 0 request 0"
    assert ptl["p_value"] == pytest.approx(1.0)  # only repeat 0 differs: +d, 0, 0 gives p = 1
    assert pg.loc["per_token_latency_p50", "gain"] == pytest.approx(0.0, abs=1e-12)  # the median does not move
    txt = paired_table(pg.reset_index())
    assert "ptl mean" in txt and "3 repeats: too few for an interval" in txt and "+0% … " in txt


def test_latency_metrics_report_short_answers_apart_and_the_longest_wait():
    arrival = np.array([0.0, 0.0, 0.0])
    first = np.array([1.0, 5.0, 2.0])
    finish = np.array([2.0, 6.0, 42.0])
    out = np.array([2, 10, 40])
    m = latency_metrics(arrival, first, finish, out, np.zeros(3, bool), end=42.0, slo=SLO(short_tokens=16))
    assert m["per_token_latency_mean_short"] == pytest.approx(np.mean([2 / 2, 6 / 10]))
    assert m["per_token_latency_mean_long"] == pytest.approx(42 / 40) and m["n_short"] == 2
    assert m["ttft_max"] == 5.0 and m["jct_max"] == 42.0


def test_inter_token_latency_is_every_gap_between_a_requests_tokens():
    clock = VirtualClock()
    reqs = [ServeRequest("a", "p", [1] * 50, 5, 0.0, 5.0), ServeRequest("b", "q", [1] * 20, 3, 0.0, 3.0)]
    run = replay(reqs, FakeEngine(PROF, clock), get_policy("fcfs"), NoPredictor(), clock)
    m = itl_metrics(run.requests, run.steps)
    d = (run.steps["t_end"] - run.steps["t_start"]).to_numpy()
    # a: gaps = steps 2..5, b: steps 2..3 (both start in step 1)
    assert m["itl_mean"] == pytest.approx(np.mean(np.r_[d[1:5], d[1:3]]))
    assert m["itl_p50"] == pytest.approx(np.median(np.r_[d[1:5], d[1:3]]))


def test_step_drift_measures_a_run_that_ran_off_the_profile():
    steps = _burst()
    assert step_drift(steps, PROF, skip=0) == pytest.approx(1.0)
    assert step_drift(_retime(steps, np.full(len(steps), 1.08)), PROF, skip=0) == pytest.approx(1.08)


def test_a_quiet_calibration_passes_and_a_busy_one_is_flagged_in_one_line():
    steps = _burst(40)
    rng = np.random.default_rng(1)
    quiet = _retime(steps, 1 + rng.normal(0, 0.01, len(steps)))
    chk = check_calibration(quiet, FakeEngine(PROF, VirtualClock()).limits, skip=0)
    assert chk.ok and chk.reason.startswith("calibration burst passes") and chk.r2 > 0.95
    # another process on the cores: a third of the steps take 1.5-3x as long
    noise = np.where(rng.random(len(steps)) < 0.3, rng.uniform(1.5, 3.0, len(steps)), 1.0)
    busy = _retime(steps, noise * (1 + rng.normal(0, 0.01, len(steps))))
    chk = check_calibration(busy, FakeEngine(PROF, VirtualClock()).limits, skip=0)
    assert not chk.ok and "\n" not in chk.reason and "looks busy" in chk.reason
    assert "R² 0.18 < 0.6" in chk.reason and "of steps over 1.5x their modelled time" in chk.reason
    assert f"spread {100 * chk.spread:.1f}%" in chk.reason and "no re-measure" in chk.reason  # every number
    # one stalled step (5 s) drags the NNLS fit, not the robust one
    stall = quiet.copy()
    stall.loc[len(stall) // 2:, ["t_start", "t_end"]] += 5.0
    stall.loc[len(stall) // 2, "t_start"] -= 5.0
    chk = check_calibration(stall, FakeEngine(PROF, VirtualClock()).limits, skip=0)
    for k in ("t_seq", "t_prefill_token"):
        assert getattr(chk.robust.profile, k) == pytest.approx(getattr(PROF, k), rel=0.05), k
    assert abs(chk.fit.profile.t_seq / PROF.t_seq - 1) > 0.2
    # a quiet burst whose re-measure runs 20% slower is flagged too
    chk = check_calibration(quiet, FakeEngine(PROF, VirtualClock()).limits, skip=0,
                            recheck=_retime(_burst(8, 5), np.full(len(_burst(8, 5)), 1.2)))
    assert not chk.ok and "a re-measure ran +20." in chk.reason


def test_a_busy_calibration_is_refused_when_asked():
    with pytest.raises(DataError, match="check on_fail"):
        CheckBounds(on_fail="maybe")
    clock = VirtualClock()
    s = ServeSettings(loads=[0.8], seeds=[0], n_requests=10, policies=["fcfs"], calibration_requests=12, fit_skip=0,
                      check=CheckBounds(min_r2=1.01, on_fail="refuse"))  # no fit can pass
    with pytest.raises(DataError, match=r"^calibration burst looks busy .*R² 1\.00 < 1\.01.*on_fail=warn$"):
        calibrate(FakeEngine(PROF, clock), _pool(), s, clock)
    s.check = CheckBounds()
    fit, run, chk = calibrate(FakeEngine(PROF, clock), _pool(), s, clock)
    assert chk.ok and chk.shift == pytest.approx(0.0, abs=1e-9) and fit.r2 == pytest.approx(1.0)


def test_grid_reports_per_run_fidelity_drift_and_the_bench_tables():
    pool = _pool()
    pred = {i: float(np.mean(s)) for i, s in zip(pool.ids, pool.samples, strict=True)}
    clock = VirtualClock()
    s = ServeSettings(loads=[0.9], seeds=[0, 1], n_requests=20, policies=["fcfs", "sjf", "oracle"],
                      calibration_requests=12, fit_skip=0)
    make = lambda pol: ("mean", TablePredictor(pred, "mean") if pol == "sjf" else NoPredictor())  # noqa: E731
    res = run_grid(FakeEngine(PROF, clock), pool, s, make, clock=clock, progress=lambda m: None)
    assert res.check is not None and res.check.ok
    assert np.allclose(res.drift["drift"], 1.0) and not res.drift["drifting"].any()
    fs = fidelity_summary(res.fidelity)
    assert {"drift_min", "drift_max", "n_drifting", "max_abs_err"} <= set(fs.columns)
    assert {"per_token_latency_p99", "ttft_p50", "jct_max", "per_token_latency_mean_short"} <= set(fs["metric"])
    assert "(0/2)" in fidelity_table(fs, 0.05)
    real = res.runs[res.runs["hardware"] == "fake"]
    assert {"itl_mean", "itl_p99", "ttft_max"} <= set(real["metric"])
    assert "ITL mean / median / p99" in latency_table(real) and "answers < 16 tok" in per_token_table(real, SLO())
    pg = paired_gains(real, res.requests, s.slo)
    assert set(pg["policy"]) == {"sjf", "oracle-sjf"} and (pg["n"] == 2).all()
    assert (pg["interval"] == "2 repeats: too few for an interval").all()
    assert (pg["loo_low"] <= pg["gain"] + 1e-12).all() and (pg["gain"] <= pg["loo_high"] + 1e-12).all()


def test_a_run_replayed_at_its_own_speed_leaves_only_the_queueing_models_error():
    """A calibration made while the machine ran 25% faster misses every run (drift 1.25); replayed on the profile
    at each run's own measured speed, the fake engine's runs are matched again: the miss was the speed."""
    from dataclasses import replace

    clock = VirtualClock()
    s = ServeSettings(loads=[0.9], seeds=[0, 1], n_requests=20, policies=["fcfs", "oracle"], calibration_requests=12,
                      fit_skip=0)
    res = run_grid(FakeEngine(PROF, clock), _pool(), s, lambda pol: ("none", NoPredictor()), clock=clock,
                   progress=lambda m: None)
    fast = replace(res.fit, profile=at_speed(res.fit.profile, 1 / 1.25))
    assert res.fidelity_over_time.empty  # the speed over time is replayed only when asked (serve.speed_window_s)
    s.speed_window_s = 5.0
    again = resimulate(res.requests, res.steps, res.runs, "fake", FakeEngine(PROF, clock).limits, fast, res.capacity, s)
    assert np.allclose(again.drift["drift"], 1.25) and again.drift["drifting"].all()
    assert (again.fidelity_over_time.query("metric == 'ttft_mean'")["abs_err"] < 1e-6).all()
    assert res.fidelity_tracked.empty and len(again.fidelity_tracked) == len(again.fidelity_over_time)
    # tracked window by window from the previous run's drift: the first run's first 5 s at the calibration's
    # (wrong) speed, every later run exact
    tracked = again.fidelity_tracked.query("metric == 'jct_mean'")["abs_err"].to_numpy()
    assert 0 < tracked[0] < again.fidelity.query("metric == 'jct_mean'")["abs_err"].iloc[0] and (tracked[1:] < 1e-6).all()
    off = again.fidelity.query("metric == 'jct_mean'")["abs_err"]
    at = again.fidelity_at_speed.query("metric == 'jct_mean'")["abs_err"]
    assert len(at) == 4 and (off > 0.1).all() and (at < 1e-6).all()
    table = fidelity_table(fidelity_summary(again.fidelity_at_speed), 0.05)
    assert table.count("1.250–1.250 (2/2)") == 2 and "| 0.0% (0.0%) |" in table  # both policies' runs, both off
    # tracking the machine between runs: each run at the speed of the one before (the first at the calibration's)
    track = again.fidelity_tracking.query("metric == 'jct_mean'")["abs_err"].to_numpy()
    assert track[0] > 0.1 and (track[1:] < 1e-6).all()
    with pytest.raises(ValueError, match="positive"):
        at_speed(PROF, math.nan)


def test_decode_and_prefill_speeds_apart_recover_a_calibration_off_by_two_factors():
    """A calibration whose decode terms ran 25% fast and whose prefills ran 60% fast: the one-number drift cannot
    match the runs; the decode drift and prefill factor read apart from each run's steps give 1.25 and 1.6 and
    replay them exactly."""
    from dataclasses import replace

    from lengthpred.serve.fidelity import regime_speeds

    clock = VirtualClock()
    s = ServeSettings(loads=[0.9], seeds=[0, 1], n_requests=20, policies=["fcfs", "oracle"], calibration_requests=12,
                      fit_skip=0)
    res = run_grid(FakeEngine(PROF, clock), _pool(), s, lambda pol: ("none", NoPredictor()), clock=clock,
                   progress=lambda m: None)
    off = at_speed(res.fit.profile, 1 / 1.25, 1 / 1.6)
    for _, st in res.steps.groupby(["policy", "seed"]):
        assert np.allclose(regime_speeds(st, off, skip=0), (1.25, 1.6))
    again = resimulate(res.requests, res.steps, res.runs, "fake", FakeEngine(PROF, clock).limits,
                       replace(res.fit, profile=off), res.capacity, s)
    one = again.fidelity_at_speed.query("metric == 'ttft_mean'")["abs_err"]
    two = again.fidelity_regimes.query("metric == 'ttft_mean'")["abs_err"]
    assert len(two) == 4 and (two < 1e-6).all() and (one > 1e-3).all()
    assert np.isnan(regime_speeds(res.steps.iloc[:0], PROF)).all()


class _Wandering(VirtualClock):
    """A machine whose steps run 40% slower from t = 4 s on."""

    def advance(self, dt: float) -> None:
        super().advance(dt * (1.0 if self.now() < 4.0 else 1.4))


def _slowed_midway_run():
    """60 FCFS requests on the fake engine of a machine that slows midway (`_Wandering`), queued past the change."""
    clock = _Wandering()
    reqs = [ServeRequest(f"r{i}", f"p{i}", [1] * (20 + 7 * i % 60), 30 + 17 * i % 90, 0.12 * i, 0.0) for i in range(60)]
    return replay(reqs, FakeEngine(PROF, clock), get_policy("fcfs"), NoPredictor(), clock)


def test_a_run_whose_machine_slowed_midway_is_replayed_exactly_at_its_speed_over_time():
    """The fake engine's steps run 40% slower from t = 4 s on (the machine's speed wandering within a run, as the
    committed cap-16 runs' did by 5-8% between 10 s windows): the run's one drift misses its TTFT, since a queued
    request waits for a slot that a slower batch frees later; its speed read in 2 s windows (`speed_windows`)
    replays every first token and finish exactly, so the queueing model itself is right."""
    from lengthpred.serve.fidelity import simulate_run, speed_windows

    run = _slowed_midway_run()
    assert run.steps["n_waiting"].max() > 0 and run.steps["t_start"].max() > 8.0  # queued, and long after the change
    win = speed_windows(run.steps, PROF, 2.0, skip=0)
    assert [f for _, _, f in win] == pytest.approx([1.0, 1.0] + [1.4] * (len(win) - 2))
    assert win[-1][1] == math.inf
    over_time = simulate_run(run.requests, get_policy("fcfs"), PROF, slowdown=win)
    np.testing.assert_allclose(over_time["first_token"], run.requests["first_token"], atol=1e-9)
    np.testing.assert_allclose(over_time["finish"], run.requests["finish"], atol=1e-9)
    one = simulate_run(run.requests, get_policy("fcfs"), at_speed(PROF, step_drift(run.steps, PROF, 0)))
    ttft = (run.requests["first_token"] - run.requests["arrival"]).mean()
    assert abs((one["first_token"] - run.requests["arrival"]).mean() / ttft - 1) > 0.05
    assert speed_windows(run.steps.iloc[:0], PROF, 2.0) == []
    with pytest.raises(ValueError, match="positive"):
        speed_windows(run.steps, PROF, 0.0)


def test_tracking_the_speed_window_by_window_reads_only_earlier_windows():
    """The machine slows 40% from t = 4 s on: tracked causally (each 2 s window at the speed of the window before
    it), only the window right after the change runs at the old speed, so the replay misses TTFT far less than the
    profile does, though not exactly (the lagged window's lost time stays in a backlogged queue); a window's speed
    reads no step of it or of later windows; a window without steps carries the last speed on, and the first runs
    at the profile's."""
    from lengthpred.serve.fidelity import simulate_run, speed_windows, tracked_windows

    run = _slowed_midway_run()
    win, tracked = speed_windows(run.steps, PROF, 2.0, skip=0), tracked_windows(run.steps, PROF, 2.0, skip=0)
    assert [(a, b) for a, b, _ in tracked] == [(a, b) for a, b, _ in win]
    assert [f for _, _, f in tracked] == pytest.approx([1.0, 1.0, 1.0] + [1.4] * (len(win) - 3))
    ttft = (run.requests["first_token"] - run.requests["arrival"]).mean()

    def miss(r):
        return abs((r["first_token"] - run.requests["arrival"]).mean() / ttft - 1)

    plain = simulate_run(run.requests, get_policy("fcfs"), PROF)
    causal = simulate_run(run.requests, get_policy("fcfs"), PROF, slowdown=tracked)
    assert miss(causal) < 0.5 * miss(plain) and miss(causal) > 1e-6  # closer, not exact: one window lags
    early = tracked_windows(run.steps[run.steps["t_start"] < 8.0], PROF, 2.0, skip=0)  # the steps of [8, ...) unread
    assert [f for _, _, f in early] == pytest.approx([f for _, _, f in tracked][:len(early)]) and len(early) == 4
    gap = run.steps[(run.steps["t_start"] < 4.0) | (run.steps["t_start"] >= 6.0)]  # no step in the window [4, 6)
    assert [f for _, _, f in tracked_windows(gap, PROF, 2.0, skip=0)][:4] == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert tracked_windows(run.steps.iloc[:0], PROF, 2.0) == []
    # a run can start from the speed known before it (the previous run's drift) instead of the profile's
    assert [f for _, _, f in tracked_windows(run.steps, PROF, 2.0, skip=0, start=1.3)][:2] == pytest.approx([1.3, 1.0])
    with pytest.raises(ValueError, match="positive"):
        tracked_windows(run.steps, PROF, 2.0, start=0.0)


def test_the_named_vllm_profile_is_the_committed_calibration():
    import json

    from lengthpred.paths import REPO_ROOT
    from lengthpred.sched.core.hardware import get_profile

    stored = json.loads((REPO_ROOT / "data/reference/smollm2-135m/serve_demo/profile.json").read_text())["profile"]
    prof = get_profile("cpu-smollm2-135m-vllm").to_dict()
    for k in ("t_base", "t_seq", "t_ctx", "t_prefill_token", "max_batch", "token_budget", "kv_blocks", "block_size"):
        assert prof[k] == stored[k], k


def test_the_load_sweep_figure_is_written(tmp_path):
    from lengthpred.sched.sweep.plots import plot_gain_and_starvation

    rows, gains = [], []
    for load in (0.5, 0.8, 1.0):
        for pol, pred in (("fcfs", "none"), ("sjf", "linear"), ("oracle-sjf", "clairvoyant")):
            rows += [(pol, pred, load, m, v * load) for m, v in (("jct_p99", 30.0), ("max_wait", 12.0))]
            gains.append((pol, pred, load, "gain_vs_fcfs", 0.0 if pol == "fcfs" else 0.3 * load, 0.1, 0.5, 10))
    summary = pd.DataFrame(rows, columns=["policy", "predictor", "load", "metric", "value"])
    g = pd.DataFrame(gains, columns=["policy", "predictor", "load", "metric", "value", "ci_low", "ci_high", "n"])
    assert plot_gain_and_starvation(summary, g, tmp_path / "g.png").stat().st_size > 10_000


@pytest.mark.integration
def test_the_committed_runs_read_with_the_new_statistics():
    """The committed runs' serving numbers, from the committed runs (no engine)."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.stages.serve import resimulated

    run = REPO_ROOT / "data/reference/smollm2-135m/serve_demo"
    assert (run / "serve.json").is_file(), f"{run} is committed with the repo"
    res, s, name, _ = resimulated(run)
    assert res.check is not None and res.check.ok and res.check.r2 == pytest.approx(0.834, abs=1e-3)
    live = res.drift[res.drift["policy"] == "sjf"]  # steps with no prediction in flight: one live run drifts
    assert live["drifting"].sum() == 1 and live["drift"].max() == pytest.approx(1.086, abs=1e-3)
    assert not res.drift[res.drift["policy"] != "sjf"]["drifting"].any()
    real = res.runs[res.runs["hardware"] == name]
    pg = paired_gains(real, res.requests, s.slo).set_index(["load", "policy", "metric"])
    o = pg.loc[(0.95, "oracle-sjf", "per_token_latency_mean")]
    assert o["gain"] == pytest.approx(0.596, abs=1e-3) and o["p_value"] == pytest.approx(0.25)
    assert o["loo_low"] == pytest.approx(0.247, abs=1e-3) and o["interval"] == "3 repeats: too few for an interval"
    assert abs(pg.loc[(0.95, "oracle-sjf", "per_token_latency_p50"), "gain"]) < 0.03  # the median barely moves
    short = real[(real["metric"] == "n_short")].groupby(["load", "policy"])["value"].sum()
    assert (short == 6).all()


def test_step_drift_charges_a_step_after_a_left_out_one_only_its_own_cycle():
    """Steps that overlapped a live prediction leave the drift; the quiet step after one is charged its own
    cycle, not the busy step's too (durations are taken on the whole run before the mask)."""
    steps = _burst().assign(n_predicting=0)
    busy = np.zeros(len(steps), bool)
    busy[3::4] = True  # every fourth step overlapped a prediction and ran 2.4x slower
    steps = _retime(steps, np.where(busy, 2.4, 1.0)).assign(n_predicting=busy.astype(int))
    assert step_drift(steps, PROF, skip=0) == pytest.approx(1.0)


def test_a_blank_run_leaves_the_point_gain_as_it_leaves_the_test():
    """An overloaded (blank) run on one side drops its repeat from both means, not from one."""
    rows = []
    for seed in range(10):
        rows.append(("fcfs", "none", 0.9, seed, "ttft_mean", 2.0 if seed else 100.0))
        rows.append(("sjf", "h", 0.9, seed, "ttft_mean", 1.0 if seed else math.nan))  # seed 0: overloaded
    runs = pd.DataFrame(rows, columns=["policy", "predictor", "load", "seed", "metric", "value"])
    g = paired_gains(runs, pd.DataFrame(), SLO(), metrics=["ttft_mean"], loo=False).iloc[0]
    assert g["n"] == 9 and g["gain"] == pytest.approx(0.5)  # not 1 - 1 / mean(100, 2, ..., 2)


def test_the_order_effect_separates_prefill_first_from_the_prediction():
    """scripts/serve_order_effect.py on the committed runs: serving prefills first cuts FCFS's simulated TTFT
    by itself, while the per-token gain comes from the predictions."""
    import importlib.util

    from lengthpred.paths import REPO_ROOT

    run = REPO_ROOT / "data/reference/smollm2-135m/serve_demo"
    assert (run / "serve.json").is_file(), f"{run} is committed with the repo"
    spec = importlib.util.spec_from_file_location("order", REPO_ROOT / "scripts/serve_order_effect.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t = mod.order_effect(run).groupby(["load", "order", "prefill_first"]).mean(numeric_only=True)
    for load in (0.8, 0.95):
        plain, first = t.loc[(load, "fcfs", False)], t.loc[(load, "fcfs", True)]
        assert first["ttft_mean"] < 0.5 * plain["ttft_mean"]  # the order alone
        assert abs(first["per_token_latency_mean"] / plain["per_token_latency_mean"] - 1) < 0.05
        assert t.loc[(load, "sjf (predictions)", False), "per_token_latency_mean"] < 0.7 * plain["per_token_latency_mean"]
    assert mod.main([]) == 2


def test_the_ten_repeat_engine_readout_run_reads_as_committed():
    """The headline folder (the README renders it from docs/results/data/serving): 10 paired repeats, the engine
    readout's per-token mean gain with an interval."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.stages.serve import resimulated

    run = REPO_ROOT / "data/reference/smollm2-135m/serve_demo_engine10"
    assert (run / "serve.json").is_file(), f"{run} is committed with the repo"
    res, s, name, _ = resimulated(run)
    real = res.runs[res.runs["hardware"] == name]
    pg = paired_gains(real, res.requests, s.slo).set_index(["policy", "metric"])
    sjf, orc = pg.loc[("sjf", "per_token_latency_mean")], pg.loc[("oracle-sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["interval"].startswith("95% paired bootstrap")
    assert sjf["gain"] == pytest.approx(0.323, abs=2e-3) and sjf["ci_low"] > 0.1 and sjf["p_value"] < 0.02
    assert orc["gain"] == pytest.approx(0.392, abs=2e-3) and orc["ci_low"] > 0.1
    assert sjf["loo_low"] > 0.2
    assert pg.loc[("sjf", "jct_p99"), "gain"] < -0.2  # the long requests pay


def test_the_natural_answer_runs_read_as_committed():
    """The committed runs' natural-answer block, recomputed from the committed runs: SJF's per-token gain over FCFS with
    an interval above 0, over fcfs-pf across 0; aging against SJF shortens a run's longest request."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.serve.report_stats import AGING_SHOWN
    from lengthpred.stages.serve import resimulated

    res, s, name, _ = resimulated(REPO_ROOT / "data/reference/smollm2-135m/serve_natural10")
    real = res.runs[res.runs["hardware"] == name]

    def gains(baseline: str, **kw) -> pd.DataFrame:
        return paired_gains(real, res.requests, s.slo, baseline=baseline, **kw).set_index(["policy", "metric"])

    sjf = gains("fcfs").loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.208, abs=2e-3) and sjf["ci_low"] > 0
    over_pf = gains("fcfs-prefill-first").loc[("sjf", "per_token_latency_mean")]
    assert over_pf["gain"] == pytest.approx(0.094, abs=2e-3) and over_pf["ci_low"] < 0 < over_pf["ci_high"]
    aging = gains("sjf", metrics=[m for m, _ in AGING_SHOWN]).loc[("sjf-aging", "jct_max")]
    assert aging["gain"] == pytest.approx(0.179, abs=2e-3) and aging["ci_low"] > 0
    at_speed = res.fidelity_at_speed.query("metric == 'jct_mean'")["abs_err"]
    assert len(at_speed) == 40 and at_speed.mean() < 0.02  # the queueing model at each run's own speed


def test_the_load_08_replication_and_the_aging_runs_read_as_committed():
    """The committed runs' load-0.8 and aging headlines, recomputed from the committed runs."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.serve.report_stats import AGING_SHOWN
    from lengthpred.stages.serve import resimulated

    res, s, name, _ = resimulated(REPO_ROOT / "data/reference/smollm2-135m/serve_load08")
    real = res.runs[res.runs["hardware"] == name]
    pg = paired_gains(real, res.requests, s.slo).set_index(["policy", "metric"])
    sjf = pg.loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.153, abs=2e-3) and sjf["ci_low"] < 0 < sjf["ci_high"]
    assert pg.loc[("sjf", "ttft_mean"), "ci_low"] > 0.3 and pg.loc[("sjf", "jct_p99"), "ci_high"] < 0
    res, s, name, _ = resimulated(REPO_ROOT / "data/reference/smollm2-135m/serve_aging10")
    real = res.runs[res.runs["hardware"] == name]
    pg = paired_gains(real, res.requests, s.slo, baseline="sjf", metrics=[m for m, _ in AGING_SHOWN])
    pg = pg.set_index(["policy", "metric"])
    ptl = pg.loc[("sjf-aging", "per_token_latency_mean")]
    assert ptl["n"] == 10 and ptl["gain"] == pytest.approx(-0.142, abs=2e-3) and ptl["ci_high"] < 0
    for m in ("jct_max", "ttft_max"):  # the tail: gains whose intervals include 0
        assert pg.loc[("sjf-aging", m), "ci_low"] < 0 < pg.loc[("sjf-aging", m), "ci_high"]


def _reference(folder: str):
    """A committed engine run resimulated: its results, its real-engine runs, and its paired gains over a baseline."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.stages.serve import resimulated

    res, s, name, _ = resimulated(REPO_ROOT / "data/reference/smollm2-135m" / folder)
    real = res.runs[res.runs["hardware"] == name]

    def gains(baseline: str) -> pd.DataFrame:
        return paired_gains(real, res.requests, s.slo, baseline=baseline).set_index(["policy", "metric"])

    return res, real, gains


@pytest.mark.datasets  # resimulating trace arrivals reads the Azure trace from the datasets
def test_the_trace_arrival_runs_read_as_committed():
    """The committed runs' trace-arrival block, recomputed from the committed runs (which also checks that a run with
    trace arrivals resimulates: it reads its trace again): the predictions' per-token gain over fcfs-pf has an
    interval above 0, and fcfs-pf alone gains nothing per token over FCFS."""
    _, _, gains = _reference("serve_trace10")
    over_fcfs, over_pf = gains("fcfs"), gains("fcfs-prefill-first")
    sjf = over_fcfs.loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.298, abs=2e-3) and sjf["ci_low"] > 0
    assert over_fcfs.loc[("oracle-sjf", "per_token_latency_mean"), "gain"] == pytest.approx(0.386, abs=2e-3)
    pf = over_fcfs.loc[("fcfs-prefill-first", "per_token_latency_mean")]
    assert pf["ci_low"] < 0 < pf["ci_high"]
    alone = over_pf.loc[("sjf", "per_token_latency_mean")]
    assert alone["gain"] == pytest.approx(0.308, abs=2e-3) and alone["ci_low"] > 0
    assert over_pf.loc[("sjf", "ttft_mean"), "ci_low"] < 0 < over_pf.loc[("sjf", "ttft_mean"), "ci_high"]
    assert over_fcfs.loc[("sjf", "jct_p99"), "ci_high"] < 0  # the long requests pay


@pytest.mark.datasets  # resimulating trace arrivals reads the Azure trace from the datasets
def test_the_rerun_with_blas_on_one_thread_reads_as_committed():
    """The committed runs' rerun of the trace-arrival repeats after the per-completion stall was removed: the
    predictions' per-token gain over fcfs-pf holds, E2E mean now gains over FCFS, the long requests still pay,
    and an RLS update takes under a millisecond (it took 5-6 ms when BLAS threads spun)."""
    _, real, gains = _reference("serve_trace10_blas1")
    over_fcfs, over_pf = gains("fcfs"), gains("fcfs-prefill-first")
    sjf = over_fcfs.loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.287, abs=2e-3) and sjf["ci_low"] > 0
    assert over_fcfs.loc[("oracle-sjf", "per_token_latency_mean"), "gain"] == pytest.approx(0.345, abs=2e-3)
    alone = over_pf.loc[("sjf", "per_token_latency_mean")]
    assert alone["gain"] == pytest.approx(0.311, abs=2e-3) and alone["ci_low"] > 0
    assert over_fcfs.loc[("sjf", "jct_mean"), "ci_low"] > 0
    assert over_fcfs.loc[("sjf", "jct_p99"), "ci_high"] < 0
    updates = real[(real["policy"] == "sjf") & (real["metric"] == "update_ms_mean")]["value"]
    assert len(updates) == 10 and updates.max() < 1.0


def test_the_batch_cap_8_runs_read_as_committed():
    """The committed runs' cap-8 block, recomputed from the committed runs: with 8 slots SJF and the oracle still gain
    per-token mean with intervals above 0, the median does not move, and at each run's own speed the simulator is
    within 5% on every mean (calibrated at the cap it serves with)."""
    res, _, gains = _reference("serve_cap8_10")
    assert "re-measure +0.3%" in res.check.reason  # the stored re-measure, not "no re-measure"
    over_fcfs = gains("fcfs")
    sjf = over_fcfs.loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.151, abs=2e-3) and sjf["ci_low"] > 0
    assert over_fcfs.loc[("oracle-sjf", "per_token_latency_mean"), "gain"] == pytest.approx(0.173, abs=2e-3)
    for policy in ("sjf", "oracle-sjf"):
        median = over_fcfs.loc[(policy, "per_token_latency_p50")]
        assert median["ci_low"] < 0 < median["ci_high"]
    at = res.fidelity_at_speed
    means = at[at["metric"].isin(["per_token_latency_mean", "ttft_mean", "jct_mean", "tpot_mean"])]
    assert len(means) == 120 and means.groupby(["policy", "metric"])["abs_err"].mean().max() < 0.05


def test_the_batch_cap_16_runs_read_as_committed():
    """The committed runs' cap-16 finding, recomputed from the committed runs: 40 requests never fill 16 slots, so neither
    order gains per-token latency (intervals across 0) while the queue stays near empty."""
    _, real, gains = _reference("serve_cap16_10")
    over_fcfs = gains("fcfs")
    for policy in ("sjf", "oracle-sjf"):
        ptl = over_fcfs.loc[(policy, "per_token_latency_mean")]
        assert ptl["n"] == 10 and ptl["ci_low"] < 0 < ptl["ci_high"]
    assert over_fcfs.loc[("oracle-sjf", "per_token_latency_mean"), "gain"] == pytest.approx(0.007, abs=2e-3)
    occupancy = real[real["metric"].isin(["batch_mean", "queue_mean"])].groupby("metric")["value"].mean()
    assert occupancy["batch_mean"] < 10 and occupancy["queue_mean"] < 0.1


def test_the_batch_cap_16_runs_of_120_requests_read_as_committed():
    """The committed runs' cap-16 block with 120 requests per run, recomputed from the committed runs: the slots fill, both
    orders gain per-token mean with bootstrap intervals above 0 (the sign-flip p stays above 0.05), the median's
    interval spans 0, and both pay on E2E p99."""
    res, real, gains = _reference("serve_cap16_120")
    assert "re-measure -7.3%" in res.check.reason
    over_fcfs = gains("fcfs")
    for policy, gain in (("sjf", 0.230), ("oracle-sjf", 0.255)):
        ptl = over_fcfs.loc[(policy, "per_token_latency_mean")]
        assert ptl["n"] == 10 and ptl["gain"] == pytest.approx(gain, abs=2e-3) and ptl["ci_low"] > 0
        assert ptl["p_value"] > 0.05
        median = over_fcfs.loc[(policy, "per_token_latency_p50")]
        assert median["ci_low"] < 0 < median["ci_high"]
        assert over_fcfs.loc[(policy, "jct_p99"), "ci_high"] < 0
    occupancy = real[real["metric"].isin(["batch_mean", "queue_mean"])].groupby("metric")["value"].mean()
    assert occupancy["batch_mean"] > 12 and occupancy["queue_mean"] > 2


def test_the_load_08_rerun_after_the_stall_fix_reads_as_committed():
    """The committed runs' load-0.8 rerun (stall removed, fcfs-pf added): the per-token gain now has an interval above 0
    over FCFS and over fcfs-pf, the long requests pay far less than in the first load-0.8 runs, and the
    predictions cost TTFT against fcfs-pf."""
    _, real, gains = _reference("serve_load08_blas1")
    over_fcfs, over_pf = gains("fcfs"), gains("fcfs-prefill-first")
    sjf = over_fcfs.loc[("sjf", "per_token_latency_mean")]
    assert sjf["n"] == 10 and sjf["gain"] == pytest.approx(0.249, abs=2e-3) and sjf["ci_low"] > 0
    assert over_fcfs.loc[("oracle-sjf", "per_token_latency_mean"), "gain"] == pytest.approx(0.304, abs=2e-3)
    assert over_fcfs.loc[("sjf", "jct_p99"), "ci_low"] < 0 < over_fcfs.loc[("sjf", "jct_p99"), "ci_high"]
    alone = over_pf.loc[("sjf", "per_token_latency_mean")]
    assert alone["gain"] == pytest.approx(0.218, abs=2e-3) and alone["ci_low"] > 0
    assert over_pf.loc[("sjf", "ttft_mean"), "ci_high"] < 0
    updates = real[(real["policy"] == "sjf") & (real["metric"] == "update_ms_mean")]["value"]
    assert len(updates) == 10 and updates.max() < 2.5 and updates.median() < 1.0  # 5-6 ms with the stall
