"""The machine-steadiness summary (`lengthpred.lab.steadiness`): windows, drift at two scales, steal share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthpred.lab.steadiness import (
    burst_table,
    drift_sources,
    repeated_bursts,
    steadiness,
    steal_share,
    window_means,
)
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.engine import EngineLimits


def back_to_back(dts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start times of steps timed back to back."""
    dts = np.asarray(dts, float)
    return np.r_[0.0, np.cumsum(dts)[:-1]], dts


def test_window_means_drops_the_partial_last_window() -> None:
    t, dt = back_to_back(np.full(25, 0.5))  # 12.5 s of steps: windows of 5 s → two full, one partial
    w = window_means(t, dt, 5.0)
    assert w["start"].tolist() == [0.0, 5.0]
    assert w["steps"].tolist() == [10, 10]
    assert w["mean_ms"].tolist() == pytest.approx([500.0, 500.0])


def test_steadiness_reads_a_step_change_at_both_scales() -> None:
    # 0.05 s steps for 300 s, then 0.055 s (10% slower) for 150 s: three 150 s windows at 1.0, 1.0, 1.1
    t, dt = back_to_back(np.r_[np.full(6000, 0.05), np.full(2728, 0.055)])
    s = steadiness(t, dt, short_s=2.0, run_s=150.0, bound=0.05)
    assert s["run_windows"] == 3
    assert s["drift_first_min"] == pytest.approx(1.0, abs=1e-3)
    assert s["drift_first_max"] == pytest.approx(1.1, abs=2e-3)
    assert s["drift_previous_over"] == pytest.approx(0.5)  # 1.0 → 1.0 holds, 1.0 → 1.1 does not
    assert s["drift_previous_max"] == pytest.approx(0.1, abs=2e-3)
    assert s["within_run_p95"] < 0.01  # each window's short windows match it


def test_steadiness_sees_speed_moving_inside_a_run() -> None:
    # alternating 10 s at 0.04 s and 10 s at 0.06 s: every run window averages alike, the short ones do not
    dts = np.concatenate([np.full(250, 0.04) if i % 2 == 0 else np.full(166, 0.06) for i in range(60)])
    t, dt = back_to_back(dts)
    s = steadiness(t, dt, short_s=2.0, run_s=150.0)
    assert s["drift_previous_max"] < 0.05
    assert s["within_run_median"] > 0.15


def test_steadiness_needs_two_run_windows() -> None:
    t, dt = back_to_back(np.full(100, 0.05))
    with pytest.raises(ValueError, match="at least two 150 s windows"):
        steadiness(t, dt)


@pytest.mark.parametrize(("t", "dt"), [([], []), ([0.0, 1.0], [0.5])])
def test_window_means_refuses_mismatched_or_empty_steps(t: list, dt: list) -> None:
    with pytest.raises(ValueError, match="as many step times"):
        window_means(np.array(t), np.array(dt), 1.0)


def test_steal_share_per_window() -> None:
    t = np.arange(0, 301, 1.0)
    total = 200 * t  # 2 CPUs, 100 jiffies/s each
    steal = np.where(t < 150, 0.0, 20 * (t - 150))  # none in the first window, 10% of the time after
    share = steal_share(pd.DataFrame({"t": t, "steal": steal, "total": total}), run_s=150.0)
    assert share[0] == pytest.approx(0.0)
    assert share[1] == pytest.approx(0.1, abs=1e-3)


PROFILE = HardwareProfile("flat", t_base=0.01, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                          max_batch=4, token_budget=512, kv_blocks=100, block_size=16)


def burst(dts: np.ndarray, i: int, batch: int = 2) -> pd.DataFrame:
    """One burst's steps, back to back from t = 0 (so each step's cycle is its own time)."""
    t, dt = back_to_back(dts)
    n = len(dts)
    return pd.DataFrame({"t_start": t, "t_end": t + dt, "idle_before": np.r_[True, np.zeros(n - 1, bool)],
                         "batch": np.full(n, batch), "prefill_tokens": np.zeros(n, int),
                         "ctx_tokens": np.full(n, 100), "burst": i})


def test_repeated_bursts_separates_speed_from_the_step_models_misfit() -> None:
    # the profile says 10 ms a step; the engine takes 10 ms for 2 s, then 14 ms, over and over (a misfit the
    # flat model cannot follow), the same in both bursts; the second burst runs 10% slower throughout
    pattern = np.concatenate([np.full(200, 0.010) if k % 2 == 0 else np.full(143, 0.014) for k in range(20)])
    steps = pd.concat([burst(pattern, 0), burst(1.1 * pattern, 1)], ignore_index=True)
    r = repeated_bursts(steps, PROFILE, window_s=2.0, skip=2)
    assert r["vs_first"].tolist() == pytest.approx([1.0, 1.1])
    assert r["drift"].iloc[1] / r["drift"].iloc[0] == pytest.approx(1.1)
    assert (r["wander_profile"] > 0.1).all()  # against the profile each window looks like a change of speed
    assert (r["wander_first"] < 0.01).all()  # against the same work it is none


def test_repeated_bursts_does_not_compare_bursts_that_scheduled_other_steps() -> None:
    steps = pd.concat([burst(np.full(500, 0.01), 0), burst(np.full(500, 0.01), 1, batch=3)], ignore_index=True)
    r = repeated_bursts(steps, PROFILE)
    assert np.isnan(r["vs_first"].iloc[1]) and np.isnan(r["wander_first"].iloc[1])
    assert r["drift"].tolist() == pytest.approx([1.0, 1.0])


def test_repeated_bursts_needs_a_burst() -> None:
    with pytest.raises(ValueError, match="no bursts"):
        repeated_bursts(pd.DataFrame({"burst": []}), PROFILE)


TWO_TERM = HardwareProfile("two", t_base=0.010, t_seq=0.002, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                           max_batch=4, token_budget=512, kv_blocks=100, block_size=16)


def run_at(batches: np.ndarray, speed: float, profile: HardwareProfile = TWO_TERM) -> pd.DataFrame:
    """One run's steps served back to back at `speed` times `profile`'s step time."""
    dts = speed * (profile.t_base + profile.t_seq * batches)
    s = burst(dts, 0).drop(columns="burst")
    s["batch"] = batches
    return s


def test_drift_sources_sees_speed_that_a_pooled_profile_cannot_remove() -> None:
    rng = np.random.default_rng(0)
    runs = [run_at(rng.integers(1, 5, 400), v) for v in (1.0, 1.1, 0.95, 1.05)]
    r = drift_sources(runs, TWO_TERM)
    assert r["drift_min"] == pytest.approx(0.95) and r["drift_max"] == pytest.approx(1.1)
    assert r["sd_calibration"] == pytest.approx(np.std([1.0, 1.1, 0.95, 1.05], ddof=1))
    assert r["sd_pooled"] == pytest.approx(r["sd_calibration"], rel=0.2)
    assert r["changed_previous"] == pytest.approx(np.median([0.1, abs(0.95 / 1.1 - 1), abs(1.05 / 0.95 - 1)]))


def test_drift_sources_sees_coefficients_that_a_pooled_profile_fixes() -> None:
    # the engine runs exactly at TWO_TERM; the calibration put all the cost in t_base (right only at batch 4)
    wrong = HardwareProfile("wrong", t_base=0.018, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0,
                            max_batch=4, token_budget=512, kv_blocks=100, block_size=16)
    runs = [run_at(np.full(400, b), 1.0) for b in (1, 2, 3, 4)]
    r = drift_sources(runs, wrong)
    assert r["sd_calibration"] > 0.1  # drifts 0.67, 0.78, 0.89, 1.0
    assert r["sd_pooled"] < 0.01
    assert r["rho_batch"] == pytest.approx(1.0)


def test_drift_sources_needs_three_runs() -> None:
    with pytest.raises(ValueError, match="at least 3 runs"):
        drift_sources([run_at(np.full(50, 2), 1.0)] * 2, TWO_TERM)


def test_serve_drift_sources_script_on_a_committed_folder(capsys: pytest.CaptureFixture[str]) -> None:
    from scripts.serve_drift_sources import main

    folder = Path(__file__).resolve().parents[1] / "data/reference/smollm2-135m/serve_pf10_blas1"
    assert main([str(folder)]) == 0
    out = capsys.readouterr().out
    assert "| serve_pf10_blas1 | 20 | 1.00–1.05 | 1.2% | 1.2% |" in out


def test_serve_drift_sources_script_refuses_a_folder_that_is_no_serve_run(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from scripts.serve_drift_sources import main

    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_steadiness_within_run_sd_is_the_short_windows_spread_inside_each_run_window() -> None:
    dts = np.concatenate([np.full(250, 0.04) if i % 2 == 0 else np.full(166, 0.06) for i in range(60)])
    t, dt = back_to_back(dts)
    s = steadiness(t, dt, short_s=10.0, run_s=150.0)
    # 10 s windows alternate 0.04 / 0.06 s steps around a ~0.048 s run mean: ratios 0.83 and 1.25
    assert 0.18 < s["within_run_sd"] < 0.25
    assert s["drift_previous_median"] < 0.05


def test_steadiness_refuses_a_gap_with_no_steps() -> None:
    t, dt = back_to_back(np.full(9000, 0.05))  # 450 s of steps ...
    t = np.where(t >= 200, t + 400, t)  # ... with 400 s of nothing (a suspended process) from 200 s
    with pytest.raises(ValueError, match="no step in the 150 s window after 150 s"):
        steadiness(t, dt)


@pytest.mark.parametrize("bad", ["nan", "unsorted"])
def test_window_means_refuses_nan_or_unsorted_steps(bad: str) -> None:
    t, dt = back_to_back(np.full(100, 0.05))
    if bad == "nan":
        dt[-1] = np.nan
    else:
        t[[10, 11]] = t[[11, 10]]
    with pytest.raises(ValueError, match="finite and in order"):
        window_means(t, dt, 1.0)


def test_burst_table_keeps_each_bursts_label_beside_its_own_fixed_step() -> None:
    base = np.full(500, 0.01)
    steps = pd.concat([burst(base, 3), burst(1.2 * base, 4), burst(0.9 * base, 5)], ignore_index=True)
    kernel = pd.DataFrame({"burst": [3, 4, 5], "t": [0.0, 10.0, 20.0], "kernel_ms": [50.0, 60.0, 45.0]})
    limits = EngineLimits(4, 512, 100, 16, 2048)
    table = burst_table(steps, kernel, limits)
    assert table["burst"].tolist() == [3, 4, 5]
    assert table["vs_first"].tolist() == pytest.approx([1.0, 1.2, 0.9])
    assert table["kernel_vs_first"].tolist() == pytest.approx([1.0, 1.2, 0.9])


def test_repeated_bursts_needs_the_same_prefills_to_compare() -> None:
    a, b = burst(np.full(500, 0.01), 0), burst(np.full(500, 0.01), 1)
    b.loc[0, "prefill_tokens"] = 64
    r = repeated_bursts(pd.concat([a, b], ignore_index=True), PROFILE)
    assert np.isnan(r["vs_first"].iloc[1])
