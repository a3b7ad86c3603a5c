"""Whether the simulator forecasts the paired gains the engine measured (lengthpred.lab.gain_fidelity)."""

import math

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.lab.gain_fidelity import drift_table, gain_fidelity, gain_table, gain_totals, gains_page

M = "per_token_latency_mean"


def _fid(real: dict[str, np.ndarray], sim: dict[str, np.ndarray], metric: str = M, drift: float = 1.0) -> pd.DataFrame:
    """Fidelity rows of one metric: real[policy][seed] and sim[policy][seed]; a run's drift `drift` + seed / 100."""
    return pd.DataFrame([{"load": 0.95, "policy": p, "predictor": "none" if p == "fcfs" else "rls", "seed": s,
                          "metric": metric, "real": float(real[p][s]), "sim": float(sim[p][s]),
                          "drift": drift + s / 100} for p in real for s in range(len(real[p]))])


def _real(n: int = 10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    f = 1.0 + 0.3 * rng.random(n)
    return {"fcfs": f, "sjf": f * (0.8 + 0.1 * rng.random(n))}


def test_a_uniformly_slower_machine_misses_every_latency_but_forecasts_the_gain_exactly():
    real = _real()
    g = gain_fidelity(_fid(real, {p: 1.1 * v for p, v in real.items()}), "fcfs")  # every run 10% off
    (r,) = g.itertuples()
    assert (r.policy, r.predictor, r.baseline, r.n) == ("sjf", "rls", "fcfs", 10)
    assert r.real_gain == pytest.approx(1 - real["sjf"].mean() / real["fcfs"].mean())
    assert r.sim_gain == pytest.approx(r.real_gain) and abs(r.diff) < 1e-12
    assert r.ci_low < r.real_gain < r.ci_high and r.inside == 1.0
    assert r.p_bias == 1.0  # no repeat's gain differs
    assert r.drift == pytest.approx(1.045)  # the mean over the sjf runs' drifts 1.00 … 1.09


def test_a_simulator_that_flatters_the_baseline_is_caught_as_biased():
    real = _real()
    g = gain_fidelity(_fid(real, {"fcfs": 0.8 * real["fcfs"], "sjf": real["sjf"]}), "fcfs").iloc[0]
    assert g.sim_gain < g.real_gain - 0.1 and g.inside == 0.0
    assert g.p_bias == pytest.approx(2 / 2**10)  # all ten repeats lean the same way: the exact test's floor


def test_few_repeats_give_no_interval_and_a_missing_run_leaves_its_repeat_out():
    real = _real(4)
    fid = _fid(real, real)
    g = gain_fidelity(fid, "fcfs").iloc[0]
    assert g.n == 4 and math.isnan(g.ci_low) and math.isnan(g.inside)
    dropped = fid[~((fid["policy"] == "sjf") & (fid["seed"] == 2))]  # an overloaded run: not replayed
    assert gain_fidelity(dropped, "fcfs").iloc[0].n == 3
    assert gain_fidelity(fid, "fcfs-prefill-first").empty  # the folder did not run that baseline
    assert gain_fidelity(fid, "sjf", skip=["fcfs"]).empty  # fcfs over sjf mirrors sjf over fcfs
    assert gain_fidelity(fid, "sjf").iloc[0].policy == "fcfs"
    no_sim = fid.assign(sim=np.nan)  # every replayed run blank on this statistic: no row, no crash
    assert gain_fidelity(no_sim, "fcfs").empty
    with pytest.raises(DataError, match="1 duplicated"):  # a seed merged twice is refused, not guessed
        gain_fidelity(pd.concat([fid, fid.iloc[[0]]]), "fcfs")


def test_tables_and_totals_read_the_rows():
    real = _real()
    good = gain_fidelity(_fid(real, real), "fcfs")
    bad = gain_fidelity(_fid(real, {"fcfs": 0.8 * real["fcfs"], "sjf": real["sjf"]}), "fcfs")
    few = gain_fidelity(_fid(_real(3), _real(3)), "fcfs")
    folders = [("a", good), ("b", bad), ("c", few)]
    t = gain_table(folders).splitlines()
    assert t[0].startswith("| folder | load | over | policy | its runs' drift | per-token mean |")
    assert t[2].startswith("| a | 0.95 | fcfs | sjf (rls) | 1.045 | ")
    assert " ✓ |" in t[2] and "✗*" in t[3] and "(n 3) →" in t[4]
    tot = gain_totals(folders)  # the few-repeat folder has no interval: not counted
    assert tot["cells"] == 2 and tot["inside"] == 1 and tot["biased"] == 1
    assert tot["clear"] == 2 and tot["same_sign"] == 1  # the flattered baseline turns a clear gain negative
    assert tot["median_abs_diff"] == pytest.approx(50 * abs(bad.iloc[0]["diff"]))
    page = gains_page({"fidelity": folders, "fidelity_tracked": [("a", good)]},
                      {"fidelity": "the calibration profile", "fidelity_tracked": "the window before"})
    assert "| the calibration profile | 2 | 1 | 2 | 1 | 1 |" in page
    assert "| the window before | 1 | 1 | 1 | 1 | 0 |" in page
    assert gain_totals([("x", gain_fidelity(pd.DataFrame(), "fcfs"))])["cells"] == 0


def test_the_drift_table_correlates_the_gain_miss_with_the_machine_speed():
    real = _real()
    folders = [(str(k), gain_fidelity(_fid(real, {"fcfs": real["fcfs"], "sjf": (1 + k / 20) * real["sjf"]},
                                           drift=1.001 + k / 10), "fcfs")) for k in range(4)]  # slower: smaller gain
    rows = drift_table(folders).splitlines()
    assert rows[2] == "| per-token mean | 4 | -1.00 | 1.05–1.35 |"
    assert rows[3] == "| per-token median | 0 | — | — |"  # no rows of that metric
    assert "Where the simulated gain leans" in gains_page({"f": folders}, {"f": "a profile"})
