"""Scheduling simulator: event jumps vs a step-by-step reference, bad input, predictors, policies, script."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lengthpred.errors import ConfigError, DataError
from lengthpred.paths import REPO_ROOT
from lengthpred.sched import (
    CallablePredictor,
    HardwareProfile,
    OnlineScaledPredictor,
    OverloadWarning,
    Workload,
    capacity,
    get_profile,
    make_policy,
    simulate,
    summarize,
)
from lengthpred.sched.core.workload import arrival_times, noisy_prediction
from lengthpred.sched.sweep.sources import from_predictions


def _profile(**kw) -> HardwareProfile:
    base = dict(name="t", t_base=0.01, t_seq=0.002, t_ctx=1e-5, t_prefill_token=1e-3, t_swap_token=1e-4,
                max_batch=8, token_budget=10**6, kv_blocks=10**6, block_size=16)
    return HardwareProfile(**{**base, **kw})


def _workload(n=300, load=0.9, prof=None, seed=0, accept=False) -> Workload:
    rng = np.random.default_rng(seed)
    out = np.maximum(1, rng.lognormal(4, 1, n).astype(int))
    prm = rng.integers(1, 64, n)
    acc = rng.beta(7, 3, n) if accept else None
    lam = load * capacity(prof or _profile(), prm, out, acc, speculative=accept)
    return Workload(arrival_times(n, lam, rng=rng), prm, out, acc)


def _reference_fcfs(wl: Workload, p: HardwareProfile) -> np.ndarray:
    """One step at a time: admit FCFS up to the batch cap, every running request makes one token."""
    n, t, nxt, run, fin = len(wl), 0.0, 0, [], np.full(len(wl), np.nan)
    queue: list[int] = []
    made = np.zeros(n, int)
    while nxt < n or queue or run:
        while nxt < n and wl.arrival[nxt] <= t:
            queue.append(nxt)
            nxt += 1
        if not run and not queue:
            t = wl.arrival[nxt]
            continue
        pf = 0
        while queue and len(run) < p.max_batch:
            i = queue.pop(0)
            run.append(i)
            pf += wl.prompt[i]
        ctx = sum(wl.prompt[i] + made[i] for i in run)
        t += p.t_base + p.t_seq * len(run) + p.t_ctx * ctx + p.t_prefill_token * pf
        for i in run:
            made[i] += 1
        for i in [i for i in run if made[i] == wl.output[i]]:
            fin[i] = t
            run.remove(i)
    return fin


def test_event_jumps_match_a_step_by_step_reference():
    prof = _profile()
    wl = _workload(n=150, load=0.95, prof=prof)
    res = simulate(wl, prof, make_policy("fcfs"), watermark=0.0)
    np.testing.assert_allclose(res.finish, _reference_fcfs(wl, prof), rtol=1e-9, atol=1e-9)
    assert np.all(res.first_token > res.arrival)


def test_overload_warns_and_stops_at_the_horizon():
    prof = _profile()
    wl = _workload(n=2000, load=1.5, prof=prof)
    with pytest.warns(OverloadWarning, match="queues grow without bound"):
        res = simulate(wl, prof, make_policy("fcfs"))
    s = summarize(res)
    assert s["n_unfinished"] > 0
    assert res.end_time <= wl.arrival[-1] + 5.0  # one step past the last arrival at most (steps ≪ 5 s)
    with pytest.warns(OverloadWarning):
        res2 = simulate(wl, prof, make_policy("fcfs"), horizon=10.0)
    assert 10.0 <= res2.end_time < 11.0


def test_request_longer_than_kv_memory_is_rejected_not_looped():
    prof = _profile(kv_blocks=64, block_size=16)  # 1024 tokens in all
    out = np.array([50, 5000, 40, 30])
    wl = Workload(np.array([0.0, 0.1, 0.2, 0.3]), np.full(4, 10), out)
    with pytest.warns(OverloadWarning):
        res = simulate(wl, prof, make_policy("fcfs"), horizon=math.inf)  # overloaded: run to completion anyway
    assert res.rejected.tolist() == [False, True, False, False]
    s = summarize(res)
    assert s["n_rejected"] == 1 and s["n_finished"] == 3 and s["n_unfinished"] == 0


def test_memory_pressure_preempts_and_everything_still_finishes():
    prof = _profile(kv_blocks=120, block_size=16, max_batch=32)
    wl = _workload(n=300, load=0.95, prof=prof, seed=2)
    wl.output[:] = np.minimum(wl.output, 1000)
    for pre in ("recompute", "swap"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OverloadWarning)
            res = simulate(wl, prof, make_policy("fcfs"), preemption=pre, horizon=math.inf)
        assert res.n_preempt.sum() > 0
        assert (res.finished | res.rejected).all()


def test_online_predictor_is_told_every_completion_and_corrects_its_scale():
    prof = _profile()
    wl = _workload(n=400, prof=prof)
    online = OnlineScaledPredictor(wl.output * 3.0, forget=1.0)
    res = simulate(wl, prof, make_policy("sjf"), online)
    assert online.n_updates_ == int(res.finished.sum()) == len(wl)
    assert online.predict(0, 0.0) == pytest.approx(wl.output[0], rel=1e-6)
    calls = []
    cp = CallablePredictor(lambda i, now: calls.append(i) or float(wl.output[i]))
    simulate(wl, prof, make_policy("sjf"), cp)
    assert sorted(calls) == list(range(len(wl)))


def test_predictor_cost_sync_costs_more_than_async():
    prof = _profile()
    wl = _workload(n=400, prof=prof)
    jct = {m: summarize(simulate(wl, prof, make_policy("oracle-sjf"), predictor_cost=0.02,
                                 predictor_mode=m))["jct_mean"] for m in ("sync", "async")}
    free = summarize(simulate(wl, prof, make_policy("oracle-sjf")))["jct_mean"]
    assert free <= jct["async"] < jct["sync"]


def test_sjf_beats_fcfs_and_aging_bounds_starvation():
    prof = _profile()
    wl = _workload(n=3000, load=0.98, prof=prof, seed=4)
    pred = noisy_prediction(wl.output, 0.8, rng=np.random.default_rng(0))
    fcfs = summarize(simulate(wl, prof, make_policy("fcfs")))
    sjf = summarize(simulate(wl, prof, make_policy("sjf"), pred))
    aged = summarize(simulate(wl, prof, make_policy("sjf"), pred, aging=200.0))
    assert sjf["per_token_latency_mean"] < fcfs["per_token_latency_mean"]
    assert aged["max_wait"] < sjf["max_wait"]


@pytest.mark.parametrize("stability", ["steps", "stderr"])
def test_laps_sd_with_speculative_decoding(stability):
    prof = _profile(n_draft=4, t_draft=0.002, t_prefill_token=1e-4)
    wl = _workload(n=800, load=0.97, prof=prof, accept=True)
    kw = dict(speculative=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        fcfs = simulate(wl, prof, make_policy("fcfs"), **kw)
        laps = simulate(wl, prof, make_policy("laps-sd", stability=stability, oracle=True), **kw)
    assert laps.finished.all() and fcfs.finished.all()
    assert summarize(laps)["per_token_latency_mean"] < 0.8 * summarize(fcfs)["per_token_latency_mean"]
    with pytest.warns(OverloadWarning):  # without speculation the same arrivals overload the server
        plain = simulate(wl, prof, make_policy("fcfs"), horizon=math.inf)
    assert plain.finished.all()
    assert fcfs.n_steps < plain.n_steps  # several tokens per step


def test_bad_configuration_is_a_one_line_error():
    prof = _profile()
    wl = _workload(n=20, prof=prof)
    with pytest.raises(ConfigError, match="valid: .*fcfs"):
        make_policy("nope")
    with pytest.raises(ConfigError, match="preemption"):
        simulate(wl, prof, make_policy("fcfs"), preemption="drop")
    with pytest.raises(ConfigError, match="needs a predictor"):
        simulate(wl, prof, make_policy("sjf"))
    with pytest.raises(DataError, match="predictions for 20 requests"):
        simulate(wl, prof, make_policy("sjf"), np.ones(5))
    with pytest.raises(DataError, match="acceptance"):
        simulate(wl, prof, make_policy("fcfs"), speculative=True)
    with pytest.raises(ConfigError, match="unknown hardware keys"):
        get_profile("a100-llama2-7b", {"warp_speed": 9})
    with pytest.raises(DataError, match="nondecreasing"):
        Workload(np.array([1.0, 0.0]), np.zeros(2, int), np.ones(2, int))


def test_noisy_prediction_has_the_requested_spearman():
    rng = np.random.default_rng(0)
    y = np.maximum(1, rng.lognormal(5, 1, 20000).astype(int))
    rho = stats.spearmanr(y, noisy_prediction(y, 0.6, rng=rng)).statistic
    assert rho == pytest.approx(0.6, abs=0.03)


def _predictions_file(path, n=200, ids=None):
    rng = np.random.default_rng(0)
    ids = [f"{i:016x}" for i in range(n)] if ids is None else list(ids)[:n]
    y = np.maximum(1, rng.lognormal(5, 1, len(ids)))
    rows = []
    for head, rho in (("ridge", 0.6), ("static", 0.1)):
        p = noisy_prediction(y, rho, rng=rng)
        for split in ("indomain/all/test", "indomain/all/val"):
            rows += [dict(head=head, split=split, id=pid, domain="chat", y_true=y[i], y_pred=p[i],
                          n_samples=1, capped_frac=0.0) for i, pid in enumerate(ids)]
    pd.DataFrame(rows).to_parquet(path)


def test_predictions_file_source(tmp_path):
    f = tmp_path / "predictions.parquet"
    _predictions_file(f)
    src = from_predictions(f)  # default: every domain's test split pooled
    assert src.name.endswith("indomain/*/test") and sorted(src.preds) == ["ridge", "static"]
    assert len(src.output) == 200 and np.all(src.output >= 1)
    df = pd.read_parquet(f)
    other = df[df.split == "indomain/all/test"].assign(split="indomain/math/test", id=lambda d: "m" + d.id)
    pd.concat([df, other]).to_parquet(f)
    assert len(from_predictions(f).output) == 400
    assert len(from_predictions(f, split="indomain/math/test").output) == 200
    with pytest.raises(ConfigError, match="no predictions of head"):
        from_predictions(f, heads=["leap"])
    with pytest.raises(DataError, match="no predictions file"):
        from_predictions(tmp_path / "missing")


@pytest.mark.slow  # runs a script in a subprocess
def test_simulate_script_writes_t5_inputs(tmp_path):
    """Prompts of the committed demo trace: each request gets one of its prompt's sampled lengths and the
    prompt's real token count, both from the trace (the targets the heads are fitted on)."""
    import json

    from lengthpred.eval.inputs import read_latencies, read_sched
    from lengthpred.targets import read_reference

    trace, _ = read_reference(REPO_ROOT / "data/reference/smollm2-135m/demo.jsonl")
    ids = sorted(trace["id"].unique())[:120]
    f = tmp_path / "predictions.parquet"
    _predictions_file(f, ids=ids)
    cmd = [sys.executable, str(REPO_ROOT / "scripts/simulate.py"), "logger=disabled", "data=demo",
           f"hydra.run.dir={tmp_path}/run", "sched.source.kind=predictions", f"sched.source.predictions_path={f}",
           "sched.hardware=a100-llama2-7b", "sched.loads=[0.9,1.1]", "sched.seeds=[0,1]", "sched.n_requests=300",
           "sched.policies=[fcfs,sjf,oracle-sjf]", "sched.online=false"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "run"
    df = read_sched(out / "sched_results.csv")
    assert set(df["policy"]) == {"fcfs", "sjf", "oracle-sjf"}
    assert set(df["predictor"]) == {"none", "ridge", "static", "mean-oracle", "random", "clairvoyant"}
    assert set(df["load"]) == {0.9, 1.1} and (df["n"] == 2).all()
    pool = json.loads((out / "sched.json").read_text())["pool"]
    tokens = trace[trace["id"].isin(ids)].groupby("id")["prompt_tokens"].first()
    assert pool["prompt_tokens_mean"] == pytest.approx(tokens.mean()) and pool["prompt_tokens_min"] != 128
    assert pool["samples_per_prompt_mean"] == 3
    assert len(read_latencies(out / "sched_latencies.parquet")) > 0
    assert (out / "latency_vs_load.png").stat().st_size > 0
    assert "gain vs FCFS" in r.stdout and "load 0.9 (below capacity)" in r.stdout
    bad = subprocess.run(cmd[:3] + ["sched.source.kind=predictions",
                                    f"sched.source.predictions_path={tmp_path}/none.parquet"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: no predictions file")


@pytest.mark.parametrize("option", ["default", "paper", "laps_sd"])
def test_every_sched_config_option_composes(option, tmp_path):
    from omegaconf import OmegaConf

    from lengthpred.sched.sweep.experiment import parse_policies
    from tests.conftest import compose_cfg

    cfg = compose_cfg([f"sched={option}"], tmp_path)
    specs = parse_policies(OmegaConf.to_container(cfg.sched.policies))
    assert any(s.name == "fcfs" for s in specs)
    get_profile(cfg.sched.hardware, OmegaConf.to_container(cfg.sched.hardware_overrides))
    assert all(0 < ld for ld in cfg.sched.loads)


@pytest.mark.slow  # runs a script in a subprocess
def test_sched_never_imports_torch():
    code = ("import sys, lengthpred.sched, lengthpred.sched.sweep.experiment, lengthpred.sched.sweep.sources; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_a_negligible_context_cost_does_not_move_the_jumps():
    """The step count to the next event is solved from a quadratic; with a tiny per-context cost its
    textbook form cancels catastrophically and shifted first tokens by 2%."""
    prof = _profile()
    wl = _workload(n=150, load=0.8, prof=prof)
    a = simulate(wl, prof.with_overrides(t_ctx=0.0), make_policy("fcfs"), watermark=0.0)
    b = simulate(wl, prof.with_overrides(t_ctx=1e-18), make_policy("fcfs"), watermark=0.0)
    np.testing.assert_allclose(b.first_token, a.first_token, rtol=1e-9)
    np.testing.assert_allclose(b.finish, a.finish, rtol=1e-9)
