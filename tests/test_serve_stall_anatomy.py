"""Where a prefill-first run's yielded decodes stall, real against the simulator (lengthpred.lab.stall_anatomy,
scripts/serve_stall_anatomy.py), on fake-engine runs stored as a serve run folder: on an exact machine the same
decodes yield in the run and its replay, every stall matches, and the re-prefilled tails are the model's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from lengthpred.lab.stall_anatomy import summarize
from lengthpred.lab.ttft_anatomy import load_stored
from lengthpred.serve.fidelity import at_speed, simulate_run

from .test_serve import PROF
from .test_serve_ttft_anatomy import _stored

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("speed", [1.0, 1.01])
def test_an_exact_replay_yields_the_same_decodes_with_the_same_stalls(tmp_path, speed):
    """At its own speed (the machine 1% slower than the profile: drift 1.01) the replay of each fcfs-pf run is
    exact; the FCFS runs beside them (served in one phase) are left out."""
    req, run = summarize(load_stored(_stored(tmp_path, at_speed(PROF, speed), ("fcfs", "fcfs-pf"))), window_s=2.0)
    assert set(run["policy"]) == {"fcfs-prefill-first"} and len(run) == 2
    assert req["yielded_real"].any() and (~req["yielded_real"]).any()  # some decodes yielded, some kept their slot
    np.testing.assert_array_equal(req["yielded_own"], req["yielded_real"])
    y = req[req["yielded_real"]]
    assert (y["stall_real"] > 0).all() and req.loc[~req["yielded_real"], "stall_real"].isna().all()
    np.testing.assert_allclose(y["stall_own"], y["stall_real"], atol=1e-6)
    np.testing.assert_allclose(req["tpot_own"], req["tpot_real"], atol=1e-9)
    np.testing.assert_allclose(run["tpot_err_own"], 0.0, atol=1e-9)
    assert (run["tail_real"] == run["tail_model"]).all() and (run["tail_model"] > 0).all()
    assert (run["stall_steps"] > 0).all()
    np.testing.assert_allclose(run["stall_step_ratio"], 1.0, atol=1e-9)


def test_a_replay_on_a_faster_profile_shortens_the_stalls(tmp_path):
    """The machine 20% slower than the profile: replayed on the profile's speed windows (which read the run's
    steps) it stays exact; the stalls are waits for a slot, so a faster replay would shorten them."""
    stored = load_stored(_stored(tmp_path, at_speed(PROF, 1.2), ("fcfs-pf",)))
    req, run = summarize(stored, window_s=1000.0)
    y = req[req["yielded_real"] & req["yielded_win"]]
    np.testing.assert_allclose(y["stall_win"], y["stall_real"], rtol=1e-6)
    _, pol, reqs, _ = next(stored.runs())
    fast = simulate_run(reqs, pol, PROF)
    split = reqs["split"].to_numpy(bool) & fast["split"].to_numpy(bool)
    assert split.any()
    real_stall = (reqs["resumed"] - reqs["first_token"]).to_numpy()[split]
    sim_stall = (fast["resumed"] - fast["first_token"]).to_numpy()[split]
    assert sim_stall.mean() < real_stall.mean()


def test_the_script_prints_two_tables_and_refuses_a_folder_without_a_prefill_first_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("serve_stall_anatomy", REPO_ROOT / "scripts/serve_stall_anatomy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "pf").mkdir()
    assert script.main([str(_stored(tmp_path / "pf", PROF, ("fcfs", "fcfs-pf"))), "--window-s", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("| policy |") == 2 and "| fcfs-prefill-first | 2 |" in out and "| all |" in out
    (tmp_path / "plain").mkdir()
    assert script.main([str(_stored(tmp_path / "plain", PROF, ("fcfs",)))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no run served prefill first" in err and err.count("\n") == 1
    assert script.main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "not a serve run folder" in err and err.count("\n") == 1
    assert script.main([str(tmp_path / "pf"), "--window-s", "0"]) == 2
    assert "--window-s must be a positive number" in capsys.readouterr().err
