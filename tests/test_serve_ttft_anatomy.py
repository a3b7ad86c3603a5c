"""Where the simulator's TTFT misses a serve run (lengthpred.lab.ttft_anatomy, scripts/serve_ttft_anatomy.py), on
fake-engine runs stored as a serve run folder: an exact machine leaves no error in either group of requests."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from lengthpred.lab.ttft_anatomy import load_stored, sensitivity, summarize, tracked_movers
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.serve.clock import VirtualClock
from lengthpred.serve.experiment import ServeSettings, run_grid
from lengthpred.serve.fake import FakeEngine
from lengthpred.serve.fidelity import at_speed, simulate_run
from lengthpred.serve.predictor import NoPredictor

from .test_serve import PROF, _pool

REPO_ROOT = Path(__file__).resolve().parents[1]


def _stored(tmp_path: Path, machine: HardwareProfile, policies: tuple[str, ...] = ("fcfs", "oracle")) -> Path:
    """Two repeats of `policies` on the fake engine running at `machine`, stored with PROF as the profile."""
    clock = VirtualClock()
    config = {"loads": [0.95], "seeds": [0, 1], "n_requests": 30, "policies": list(policies),
              "calibration_requests": 12, "fit_skip": 0}
    res = run_grid(FakeEngine(machine, clock), _pool(), ServeSettings(**config), lambda pol: ("none", NoPredictor()),
                   clock=clock, progress=lambda m: None)
    res.requests.to_parquet(tmp_path / "serve_requests.parquet")
    res.steps.to_parquet(tmp_path / "serve_steps.parquet")
    res.runs.to_csv(tmp_path / "serve_runs.csv", index=False)
    (tmp_path / "profile.json").write_text(json.dumps({"profile": PROF.to_dict()}))
    (tmp_path / "serve.json").write_text(json.dumps({"config": config}))
    return tmp_path


def test_an_exact_replay_leaves_no_ttft_error_in_either_group(tmp_path):
    req, run = summarize(load_stored(_stored(tmp_path, PROF)), window_s=2.0)
    assert req["at_once"].any() and (~req["at_once"]).any()  # both groups hold requests
    for _, g in req.groupby("at_once"):
        np.testing.assert_allclose(g["err"], 0.0, atol=1e-6)
        np.testing.assert_allclose(g["wait_sim"], g["wait_real"], atol=1e-6)
    waited = req[~req["at_once"]]
    assert (waited["wait_real"] > req.loc[req["at_once"], "wait_real"].max()).any()  # a wait for a slot, longer
    assert len(run) == 4 and (run["ttft"] > 0).all() and (run["jct"] > 0).all()  # slower steps, longer waits
    assert (run["ttft"] > run["jct"]).all()  # the queue amplifies step time into TTFT more than into JCT
    np.testing.assert_allclose(run["window_sd"], 0.0, atol=1e-9)  # the fake machine never wanders
    np.testing.assert_allclose(run[["ttft_tracked", "ttft_tracked_wo_movers"]], 0.0, atol=1e-6)  # tracking: exact


def test_the_two_largest_movers_are_left_out_and_their_share_reported(tmp_path):
    stored = load_stored(_stored(tmp_path, PROF))
    _, pol, reqs, steps = next(stored.runs())
    moved = reqs.copy()
    i = int(np.flatnonzero(np.isfinite(moved["first_token"].to_numpy(float)))[3])
    moved.loc[i, "first_token"] += 5.0  # the real run's request i waited 5 s longer than the exact replay says
    exact = tracked_movers(reqs, steps, PROF, pol, skip=0)
    got = tracked_movers(moved, steps, PROF, pol, skip=0)
    assert abs(exact["ttft_tracked"]) < 1e-6
    assert got["ttft_tracked"] < -0.05  # the replay's mean TTFT is now short of the real one
    assert abs(got["ttft_tracked_wo_movers"]) < 1e-6 and got["movers_share"] == pytest.approx(1.0)


def test_a_machine_one_percent_slower_is_missed_in_the_direction_the_sensitivity_says(tmp_path):
    stored = load_stored(_stored(tmp_path, at_speed(PROF, 1.01)))
    req, _ = summarize(stored, window_s=2.0)
    np.testing.assert_allclose(req["err"], 0.0, atol=1e-6)  # at its own speed (drift 1.01) the replay is exact
    for _, pol, reqs, steps in stored.runs():
        ttft, _ = sensitivity(reqs, steps, PROF, pol, skip=0)
        plain = simulate_run(reqs, pol, PROF)  # on the profile: 1% faster steps than the machine ran
        miss = (plain["first_token"] - reqs["arrival"]).mean() / (reqs["first_token"] - reqs["arrival"]).mean() - 1
        assert ttft > 0 and miss < 0 and abs(miss) == pytest.approx(ttft, rel=0.2)


def test_the_script_prints_four_tables_and_refuses_a_folder_that_is_no_serve_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("serve_ttft_anatomy", REPO_ROOT / "scripts/serve_ttft_anatomy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "run").mkdir()
    assert script.main([str(_stored(tmp_path / "run", PROF)), "--window-s", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("| policy |") == 4 and "largest movers" in out and "| fcfs | 2 |" in out and "| all |" in out
    assert script.main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a serve run folder" in err and err.count("\n") == 1
