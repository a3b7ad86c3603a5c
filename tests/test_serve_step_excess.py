"""The engine's step time over the profile after a completion (lengthpred.lab.step_excess,
scripts/serve_step_excess.py)."""

import numpy as np
import pandas as pd
import pytest

from lengthpred.lab.step_excess import after_completion, excess_table, step_excess
from lengthpred.sched.core.hardware import HardwareProfile

PROFILE = HardwareProfile("flat", t_base=0.01, t_seq=0.0, t_ctx=0.0, t_prefill_token=0.0, t_swap_token=0.0, max_batch=4,
                          token_budget=2048, kv_blocks=100, block_size=32)


def _run(policy: str, stall_s: float, n: int = 12) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Back-to-back steps of 10 ms (the profile's time), step 0 a prefill; a request finishes at the end of steps
    3 and 7, and the step after each runs `stall_s` longer."""
    dur = np.full(n, 0.01)
    dur[[4, 8]] += stall_s
    end = np.cumsum(dur)
    steps = pd.DataFrame({"t_start": end - dur, "t_end": end, "idle_before": [True] + [False] * (n - 1), "batch": 2,
                          "prefill_tokens": [50] + [0] * (n - 1), "ctx_tokens": 100, "policy": policy,
                          "predictor": "p", "load": 0.8, "seed": 0})
    reqs = pd.DataFrame({"finish": [end[3], end[7], np.nan], "policy": policy, "predictor": "p", "load": 0.8, "seed": 0})
    return reqs, steps


def test_the_step_after_a_finish_is_marked_and_not_the_one_that_produced_it():
    _, steps = _run("fcfs", 0.0)
    got = after_completion(steps, np.array([steps["t_end"][3], steps["t_end"][11], np.nan]))
    assert list(np.flatnonzero(got)) == [4]  # a finish at the last step has no step after it


def test_a_predictor_that_holds_the_cores_at_each_completion_shows_as_a_gap_the_other_policy_lacks():
    (r1, s1), (r2, s2) = _run("sjf", 0.040), _run("fcfs", 0.0)
    x = step_excess(pd.concat([r1, r2]), pd.concat([s1, s2]), PROFILE, skip=2)
    assert len(x) == 2 * 10  # two warm-up steps left out of each run
    sjf = x[x["policy"] == "sjf"].groupby("after_completion")["excess_ms"].median()
    assert sjf[True] == pytest.approx(40.0) and sjf[False] == pytest.approx(0.0, abs=1e-9)
    t = excess_table([("run", x)]).splitlines()
    assert t[2] == "| run | 0.8 | fcfs (p) | +0.0 | +0.0 | — | — | 0% | 2 |"  # the prefill was a warm-up step
    assert t[3] == "| run | 0.8 | sjf (p) | +40.0 | +0.0 | — | — | 100% | 2 |"
    assert excess_table([("empty", pd.DataFrame())]).count("\n") == 1  # header only


def test_the_script_tables_a_stored_folder_and_refuses_a_bad_one_in_one_line(tmp_path, capsys):
    from lengthpred.paths import REPO_ROOT
    from scripts.serve_step_excess import main

    ref = REPO_ROOT / "data" / "reference" / "smollm2-135m"
    assert main([str(ref / "serve_trace10"), str(ref / "serve_trace10_blas1"), "--out", str(tmp_path / "t.md")]) == 0
    rows = {(r.split(" | ")[0].lstrip("| "), r.split(" | ")[2]): r.split(" | ")
            for r in (tmp_path / "t.md").read_text().splitlines() if "serve_trace" in r}
    before, after = rows[("serve_trace10", "sjf (rls@1+engine)")], rows[("serve_trace10_blas1", "sjf (rls@1+engine)")]
    # docs/results/serving/serve_step_excess.md: 36.5 ms after a completion with the stall, 0.5 ms once it was gone; none after none
    assert float(before[3]) > 20 and abs(float(before[4])) < 5 and abs(float(after[3])) < 5
    assert float(rows[("serve_trace10", "fcfs (none)")][3]) < 5  # the policy without a predictor never stalled
    assert main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
