"""Refined schedulers (issue 27 item 4): keys refreshed at checkpoints, the preemption cap, the oracle source."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched import HardwareProfile, Workload, capacity, get_profile, make_policy, simulate
from lengthpred.sched.core.refine import (
    RefinedPredictor,
    calibrated_source,
    fit_sigma,
    oracle_source,
    prompt_source,
    read_curve_spearman,
)
from lengthpred.sched.core.simulator import OverloadWarning
from lengthpred.sched.core.workload import arrival_times

ONE_SLOT = HardwareProfile(name="one-slot", t_base=0.01, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0,
                           t_swap_token=0.0, max_batch=1, token_budget=4096, kv_blocks=10_000, block_size=16)


@pytest.fixture(scope="module")
def busy() -> tuple[Workload, HardwareProfile]:
    prof = get_profile("cpu-smollm2-135m-vllm")
    rng = np.random.default_rng(3)
    n = 400
    out = np.maximum(1, rng.lognormal(np.log(120), 1.0, n)).astype(np.int64)
    prm = rng.integers(16, 300, n)
    return Workload(arrival_times(n, 0.95 * capacity(prof, prm, out), rng=rng), prm, out), prof


def _run(wl, prof, name, pred=None, cap=2):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)  # two requests in 20 ms: served to the end anyway
        return simulate(wl, prof, make_policy(name), pred, max_preemptions=cap, horizon=math.inf)


def test_keys_between_checkpoints_count_down_from_the_last_prediction():
    pr = RefinedPredictor(np.array([[100.0, 10.0, 50.0]]), every=8)
    assert pr.remaining(0, 0) == 100 and pr.remaining(0, 7) == 93
    assert pr.remaining(0, 8) == 10 and pr.remaining(0, 15) == 3
    assert pr.remaining(0, 40) == 26  # past the last checkpoint (16): its prediction less 24 tokens
    assert pr.total(0, 9) == 18 and pr.total(0, 16) == 66
    np.testing.assert_array_equal(pr.remaining_many(np.array([0, 0]), np.array([7.0, 15.0])), [93, 3])


def test_a_refreshed_key_changes_the_order_mid_flight():
    """One slot. A runs; B arrives predicted longer than A, so A keeps the slot while A's refreshed
    predictions stay short. When A's prediction jumps up at its checkpoint 8, B goes first."""
    wl = Workload(np.array([0.0, 0.02]), np.array([8, 8]), np.array([200, 20]))
    b = [1000.0] * 25
    for policy in ("refined-srpt", "refined-sjf"):
        kept = _run(wl, ONE_SLOT, policy, RefinedPredictor(np.array([[5.0] * 25, b]), 8), cap=None)
        assert kept.finish[0] < kept.finish[1] and kept.n_preempt.sum() == 0, policy
        moved = _run(wl, ONE_SLOT, policy, RefinedPredictor(np.array([[5.0] + [5000.0] * 24, b]), 8), cap=None)
        assert moved.finish[1] < moved.finish[0] and moved.n_preempt.tolist() == [1, 0], policy


@pytest.mark.parametrize("cap", [0, 1, 2])
def test_the_preemption_cap_is_respected(busy, cap):
    wl, prof = busy
    pr = calibrated_source(wl.output, {0.0: 1.5, 64.0: 1.5}, 8, np.random.default_rng(0), rho=0.5)
    for policy in ("refined-srpt", "refined-sjf"):
        res = _run(wl, prof, policy, pr, cap=cap)
        assert res.finished.all()
        assert res.n_preempt.max() <= cap  # the profile's memory never runs out here: all are priority ones
    assert _run(wl, prof, "refined-srpt", pr, cap=None).n_preempt.max() > 2  # the instance does preempt


def test_with_the_oracle_source_refined_srpt_is_oracle_srpt(busy):
    wl, prof = busy
    for cap in (2, None):
        a = _run(wl, prof, "oracle-srpt", cap=cap)
        b = _run(wl, prof, "refined-srpt", oracle_source(wl.output, 8), cap=cap)
        np.testing.assert_array_equal(a.n_preempt, b.n_preempt)
        np.testing.assert_allclose(b.finish, a.finish, rtol=1e-12)  # split jumps: rounding only


def test_the_prompt_source_is_the_prediction_minus_tokens_generated():
    pr = prompt_source(np.array([20.0]), np.array([64]), 8)
    assert [pr.remaining(0, g) for g in (0, 8, 16, 24)] == [20, 12, 4, 5]  # outlived at 24: 24 − 20 + 1


def test_fit_sigma_reaches_the_target_spearman():
    from scipy import stats

    L = np.random.default_rng(5).lognormal(5, 1, 4000)
    sig = fit_sigma(L, {0.0: 0.5, 64.0: 0.8, 128.0: -0.1})
    assert sig[0.0] > sig[64.0] and sig[128.0] == 20.0
    rem = L[L > 64] - 64
    z = np.random.default_rng(9).standard_normal(len(rem))
    assert abs(stats.spearmanr(np.log(rem) + sig[64.0] * z, rem)[0] - 0.8) < 0.03


def test_read_curve_spearman(tmp_path):
    p = tmp_path / "curve.md"
    p.write_text("title\n\n| predictor | t=0 | t=8 |\n|---|---|---|\n"
                 "| linear: spearman | 0.525 [0.1, 0.7] | 0.360 [-0.016, 0.674] |\n")
    assert read_curve_spearman(p, "linear") == {0.0: 0.525, 8.0: 0.36}
    with pytest.raises(DataError, match="no 'probe: spearman' row"):
        read_curve_spearman(p, "probe")


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ConfigError, match="every=0"):
        oracle_source(np.array([5]), 0)
    with pytest.raises(ConfigError, match="needs a predictor with checkpoints"):
        _run(Workload(np.array([0.0]), np.array([8]), np.array([5])), ONE_SLOT, "refined-srpt", np.array([5.0]))
    with pytest.raises(DataError, match="finite"):
        RefinedPredictor(np.array([[math.nan]]), 8)


def test_the_refined_grid_serves_t5_requests_and_rejects_bad_entries():
    from lengthpred.sched.sweep import refined as rf
    from lengthpred.sched.sweep.pool import LengthSource

    rng = np.random.default_rng(0)
    m = 60
    out = np.maximum(1, rng.lognormal(4.5, 0.8, m)).astype(np.int64)
    src = LengthSource("toy", out.astype(float), rng.integers(16, 200, m), {"h": out * rng.lognormal(0, 1, m)})
    entries = rf.parse_entries([
        {"label": "fcfs", "policy": "fcfs", "source": "none"},
        {"label": "oracle-srpt", "policy": "oracle-srpt", "source": "clairvoyant"},
        {"label": "r", "policy": "refined-srpt", "source": "oracle-remaining"},
        {"label": "r", "policy": "refined-srpt", "source": "decode-cal", "rho": 0.5, "max_preemptions": 1},
    ])
    assert entries[3].rho == 0.5 and entries[3].sim == {"max_preemptions": 1}
    runs = rf.run_refined(src, get_profile("cpu-smollm2-135m-vllm"), entries, head="h", loads=[0.9], seeds=[0, 1],
                          n_requests=150, every=8, sigma_decode={0.0: 1.0}, sigma_prompt=1.0)
    ptl = runs[runs["metric"] == "per_token_latency_mean"].set_index(["policy", "predictor", "seed"])["value"]
    np.testing.assert_allclose(ptl["r", "oracle-remaining"].to_numpy(), ptl["oracle-srpt", "clairvoyant"].to_numpy(),
                               rtol=1e-9)
    with pytest.raises(ConfigError, match="source 'psychic'"):
        rf.parse_entries([{"label": "x", "policy": "srpt", "source": "psychic"}])
    with pytest.raises(ConfigError, match="head 'nope'"):
        rf.run_refined(src, get_profile("cpu-smollm2-135m-vllm"), entries, head="nope", loads=[0.9], seeds=[0],
                       n_requests=10, every=8, sigma_decode={0.0: 1.0}, sigma_prompt=1.0)


def _checkpoints(lengths, every=8, max_t=32, noise=0.0, seed=0):
    """A checkpoints.parquet frame: `exact` predicts the true remaining length (× noise), `flat` a constant."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for k, L in enumerate(lengths):
        for t in range(0, min(int(L), max_t + 1), every):
            rows.append({"id": f"a{k:03d}", "t": t, "length": int(L), "prompt_tokens": 20 + k, "remaining": L - t,
                         "pred:prompt-only": 100.0 - t, "pred:exact": (L - t) * np.exp(noise * rng.normal()),
                         "pred:flat": 50.0})
    return pd.DataFrame(rows)


def test_checkpoint_pool_replays_each_answer_with_its_own_predictions():
    from lengthpred.sched.sweep import refined as rf

    lengths = [5, 40, 300]
    src, tables = rf.checkpoint_pool(_checkpoints(lengths)[::-1], 8, "toy")  # any row order
    np.testing.assert_array_equal(src.output, lengths)
    np.testing.assert_array_equal(src.prompt, [20, 21, 22])
    np.testing.assert_array_equal(src.preds[rf.PROMPT_ONLY], [100, 100, 100])
    assert tables["exact"].shape == (3, 38)  # t = 0, 8, …, 296: the longest answer's whole life
    np.testing.assert_array_equal(tables["exact"][2, :5], [300, 292, 284, 276, 268])  # stored up to t = 32
    assert tables["exact"][2, 37] == 4  # beyond: the prediction at t = 32 (end 300) counts down, exact stays exact
    pr = RefinedPredictor(tables["exact"], 8)
    assert pr.remaining(2, 100) == 300 - 100 and pr.remaining(2, 299) == 1
    # an answer predicted to end at 32 + 50 = 82 that outlives it expects as many tokens again as it made beyond
    # 82 (prompt_source's rule), never "one token left" for the rest of its life
    np.testing.assert_array_equal(tables["flat"][2, 9:13], [10, 2, 7, 15])  # t = 72, 80, 88, 96
    assert pr.remaining(1, 39) == 1 and RefinedPredictor(tables["flat"], 8).remaining(2, 200) == 200 - 82 + 1


def test_checkpoint_pool_bad_inputs():
    import pandas as pd

    from lengthpred.sched.sweep import refined as rf

    df = _checkpoints([20, 30])
    with pytest.raises(DataError, match="off the every=16 grid"):
        rf.checkpoint_pool(df, 16, "toy")
    with pytest.raises(DataError, match=r"lack columns \['prompt_tokens'\]"):
        rf.checkpoint_pool(df.drop(columns="prompt_tokens"), 8, "toy")
    with pytest.raises(DataError, match="no t = 0"):
        rf.checkpoint_pool(df[~((df["id"] == "a001") & (df["t"] == 0))], 8, "toy")
    with pytest.raises(DataError, match="appears twice"):
        rf.checkpoint_pool(pd.concat([df, df.iloc[:1]]), 8, "toy")
    with pytest.raises(DataError, match="no checkpoints"):
        rf.checkpoint_pool(df.iloc[:0], 8, "toy")
    with pytest.raises(ConfigError, match="every=0"):
        rf.checkpoint_pool(df, 0, "toy")
    with pytest.raises(ConfigError, match="source None"):
        rf.parse_entries([{"label": "x", "policy": "srpt", "source": None}])


def test_checkpoints_file_checks_the_stores_interval(tmp_path):
    import json

    from lengthpred.stages.refined import checkpoints_file

    with pytest.raises(DataError, match="no file"):
        checkpoints_file(tmp_path, 8)
    _checkpoints([20, 30]).to_parquet(tmp_path / "checkpoints.parquet")
    assert checkpoints_file(tmp_path, 8) == tmp_path / "checkpoints.parquet"  # the run folder will do
    (tmp_path / "chosen.json").write_text(json.dumps({"every": 16}))
    with pytest.raises(ConfigError, match="set sched.refined.every=16"):
        checkpoints_file(tmp_path / "checkpoints.parquet", 8)


def test_measured_decode_predictions_drive_refined_srpt():
    """Exact per-checkpoint predictions reproduce oracle SRPT (the table holds the true remaining lengths up to
    t = max_t, and counting down from there stays exact); a constant head ranks only by tokens generated past its end: worse."""
    from lengthpred.sched.sweep import refined as rf

    rng = np.random.default_rng(1)
    lengths = np.maximum(1, rng.lognormal(4.5, 0.9, 80)).astype(int)
    src, tables = rf.checkpoint_pool(_checkpoints(lengths, max_t=64), 8, "toy")
    entries = rf.parse_entries([
        {"label": "oracle-srpt", "policy": "oracle-srpt", "source": "clairvoyant"},
        {"label": "r", "policy": "refined-srpt", "source": "decode:exact"},  # the same cap as oracle-srpt
        {"label": "r", "policy": "refined-srpt", "source": "decode:flat"},
        {"label": "sjf", "policy": "sjf", "source": "prompt"},
    ])
    runs = rf.run_refined(src, get_profile("cpu-smollm2-135m-vllm"), entries, head=rf.PROMPT_ONLY, loads=[0.9],
                          seeds=[0, 1], n_requests=200, every=8, tables=tables)
    ptl = runs[runs["metric"] == "per_token_latency_mean"].set_index(["policy", "predictor", "seed"])["value"]
    np.testing.assert_allclose(ptl["r", "decode:exact"].to_numpy(), ptl["oracle-srpt", "clairvoyant"].to_numpy(),
                               rtol=1e-9)
    flat, exact = ptl["r", "decode:flat"].to_numpy(), ptl["r", "decode:exact"].to_numpy()
    assert (flat > exact).all() and flat.mean() > 1.2 * exact.mean()
    with pytest.raises(ConfigError, match="pred:nope column"):
        rf.run_refined(src, get_profile("cpu-smollm2-135m-vllm"),
                       rf.parse_entries([{"label": "r", "policy": "refined-srpt", "source": "decode:nope"}]),
                       head=rf.PROMPT_ONLY, loads=[0.9], seeds=[0], n_requests=10, every=8, tables=tables)
    with pytest.raises(ConfigError, match="noise model, not fitted"):
        rf.run_refined(src, get_profile("cpu-smollm2-135m-vllm"),
                       rf.parse_entries([{"label": "r", "policy": "refined-srpt", "source": "decode-cal"}]),
                       head=rf.PROMPT_ONLY, loads=[0.9], seeds=[0], n_requests=10, every=8, tables=tables)
    with pytest.raises(ConfigError, match="source 'decode:'"):
        rf.parse_entries([{"label": "x", "policy": "srpt", "source": "decode:"}])
