"""Static batching: padding ratio and batch time by hand, sorting by true length is the padding bound, better
rankings pad less, intervals stay in range; and both trace scripts run end to end on small inputs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError
from lengthpred.paths import REPO_ROOT
from lengthpred.sched import HardwareProfile
from lengthpred.sched.batching.batches import batch_order, run_batching, static_batches, summarize_batching
from lengthpred.sched.batching.report import batching_table
from lengthpred.sched.traces.noisy_oracle import noisy_oracle

PROF = HardwareProfile(name="toy", t_base=0.01, t_seq=0.001, t_ctx=1e-6, t_prefill_token=1e-4, t_swap_token=0.0,
                       max_batch=64, token_budget=4096, kv_blocks=1000, block_size=16)


def test_padding_and_time_by_hand():
    out, prm = np.array([10, 2, 4, 4, 1]), np.array([5, 7, 1, 1, 3])
    r = static_batches(out, prm, np.arange(5), 2, PROF)  # batches [10, 2], [4, 4], [1]
    assert r["padding_ratio"] == pytest.approx(1 - 21 / (2 * 10 + 2 * 4 + 1 * 1))
    assert r["batches"] == 3 and r["useful_tokens"] == 21

    def batch(b, lmax, pmax):  # prefill b·P_max, then L_max steps whose context grows by b per step
        return b * pmax * 1e-4 + sum(0.01 + 0.001 * b + 1e-6 * b * (pmax + k) for k in range(lmax))

    t = batch(2, 10, 7) + batch(2, 4, 1) + batch(1, 1, 3)
    assert r["time_s"] == pytest.approx(t) and r["throughput"] == pytest.approx(21 / t)
    with pytest.raises(ConfigError):
        static_batches(out, prm, np.arange(5), 0, PROF)
    with pytest.raises(ConfigError, match="valid"):
        batch_order("longest", out, np.random.default_rng(0))


def test_true_order_bounds_padding_and_better_rankings_pad_less():
    rng = np.random.default_rng(0)
    y = np.clip(np.rint(np.exp(rng.normal(5, 1, 1024))), 1, 4000)
    prm = rng.integers(10, 500, 1024)
    pad = {}
    for name, order in [("true", batch_order("true", y, rng)), ("random", batch_order("random", y, rng))]:
        pad[name] = static_batches(y, prm, order, 16, PROF)["padding_ratio"]
    for rho in (0.3, 0.6, 0.9):
        p = noisy_oracle(y, rho, rng=rng)
        pad[rho] = static_batches(y, prm, batch_order("predicted", y, rng, p), 16, PROF)["padding_ratio"]
    assert pad["true"] < pad[0.9] < pad[0.6] < pad[0.3] < pad["random"]
    for _ in range(20):  # no order pads less than sorting by the true length
        assert static_batches(y, prm, rng.permutation(1024), 16, PROF)["padding_ratio"] >= pad["true"]


def test_runs_over_seeds_summaries_in_range_and_table():
    def draw(seed):
        r = np.random.default_rng(seed)
        y = np.clip(np.rint(np.exp(r.normal(5, 1, 256))), 1, 4000)
        return y, r.integers(10, 500, 256), {"good": noisy_oracle(y, 0.8, rng=r), "bad": noisy_oracle(y, 0.1, rng=r)}

    runs = run_batching(draw, data="toy", profile=PROF, seeds=range(10), batch_sizes=[4, 32])
    assert set(runs["formation"]) == {"arrival", "random", "predicted", "true"}
    gain = runs[(runs["metric"] == "throughput_gain") & (runs["formation"] == "arrival")]["value"]
    assert (gain == 0).all()  # the paired reference
    res = summarize_batching(runs)
    assert (res["n"] == 10).all()
    assert ((res["ci_low"] <= res["value"] + 1e-12) & (res["value"] <= res["ci_high"] + 1e-12)).all()
    pad = res[res["metric"] == "padding_ratio"]
    assert pad["ci_low"].min() >= 0 and pad["ci_high"].max() <= 1
    v = pad.set_index(["batch_size", "predictor"])["value"]
    assert v[(32, "true length")] < v[(32, "good")] < v[(32, "bad")]
    text = batching_table(res, {("toy", "good"): 0.8})
    assert "| predicted | good | 0.80 |" in text and "batches of 32" in text


def _predictions(path, ids, y):
    rng = np.random.default_rng(0)
    rows = []
    for head, p in (("lin", y * np.exp(0.4 * rng.standard_normal(len(y)))), ("flat", np.full(len(y), 100.0))):
        rows += [dict(head=head, split="indomain/chat/test", id=i, domain="chat", y_true=t, y_pred=q, n_samples=3,
                      capped_frac=0.0) for i, t, q in zip(ids, y, p, strict=True)]
    pd.DataFrame(rows).to_parquet(path)


def _toy_traces(root):
    rng = np.random.default_rng(0)
    (root / "traces").mkdir(parents=True)
    t0 = pd.Timestamp("2023-11-16 18:00:00")
    ts = t0 + pd.to_timedelta(np.cumsum(rng.gamma(0.5, 0.4, 700)), unit="s")
    pd.DataFrame({"TIMESTAMP": ts.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": rng.integers(20, 3000, 700),
                  "GeneratedTokens": rng.integers(1, 700, 700)}).to_csv(root / "traces/azure2023_conv.csv", index=False)


@pytest.mark.slow  # runs a script in a subprocess
def test_trace_and_batching_scripts_end_to_end(tmp_path):
    from lengthpred.targets import read_reference

    trace, _ = read_reference(REPO_ROOT / "data/reference/smollm2-135m/demo.jsonl")
    ids = sorted(trace["id"].unique())[:60]
    y = trace[trace["id"].isin(ids)].groupby("id")["length"].mean().loc[ids].to_numpy(float)
    f = tmp_path / "predictions.parquet"
    _predictions(f, ids, y)
    _toy_traces(tmp_path / "ds")
    common = ["logger=disabled", "data=demo", f"sched.source.predictions_path={f}", f"sched.traces.root={tmp_path}/ds",
              "sched.traces.names=[azure2023_conv]", "sched.traces.n_requests=60", "sched.seeds=[0,1,2,3,4,5,6,7,8,9]"]
    cmd = [sys.executable, str(REPO_ROOT / "scripts/simulate_traces.py"), *common, f"hydra.run.dir={tmp_path}/tr",
           "sched.traces.loads=[0.9]", "sched.traces.spearman=[0.0,1.0]", "sched.traces.table_spearman=[1.0]"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "tr"
    preds = pd.read_csv(out / "trace_predictors.csv")
    assert set(preds["predictor"]) == {"noisy@0", "noisy@1", "lin", "flat", "prompt-mean"}
    assert (out / "quality_curve_load0.9.png").stat().st_size > 0
    assert "| sjf | lin |" in (out / "trace_policies.md").read_text()
    # sched.traces.pool_bootstrap (default true): each window's own resample of the 60 prompts, and the tables say so
    assert "own resample of the 60-prompt test pool" in (out / "trace_policies.md").read_text()
    assert "own resample of the 60-prompt test pool" in (out / "predictor_quality.md").read_text()
    assert preds.loc[preds["kind"] == "head", "pool_resampled"].all()
    assert "Spearman at which" in r.stdout and "inter-arrival CV" in r.stdout
    cmd_b = [sys.executable, str(REPO_ROOT / "scripts/simulate_batching.py"), *common, f"hydra.run.dir={tmp_path}/b",
             "sched.batching.n_requests=64", "sched.batching.batch_sizes=[8]", "sched.batching.trace_spearman=[0.5]"]
    r = subprocess.run(cmd_b, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = pd.read_csv(tmp_path / "b/batching_results.csv")
    assert set(res["data"]) == {"heads' test pool", "azure2023_conv"}
    assert {"lin", "flat", "prompt-mean", "noisy@0.5", "true length"} <= set(res["predictor"])
    assert (tmp_path / "b/padding_B8.png").stat().st_size > 0
    assert (tmp_path / "b/batching.md").read_text().count("own resample of the 60-prompt test pool") == 2
    # the heads' pool runs on sched.batching.hardware (static batches of 8 lie outside the vLLM-fitted default's range)
    assert "heads' test pool, batches of 8** (cpu-smollm2-135m;" in (tmp_path / "b/batching.md").read_text()
    # a trace too short for the windows asked: one line with its size, exit 2
    bad = subprocess.run([*cmd[:2], *common, f"hydra.run.dir={tmp_path}/x", "sched.traces.n_requests=80"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: trace azure2023_conv has 700 requests; 10 windows of 80")


def _split_pool(m: int = 12, seed: int = 0):
    """A head perfect on half the prompts and reversed on the other half (its error depends on the pool)."""
    from lengthpred.sched.sweep.pool import LengthSource

    rng = np.random.default_rng(seed)
    mean = np.exp(rng.normal(5, 0.8, m))
    samples = [[int(x) for x in np.maximum(1, np.rint(mu * np.exp(0.2 * rng.standard_normal(3))))] for mu in mean]
    return LengthSource("pool", np.rint(mean), 10 + np.arange(m), {"split": np.where(np.arange(m) % 2 == 0, mean,
                                                                                      1e4 / mean)}, samples=samples)


def _toy_windows(n_windows: int = 10, n: int = 1024):
    from lengthpred.sched.traces.windows import trace_windows

    rng = np.random.default_rng(3)
    k = n_windows * n
    df = pd.DataFrame({"arrival_s": np.cumsum(rng.gamma(0.5, 2.0, k)), "prompt_tokens": rng.integers(50, 1500, k),
                       "output_tokens": np.clip(np.rint(np.exp(rng.normal(4.5, 1.0, k))), 1, 4000).astype(int)})
    return trace_windows(df, "toy", n_requests=n, n_windows=n_windows)


def _interval(res, data, metric="throughput_gain"):
    r = res[(res["data"] == data) & (res["predictor"] == "split") & (res["metric"] == metric)].iloc[0]
    return r["ci_high"] - r["ci_low"]


def test_pool_bootstrap_widens_batching_intervals_and_stays_paired():
    """Each seed's own pool resample (two-stage for the pool workload: prompts, then requests; the mapping's
    pool for a trace) makes the head's intervals cover the 12-prompt pool; every formation and predictor of a
    seed is cut from that seed's one draw (paired)."""
    from lengthpred.sched.batching.batches import POOL_DATA, pool_draw, trace_draw
    from lengthpred.sched.batching.report import interval_scope

    pool, seeds = _split_pool(), list(range(10))
    by_seed = dict(zip(seeds, _toy_windows(), strict=True))
    width = {}
    for boot in (False, True):
        calls: list[int] = []
        rho: list[tuple] = []
        d_pool = pool_draw(pool, 1024, rho, pool_bootstrap=boot)
        d_trace = trace_draw(by_seed, pool, [0.5], rho, pool_bootstrap=boot)

        def counted(seed, d=d_trace, calls=calls):
            calls.append(seed)
            return d(seed)

        res = summarize_batching(pd.concat([
            run_batching(d_pool, data=POOL_DATA, profile=PROF, seeds=seeds, batch_sizes=[8]),
            run_batching(counted, data="toy", profile=PROF, seeds=seeds, batch_sizes=[8])]))
        assert calls == seeds  # one draw per seed for every batch size, formation and predictor
        rho_split = [r for _, h, r in rho if h == "split"]  # the head's Spearman per seed (pool, then trace)
        width[boot] = (_interval(res, POOL_DATA), _interval(res, "toy"), float(np.std(rho_split[10:])))
        text = batching_table(res, pool_prompts=12, pool_resampled=boot)
        assert interval_scope("toy", 12, boot) in text and interval_scope(POOL_DATA, 12, boot) in text
        a, b = d_trace(3), d_trace(3)
        assert all(np.array_equal(a[2][k], b[2][k]) for k in a[2])  # a seed's draw is fixed: any rerun pairs
    assert width[True][0] > 3 * width[False][0]  # the pool workload's throughput gain over arrival order
    assert width[True][1] > 1.5 * width[False][1]  # the trace's, where the windows' own variability is large
    assert width[True][2] > 10 * width[False][2]  # the mapped head's Spearman across windows
    assert "own resample of the 12-prompt test pool" in interval_scope("toy", 12, True)
    assert "over seeds only" not in interval_scope(POOL_DATA, None, True)  # no heads: seeds only, said plainly
