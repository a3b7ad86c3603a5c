"""Natural answers (the engine stops at its own end of sequence), the prefill-first FCFS baseline's engine
settings, a stored profile on an engine with other limits, and merging stored runs that pair: on the fake
engine, with the simulator's replay checked exactly."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.serve import FakeEngine, NoPredictor, VirtualClock, get_policy, replay
from lengthpred.serve.engine import EngineLimits
from lengthpred.serve.fake import fake_natural_length
from lengthpred.serve.merge import merge_runs
from lengthpred.serve.predictor import EngineReadout
from lengthpred.serve.profile_fit import ProfileFit, with_limits
from lengthpred.serve.workload import PromptPool, draw_requests, make_requests, unit_arrivals
from lengthpred.stages import serve as setup
from tests.test_serve import assert_simulator_equals
from tests.test_serve_engine_readout import PROF, _readout

from .conftest import compose_cfg


def _pool(n: int = 30, seed: int = 0) -> PromptPool:
    rng = np.random.default_rng(seed)
    toks = [[int(x) for x in rng.integers(0, 50, int(k))] for k in rng.integers(10, 200, n)]
    return PromptPool([f"p{i:02d}" for i in range(n)], toks, [[int(x) for x in rng.integers(1, 150, 3)] for _ in range(n)])


def _natural_run(policy: str, predictor, pool: PromptPool, cap: int = 120):
    picks = draw_requests(pool, 25, seed=1)
    reqs = make_requests(pool, picks, unit_arrivals(25, 1) / 6.0, tag=f"s1-{policy}", cap=cap)
    clock = VirtualClock(start=3.0)
    eng = FakeEngine(PROF, clock, natural=fake_natural_length)
    return reqs, replay(reqs, eng, get_policy(policy), predictor, clock)


@pytest.mark.parametrize("policy", ["fcfs", "fcfs-pf", "sjf"])
def test_natural_answers_end_at_their_own_length_under_every_policy_and_the_simulator_replays_them(policy):
    pool = _pool()
    pred = EngineReadout(_readout()) if policy == "sjf" else NoPredictor()
    try:
        reqs, run = _natural_run(policy, pred, pool)
    finally:
        pred.close()
    r = run.requests.set_index("rid")
    assert (r["status"] == "finished").all() and r["natural"].all() and (r["max_tokens"] == 120).all()
    want = {q.rid: min(120, fake_natural_length(tuple(q.prompt_ids))) for q in reqs}
    assert r["output_tokens"].to_dict() == want  # the answer's own length (or the cap), however it was served
    assert (r["target_tokens"] == r["output_tokens"]).all()  # the simulator replays the realised length
    assert (r["output_tokens"] < 120).any() and (r["output_tokens"] == 120).any()
    if policy != "fcfs":
        assert r["split"].any()  # decodes that yielded continued their answer, not a new one
    assert_simulator_equals(run, policy, PROF)


def test_an_answer_that_ends_at_its_first_token_does_not_come_back_as_a_decode():
    """One slot and an older decode waiting: a decode would have to yield, so an answer finished in its prefill
    step must not be re-added (it would make tokens after its end)."""
    from dataclasses import replace

    one = replace(PROF, max_batch=1)
    pool = PromptPool(["old", "a"], [[9] * 40, [1, 2, 3]], [[5], [5]])
    reqs = make_requests(pool, [(0, 0), (1, 0)], np.array([0.0, 0.0]), tag="t", cap=50)
    clock = VirtualClock()
    run = replay(reqs, FakeEngine(one, clock, natural=lambda ids: 1 if len(ids) == 3 else 30), get_policy("fcfs-pf"),
                 NoPredictor(), clock)
    r = run.requests.set_index("prompt_id")
    assert (r["status"] == "finished").all() and r.loc["old", "split"]  # the older decode did yield
    assert r.loc["a", "output_tokens"] == 1 and not r.loc["a", "split"] and r.loc["old", "output_tokens"] == 30


def test_two_phase_policies_turn_on_prefix_caching_and_natural_answers_reach_the_engine(monkeypatch):
    cfg = compose_cfg(["serve.engine.kind=fake", "serve.policies=[fcfs,fcfs-pf]", "serve.predictor.kind=none"])
    assert setup.serves_in_two_phases(cfg)
    assert not setup.serves_in_two_phases(compose_cfg(["serve.policies=[fcfs,oracle]", "serve.predictor.kind=none"]))
    eng, _ = setup.make_engine(compose_cfg(["serve.engine.kind=fake", "serve.answers=natural",
                                            "serve.policies=[fcfs]", "serve.predictor.kind=none"]))
    assert eng.natural_eos
    eng, _ = setup.make_engine(cfg)
    assert not eng.natural_eos
    seen = {}

    class _Spy:  # what make_engine asks of vLLM: prefix caching on, 32-token blocks, for the two-phase policy
        def __init__(self, ckpt, **kw):
            seen.update(kw)

    monkeypatch.setattr(setup, "VLLMEngine", _Spy)
    monkeypatch.setattr(setup, "checkpoint_dir", lambda spec: "/ckpt")  # no model is read
    setup.make_engine(compose_cfg(["serve.policies=[fcfs,fcfs-pf]", "serve.predictor.kind=none"]))
    assert seen["prefix_caching"] is True and seen["engine_args"]["block_size"] == 32 and not seen["natural_eos"]


def test_a_stored_profile_takes_the_engine_limits():
    fit = ProfileFit(PROF, 10, 0.9, 0.05, 0.02)
    got = with_limits(fit, EngineLimits(16, 4096, 999, 32, 2048)).profile
    assert (got.max_batch, got.token_budget, got.kv_blocks, got.block_size) == (16, 4096, 999, 32)
    assert (got.t_base, got.t_seq, got.t_ctx) == (PROF.t_base, PROF.t_seq, PROF.t_ctx)


def _stored(d, policy: str, profile: dict, seeds=(0, 1), data: str = "demo"):
    d.mkdir()
    rows = [{"hardware": "vllm", "data": data, "policy": policy, "predictor": "none", "load": 0.9, "seed": s,
             "metric": "jct_mean", "value": 1.0 + s} for s in seeds]
    pd.DataFrame(rows).to_csv(d / "serve_runs.csv", index=False)
    pd.DataFrame([{"rid": f"s{s}-{policy}-{k}", "policy": policy, "predictor": "none", "load": 0.9, "seed": s}
                  for s in seeds for k in range(2)]).to_parquet(d / "serve_requests.parquet")
    pd.DataFrame([{"t_start": 0.0, "policy": policy, "predictor": "none", "load": 0.9, "seed": s}
                  for s in seeds]).to_parquet(d / "serve_steps.parquet")
    cfg = {"n_requests": 2, "arrival": "poisson", "policies": [policy], "seeds": list(seeds),
           "loads": [0.9]}
    (d / "serve.json").write_text(json.dumps({"engine": "vllm", "limits": {"max_batch": 4}, "capacity_req_s": 0.4,
                                              "profile": {"profile": profile}, "config": cfg}))
    (d / "profile.json").write_text(json.dumps({"profile": profile}))
    return d


def test_merging_runs_that_pair_and_refusing_those_that_do_not(tmp_path):
    prof = {"t_base": 0.01}
    a = _stored(tmp_path / "a", "fcfs", prof)
    b = _stored(tmp_path / "b", "fcfs-prefill-first", prof)
    out = merge_runs([a, b], tmp_path / "m")
    meta = json.loads((out / "serve.json").read_text())
    assert meta["config"]["policies"] == ["fcfs", "fcfs-prefill-first"] and meta["merged_from"] == [str(a), str(b)]
    assert len(pd.read_csv(out / "serve_runs.csv")) == 4 and len(pd.read_parquet(out / "serve_requests.parquet")) == 8
    with pytest.raises(DataError, match="another profile"):
        merge_runs([a, _stored(tmp_path / "c", "sjf", {"t_base": 0.02})], tmp_path / "m2")
    with pytest.raises(DataError, match="not the same requests"):
        merge_runs([a, _stored(tmp_path / "d", "sjf", prof, data="bench")], tmp_path / "m3")
    with pytest.raises(DataError, match="more than one folder"):
        merge_runs([a, _stored(tmp_path / "e", "fcfs", prof)], tmp_path / "m4")
    with pytest.raises(DataError, match="exists"):
        merge_runs([a, b], out)
    assert not (tmp_path / "m2").exists() and not (tmp_path / "m4").exists()  # nothing half-written


def test_a_rerun_repeat_replaces_the_stored_one_only_when_asked(tmp_path):
    prof = {"t_base": 0.01}
    a = _stored(tmp_path / "a", "fcfs", prof, seeds=(0, 1, 2))
    again = _stored(tmp_path / "s1", "fcfs", prof, seeds=(1,))
    runs = pd.read_csv(again / "serve_runs.csv").assign(value=99.0)
    runs.to_csv(again / "serve_runs.csv", index=False)
    with pytest.raises(DataError, match="--replace"):
        merge_runs([a, again], tmp_path / "m")
    out = merge_runs([a, again], tmp_path / "m", replace=True)
    got = pd.read_csv(out / "serve_runs.csv").set_index("seed")["value"]
    assert got.to_dict() == {0: 1.0, 2: 3.0, 1: 99.0}  # seed 1 once, the rerun's copy
    assert len(pd.read_parquet(out / "serve_requests.parquet")) == 6 and len(pd.read_parquet(out / "serve_steps.parquet")) == 3
    meta = json.loads((out / "serve.json").read_text())
    assert meta["replaced"] == [{"run": {"policy": "fcfs", "predictor": "none", "load": 0.9, "seed": 1},
                                 "dropped_from": str(a), "kept_from": str(again)}]


def test_a_yielded_decode_counts_its_stall_as_one_inter_token_gap():
    from lengthpred.serve.metrics import itl_metrics

    pool = _pool()
    reqs = make_requests(pool, draw_requests(pool, 25, seed=2), unit_arrivals(25, 2) / 6.0, tag="s2-pf")
    clock = VirtualClock(start=3.0)
    run = replay(reqs, FakeEngine(PROF, clock), get_policy("fcfs-pf"), NoPredictor(), clock)
    r = run.requests
    split = r[r["split"] & (r["status"] == "finished") & (r["target_tokens"] > 2)]
    assert len(split) and split["resumed"].notna().all() and r.loc[~r["split"], "resumed"].isna().all()
    assert (split["resumed"] > split["first_token"]).all() and (split["resumed"] <= split["finish"]).all()
    ends = np.sort(run.steps["t_end"].to_numpy())
    gaps = []  # token times per request: the first, then every step end from `resumed` (or the first) to the finish
    for q in r[r["status"] == "finished"].itertuples():
        start = q.resumed if np.isfinite(q.resumed) else q.first_token
        toks = ends[(ends >= start - 1e-12) & (ends <= q.finish + 1e-12)]
        gaps += list(np.diff(np.concatenate([[q.first_token], toks]) if np.isfinite(q.resumed) else toks))
    assert len(gaps) == int((r["output_tokens"] - 1).clip(lower=0).sum())  # one gap per token after the first
    assert itl_metrics(r, run.steps)["itl_mean"] == pytest.approx(np.mean(gaps))
    old = itl_metrics(r.drop(columns="resumed"), run.steps)["itl_mean"]
    assert old < np.mean(gaps)  # stored runs without `resumed` split a stall into step-sized gaps


def test_the_workload_fidelity_table_reports_each_workloads_mean_and_worst_run():
    import importlib.util

    from lengthpred.paths import REPO_ROOT

    spec = importlib.util.spec_from_file_location("serve_workloads", REPO_ROOT / "scripts" / "serve_workloads.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [{"workload": w, "policy": p, "load": 0.95, "seed": s, "metric": m, "abs_err": e, "drift": d}
            for w, errs, d in (("poisson", (0.02, 0.04), 1.01), ("cap16", (0.10, 0.30), 1.2))
            for s, e in zip((0, 1), errs, strict=True) for p in ("fcfs",)
            for m in ("per_token_latency_mean", "ttft_p90")]
    t = mod.table(pd.DataFrame(rows))
    assert "| poisson | 2 | 1.010–1.010 | 3.0% (4.0%) |" in t and "| cap16 | 2 | 1.200–1.200 | 20.0% (30.0%) |" in t
    assert t.splitlines()[2].endswith("| — |")  # no in-sample refit given
    assert "Worst run on a mean: 30.0%" in t and "2 of 4 run × mean cells miss 5%" in t


def test_the_committed_ten_repeats_against_prefill_first_fcfs_give_the_committed_gains():
    """The committed runs (docs/results/serving): predicted-SJF over fcfs-pf on the committed runs (data/reference/.../serve_pf10)."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.serve.metrics import SLO
    from lengthpred.serve.paired import paired_gains

    root = REPO_ROOT / "data" / "reference" / "smollm2-135m" / "serve_pf10"
    runs = pd.concat([pd.read_csv(root / h / "serve_runs.csv") for h in ("a", "b")], ignore_index=True)
    reqs = pd.concat([pd.read_parquet(root / h / "serve_requests.parquet") for h in ("a", "b")], ignore_index=True)
    real = runs[runs["hardware"] == "vllm"]
    g = paired_gains(real, reqs, SLO(), loo=False, baseline="fcfs-prefill-first").set_index("metric")
    assert int(g.loc["per_token_latency_mean", "n"]) == 10
    assert g.loc["per_token_latency_mean", "gain"] == pytest.approx(0.283, abs=0.005)
    assert g.loc["per_token_latency_mean", "p_value"] <= 0.05 and g.loc["per_token_latency_mean", "ci_low"] > 0
    assert g.loc["ttft_mean", "ci_low"] < 0 < g.loc["ttft_mean", "ci_high"]  # the predictions add no TTFT
    assert g.loc["jct_p99", "gain"] < -0.5


def test_the_committed_bench_pool_repeats_give_the_committed_gains():
    """The committed runs (docs/results/serving): the bench pool's ten repeats (seed 1 rerun in place of the run a test overlapped)."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.serve.metrics import SLO
    from lengthpred.serve.paired import paired_gains

    root = REPO_ROOT / "data" / "reference" / "smollm2-135m" / "serve_bench_pool10"
    assert [r["run"]["seed"] for r in json.loads((root / "serve.json").read_text())["replaced"]] == [1, 1, 1]
    runs = pd.read_csv(root / "serve_runs.csv")
    g = paired_gains(runs[runs["hardware"] == "vllm"], pd.read_parquet(root / "serve_requests.parquet"), SLO(),
                     loo=False).set_index(["policy", "metric"])
    for policy, gain in (("sjf", 0.249), ("oracle-sjf", 0.309)):
        row = g.loc[(policy, "per_token_latency_mean")]
        assert int(row["n"]) == 10 and row["gain"] == pytest.approx(gain, abs=0.005)
        assert row["ci_low"] > 0 and row["p_value"] <= 0.05
    assert g.loc[("sjf", "ttft_mean"), "ci_low"] > 0.5
    assert g.loc[("sjf", "jct_p99"), "gain"] < 0 < g.loc[("oracle-sjf", "jct_mean"), "ci_low"]


def test_the_committed_bench_pool_runs_with_prefill_first_fcfs_split_the_gain_as_committed():
    """The committed runs (docs/results/serving): on the bench pool the TTFT gain is the prefill-first order, the per-token gain the
    predictions' (data/reference/.../serve_bench_pool10_pf, FCFS / fcfs-pf / SJF in the same runs)."""
    from lengthpred.paths import REPO_ROOT
    from lengthpred.serve.metrics import SLO
    from lengthpred.serve.paired import paired_gains

    root = REPO_ROOT / "data" / "reference" / "smollm2-135m" / "serve_bench_pool10_pf"
    runs = pd.read_csv(root / "serve_runs.csv")
    real, reqs = runs[runs["hardware"] == "vllm"], pd.read_parquet(root / "serve_requests.parquet")
    over_fcfs = paired_gains(real, reqs, SLO(), loo=False).set_index(["policy", "metric"])["gain"]
    g = paired_gains(real, reqs, SLO(), loo=False, baseline="fcfs-prefill-first").set_index(["policy", "metric"])
    assert over_fcfs[("fcfs-prefill-first", "ttft_mean")] == pytest.approx(0.719, abs=0.005)
    assert over_fcfs[("fcfs-prefill-first", "per_token_latency_mean")] < 0  # the order alone buys no per-token
    assert over_fcfs[("sjf", "per_token_latency_mean")] == pytest.approx(0.174, abs=0.005)
    row = g.loc[("sjf", "per_token_latency_mean")]
    assert int(row["n"]) == 10 and row["gain"] == pytest.approx(0.231, abs=0.005) and row["ci_low"] > 0
    assert g.loc[("sjf", "ttft_mean"), "ci_low"] < 0 < g.loc[("sjf", "ttft_mean"), "ci_high"]
    assert g.loc[("sjf", "jct_p99"), "ci_high"] < 0
