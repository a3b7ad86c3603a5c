"""The serve config group, bad input (engine that cannot start, bad settings) and scripts/serve.py end to end
on the fake engine with stored predictions."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import open_dict

from lengthpred.errors import ConfigError, ModelError
from lengthpred.paths import REPO_ROOT
from lengthpred.stages import serve as setup

from .conftest import compose_cfg


def test_default_settings_compose():
    cfg = compose_cfg()
    s = setup.settings_from_cfg(cfg)
    assert s.policies == ["fcfs", "sjf", "oracle"] and len(s.seeds) >= 3 and len(s.loads) >= 2
    assert max(s.loads) < 1.0  # the default compares policies below capacity
    assert s.natural_cap is None  # replayed lengths by default
    nat = setup.settings_from_cfg(compose_cfg(["serve.answers=natural", "serve.policies=[fcfs,fcfs-pf,sjf]"]))
    assert nat.natural_cap == 512 and nat.policies == ["fcfs", "fcfs-pf", "sjf"]
    smoke = setup.settings_from_cfg(compose_cfg(["serve=smoke"]))
    assert smoke.n_requests < s.n_requests
    demo = compose_cfg(["experiment=demo"])  # what `make serve` composes
    assert demo.serve.engine.kind == "vllm" and demo.serve.predictor.kind == "rls" and demo.data.name == "demo"


@pytest.mark.parametrize("overrides,match", [
    (["serve.policies=[fcfs,srpt]"], "valid are fcfs, sjf, oracle"),
    (["serve.predictor.kind=none"], "sjf but serve.predictor.kind=none"),
    (["serve.engine.kind=fake", "serve.predictor.source=worker"], "fake_clock=wall"),
    (["serve.predictor.source=gpu"], "valid: engine, worker"),
    (["serve.loads=[0.5,-1]"], "positive fractions"),
    (["serve.arrival=trace"], "trace_name"),
    (["serve.arrival=trace", "serve.trace_name=azure2023_conv", "serve.trace_path=x.csv"], "one of"),
    (["serve.answers=eos"], "valid: replay, natural"),
    (["serve.answers=natural"], "no oracle"),
    (["serve.answers=natural", "serve.policies=[fcfs,sjf]", "serve.natural_max_tokens=0"], "cap >= 1"),
])
def test_bad_settings_fail_before_any_work(overrides, match):
    with pytest.raises(ConfigError, match=match):
        setup.settings_from_cfg(compose_cfg(overrides))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is importable in this venv")
def test_engine_that_cannot_start_names_the_venv_and_the_command():
    from lengthpred.serve.vllm_engine import VLLMEngine

    with pytest.raises(ModelError) as e:
        VLLMEngine("/nowhere")
    msg = str(e.value)
    assert "\n" not in msg and "make serve-setup" in msg and ".venv-vllm" in msg and "venv" in msg


@pytest.mark.integration
@pytest.mark.datasets
def test_serve_script_end_to_end_on_the_fake_engine(tmp_path, demo_splits_dir):
    from lengthpred.stages.serve import run_serve

    splits = json.loads((demo_splits_dir / "splits.json").read_text())
    ids = sorted({i for d in splits["indomain"].values() for i in d["test"]})
    rng = np.random.default_rng(0)
    pd.DataFrame({"head": "h", "split": "indomain/all/test", "id": ids, "y_true": 100.0,
                  "y_pred": rng.uniform(10, 500, len(ids))}).to_parquet(tmp_path / "predictions.parquet")
    cfg = compose_cfg([f"data.out_dir={demo_splits_dir}", "serve.engine.kind=fake", "serve.predictor.kind=stored",
                       "serve.predictor.head=h",
                       f"serve.predictor.predictions_path={tmp_path / 'predictions.parquet'}", "serve.n_requests=12",
                       "serve.seeds=[0]", "serve.loads=[0.9]", "serve.calibration_requests=8", "serve.fit_skip=0",
                       "serve.engine.max_num_seqs=3", "serve.plots=true", "serve.policies=[fcfs,sjf,oracle,sjf-aging]"])
    out = run_serve(cfg, tmp_path / "out")
    assert out == tmp_path / "out"
    for f in ("serve_runs.csv", "serve_results.csv", "serve_gains.csv", "serve_fidelity.csv", "profile.json",
              "serve_requests.parquet", "serve_steps.parquet", "serve_latency_cdf.png", "serve_queue.png",
              "calibration_steps.parquet", "fidelity_in_sample_summary.csv", "step_residuals.csv", "serve.json"):
        assert (out / f).is_file(), f
    res = pd.read_csv(out / "serve_results.csv")
    assert set(res["hardware"]) == {"fake", "sim:fitted-fake"}
    assert {"per_token_latency_mean", "ttft_p99", "tpot_mean", "goodput", "queue_mean"} <= set(res["metric"])
    assert set(res[res["policy"] == "sjf"]["predictor"]) == {"h"}
    fid = pd.read_csv(out / "serve_fidelity.csv")
    assert len(fid) and fid["abs_err"].max() < 1e-6
    aging = pd.read_csv(out / "serve_paired_aging.csv")  # aging against SJF on the same runs, the tail included
    assert set(aging["policy"]) == {"sjf-aging"} and {"jct_max", "ttft_max", "per_token_latency_mean"} <= set(aging["metric"])
    # the stored run replayed by the simulator alone (serve.resimulate) gives the same simulated side
    with open_dict(cfg):
        cfg.serve.resimulate = str(out)
    again = run_serve(cfg, tmp_path / "again")
    fid2 = pd.read_csv(again / "serve_fidelity.csv")
    pd.testing.assert_frame_equal(fid2[fid.columns], fid, check_exact=False, rtol=1e-9)
    runs, runs2 = (pd.read_csv(d / "serve_runs.csv").sort_values(["hardware", "policy", "load", "seed", "metric"])
                   .reset_index(drop=True) for d in (out, again))
    pd.testing.assert_frame_equal(runs2, runs, check_exact=False, rtol=1e-9)
    assert json.loads((again / "serve.json").read_text())["capacity_req_s"] == pytest.approx(
        json.loads((out / "serve.json").read_text())["capacity_req_s"])


def test_resimulate_refuses_a_folder_that_is_not_a_serve_run(tmp_path):
    from lengthpred.errors import DataError

    (tmp_path / "serve.json").write_text("{}")
    with pytest.raises(DataError, match=r"not a serve run folder \(missing profile.json"):
        setup.resimulated(tmp_path)


REF_RUN = REPO_ROOT / "data/reference/smollm2-135m/serve_demo"


@pytest.mark.integration
@pytest.mark.skipif(not (REF_RUN / "serve.json").is_file(), reason="the committed real-engine runs are missing")
def test_the_simulator_reproduces_the_committed_real_engine_runs():
    from lengthpred.serve.experiment import fidelity_summary

    res, _, name, _ = setup.resimulated(REF_RUN)
    assert name == "vllm" and not res.fidelity.empty
    means = ["per_token_latency_mean", "ttft_mean", "jct_mean"]
    fs = fidelity_summary(res.fidelity)
    fs = fs[fs["metric"].isin(means)]
    assert fs["signed_err"].abs().max() < 0.10  # every policy and load, mean over repeats
    # live predicted-SJF: modelling the engine's slowdown while a prediction shares the CPU is what fixes it
    live = fs[fs["policy"] == "sjf"]
    assert len(live) == 6 and live["signed_err"].abs().max() < 0.06
    plain = fidelity_summary(res.fidelity_no_contention)
    assert plain[plain["metric"] == "ttft_mean"]["signed_err"].abs().min() > 0.25
