"""Every stored serve experiment on one page (lengthpred.serve.summary, scripts/serve_summary.py)."""

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.serve.summary import describe, folder_gains, load_folder, summary_table

PROF = {"t_base": 0.01}


def _pred(policy: str) -> str:
    return {"fcfs": "none", "fcfs-prefill-first": "none", "oracle-sjf": "clairvoyant"}.get(policy, "rls@1+engine")


def _stored(d, runs: dict[str, dict[int, float]], check: dict | None = None, arrival: str = "poisson"):
    """A serve run folder whose real runs have per-token mean `runs[policy][seed]` (and every other headline
    statistic 1.0), plus one simulated row that must be left out."""
    d.mkdir(parents=True)
    rows = []
    for policy, by_seed in runs.items():
        for s, v in by_seed.items():
            base = {"hardware": "vllm", "data": "demo", "policy": policy, "predictor": _pred(policy), "load": 0.8,
                    "seed": s}
            rows += [base | {"metric": "per_token_latency_mean", "value": v},
                     base | {"metric": "ttft_mean", "value": 1.0}]
    rows.append(rows[0] | {"hardware": "sim:fitted-vllm", "value": 1e6})
    pd.DataFrame(rows).to_csv(d / "serve_runs.csv", index=False)
    seeds = sorted({s for by in runs.values() for s in by})
    pd.DataFrame([{"rid": f"s{s}-{p}-0", "policy": p, "predictor": _pred(p), "load": 0.8, "seed": s, "arrival": 0.0,
                   "first_token": 1.0, "finish": 2.0, "output_tokens": 10, "status": "finished"}
                  for p in runs for s in runs[p]]).to_parquet(d / "serve_requests.parquet")
    pd.DataFrame([{"t_start": 0.0, "policy": p, "predictor": _pred(p), "load": 0.8, "seed": s}
                  for p in runs for s in runs[p]]).to_parquet(d / "serve_steps.parquet")
    cfg = {"n_requests": 40, "arrival": arrival, "arrival_cv": 2.0, "policies": list(runs), "seeds": seeds,
           "loads": [0.8]}
    (d / "serve.json").write_text(json.dumps({"engine": "vllm", "limits": {"max_batch": 4}, "capacity_req_s": 0.4,
                                              "profile": {"profile": PROF}, "config": cfg}))
    (d / "profile.json").write_text(json.dumps({"profile": PROF}))
    if check is not None:
        (d / "calibration_check.json").write_text(json.dumps(check))
    return d


def test_paired_gains_over_each_baseline_a_folder_ran_with_an_interval_only_from_ten_repeats(tmp_path):
    ten = range(10)
    d = _stored(tmp_path / "ten", {"fcfs": {s: 1.0 + 0.01 * s for s in ten}, "sjf": {s: 0.7 + 0.01 * s for s in ten},
                                   "fcfs-prefill-first": {s: 0.9 for s in ten}}, check={"ok": False})
    f = load_folder(d)
    assert len(f.runs) == 60 and set(f.runs["hardware"]) == {"vllm"}  # the simulated row is left out
    g = folder_gains(f).set_index(["baseline", "policy", "metric"])
    row = g.loc[("fcfs", "sjf", "per_token_latency_mean")]
    assert row["gain"] == pytest.approx(1 - 0.745 / 1.045) and row["n"] == 10 and 0 < row["ci_low"] < row["ci_high"]
    assert g.loc[("fcfs-prefill-first", "sjf", "per_token_latency_mean"), "gain"] == pytest.approx(1 - 0.745 / 0.9)
    assert g.loc[("fcfs", "sjf", "ttft_mean"), "gain"] == 0.0
    t = summary_table([f], "fcfs")
    assert "| ten | demo pool, poisson, replay answers, cap 4, 40 req | flagged | 0.8 | sjf (rls@1+engine) | 10 | +29% [" in t
    three = load_folder(_stored(tmp_path / "three", {"fcfs": {0: 1.0, 1: 1.0, 2: 1.0}, "sjf": {0: 0.5, 1: 0.5, 2: 0.5}}))
    t3 = summary_table([three], "fcfs")
    assert "+50% (n 3)" in t3 and "| not checked |" in t3  # too few repeats for an interval; no check stored
    assert summary_table([three], "fcfs-prefill-first").count("\n") == 1  # no fcfs-pf runs: header only


def test_a_folder_split_in_parts_on_one_profile_is_merged_and_one_that_is_not_a_run_is_refused(tmp_path):
    root = tmp_path / "split"
    _stored(root / "a", {"fcfs": {0: 1.0, 1: 1.0}, "sjf": {0: 0.5, 1: 0.5}}, check={"ok": True})
    _stored(root / "b", {"fcfs": {2: 1.0}, "sjf": {2: 0.8}}, arrival="poisson")
    f = load_folder(root)
    assert f.name == "split" and sorted(set(f.runs["seed"])) == [0, 1, 2] and f.check == {"ok": True}
    assert describe(f).startswith("demo pool, poisson")
    with pytest.raises(DataError, match="not a serve run folder"):
        load_folder(tmp_path / "split" / "a" / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a serve run folder"):
        load_folder(tmp_path / "empty")


def test_the_script_prints_both_tables_and_refuses_a_bad_folder_in_one_line(tmp_path, capsys):
    from scripts.serve_summary import main

    d = _stored(tmp_path / "run", {"fcfs": {0: 1.0}, "sjf": {0: 0.5}})
    assert main([str(d), "--out", str(tmp_path / "s.md")]) == 0
    out = capsys.readouterr().out
    assert "Paired gains over FCFS" in out and "Paired gains over prefill-first FCFS" in out
    assert (tmp_path / "s.md").read_text() == out
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_the_committed_runs_against_prefill_first_fcfs_read_as_committed():
    """The committed runs (docs/results/serving): serve_pf10, stored in two halves on one profile, gives +28% per-token over fcfs-pf."""
    from lengthpred.paths import REPO_ROOT

    f = load_folder(REPO_ROOT / "data" / "reference" / "smollm2-135m" / "serve_pf10")
    g = folder_gains(f).set_index(["baseline", "policy", "metric"])
    row = g.loc[("fcfs-prefill-first", "sjf", "per_token_latency_mean")]
    assert row["n"] == 10 and row["gain"] == pytest.approx(0.283, abs=0.005) and row["ci_low"] > 0


def test_the_leave_one_out_table_names_the_short_answer_that_carries_the_per_token_mean(tmp_path, capsys):
    """Seed 0's request 0 is a 2-token answer that waits 10 s under FCFS and none under SJF: with it the per-token
    mean gain is large, without it the two policies tie, and the table says which request that was."""
    from lengthpred.serve.metrics import SLO, latency_metrics
    from lengthpred.serve.summary import loo_table, predictor_table

    d = tmp_path / "loo"
    _stored(d, {"fcfs": dict.fromkeys(range(10), 1.0), "sjf": dict.fromkeys(range(10), 1.0)})
    reqs, rows = [], []
    for p in ("fcfs", "sjf"):
        for s in range(10):
            wait = [10.0 if (p, s) == ("fcfs", 0) else 0.5, 0.5, 0.5]
            r = pd.DataFrame({"rid": [f"s{s}-{p}-{k}" for k in range(3)], "policy": p, "predictor": _pred(p),
                              "load": 0.8, "seed": s, "arrival": [0.0, 1.0, 2.0], "output_tokens": [2, 100, 100],
                              "status": "finished", "split": [False, p == "sjf", False],
                              "prediction": [1.0, 3.0, 2.0] if p == "sjf" else np.nan})
            r["first_token"] = r["arrival"] + wait
            r["finish"] = r["first_token"] + r["output_tokens"] * 0.01
            reqs.append(r)
            m = latency_metrics(r["arrival"], r["first_token"], r["finish"], r["output_tokens"],
                                r["status"] == "rejected", end=float(r["finish"].max()), slo=SLO())
            rows += [{"hardware": "vllm", "data": "demo", "policy": p, "predictor": _pred(p), "load": 0.8, "seed": s,
                      "metric": k, "value": v} for k, v in m.items()]
    pd.concat(reqs).to_parquet(d / "serve_requests.parquet")
    pd.DataFrame(rows).to_csv(d / "serve_runs.csv", index=False)
    t = loo_table([load_folder(d, requests=True)])
    row = next(r for r in t.splitlines() if "| sjf (" in r).split(" | ")
    low, high = (float(v) for v in row[4].split("(")[1].rstrip(")").split(" … "))
    assert low == 0.0 < float(row[4].split("%")[0]) <= high  # dropping seed 0's request 0 leaves no gain
    assert row[-1].rstrip(" |") == "seed 0 request 0"
    arms = predictor_table([load_folder(d, requests=True)]).splitlines()
    assert len(arms) == 3  # FCFS neither predicts nor yields: only SJF's row
    # one of SJF's 3 decodes yielded; predictions 1, 3, 2 against answers 2, 100, 100: Spearman 0.87 in every run
    assert arms[2] == "| loo | 0.8 | sjf (rlsfake) | 10 | 33% | 0.87 (0.87 … 0.87) |".replace("rlsfake", _pred("sjf"))
    (d / "serve_requests.parquet").unlink()  # without its requests: the gains, no leave-one-out range
    assert "| +" in loo_table([load_folder(d, requests=True)]) and "… " not in loo_table([load_folder(d, requests=True)])
    from scripts.serve_summary import main

    assert main([str(d)]) == 0 and "How far one request moves each gain over FCFS" in capsys.readouterr().out
