"""Intervals over seeds stay in range, shares of a maybe-zero oracle gain are undefined, the short T5."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.eval.inputs import read_sched
from lengthpred.eval.tables import table_t5
from lengthpred.metrics import is_undefined
from lengthpred.pipeline import t5_summary
from lengthpred.sched.core.metrics import bootstrap_mean_intervals, t_interval
from lengthpred.sched.sweep.pool import CLAIRVOYANT, MEAN_ORACLE
from lengthpred.sched.sweep.summary import below_capacity, gains, short_t5, summarize_runs

SKEWED = np.array([0.0] * 8 + [30.0, 400.0])  # a max_wait over 10 seeds: mostly nothing, one long starvation


def _runs(values: dict[tuple[str, str, float], np.ndarray], metric: str = "per_token_latency_mean") -> pd.DataFrame:
    rows = [("hw", "d", pol, pred, load, seed, metric, float(v))
            for (pol, pred, load), vals in values.items() for seed, v in enumerate(vals)]
    return pd.DataFrame(rows, columns=["hardware", "data", "policy", "predictor", "load", "seed", "metric", "value"])


def test_bootstrap_interval_never_leaves_the_range_where_a_t_interval_does():
    m, lo, hi = t_interval(SKEWED)
    assert lo < 0  # the artifact: a negative wait
    mean, blo, bhi = bootstrap_mean_intervals(SKEWED[None, :])
    assert mean[0] == pytest.approx(43.0) and 0 <= blo[0] < mean[0] < bhi[0] <= 400
    const = bootstrap_mean_intervals(np.full((1, 10), 0.1))  # ulps of rounding must not leave [0.1, 0.1]
    assert const[1][0] == const[2][0] == 0.1
    nan_row = np.array([[1.0, np.nan, 3.0, 2.0], [np.nan, np.nan, np.nan, 5.0]])
    m2, lo2, hi2 = bootstrap_mean_intervals(nan_row)
    assert m2[0] == pytest.approx(2.0) and 1 <= lo2[0] <= hi2[0] <= 3
    assert m2[1] == 5.0 and np.isnan(lo2[1]) and np.isnan(hi2[1])  # one finite seed: no interval


def test_summarize_runs_keeps_every_interval_inside_its_quantity_range():
    rng = np.random.default_rng(0)
    runs = pd.concat([
        _runs({("fcfs", "none", 0.8): SKEWED, ("sjf", "h", 0.8): rng.exponential(50, 10)}, "max_wait"),
        _runs({("fcfs", "none", 0.8): np.zeros(10), ("sjf", "h", 0.8): rng.poisson(0.3, 10)}, "preemptions"),
    ])
    s = summarize_runs(runs)
    assert len(s) == 4 and (s["n"] == 10).all()  # only the (policy, predictor) pairs that ran
    assert (s["ci_low"] >= 0).all() and (s["ci_low"] <= s["value"]).all() and (s["value"] <= s["ci_high"]).all()
    wait = s[(s.policy == "fcfs") & (s.metric == "max_wait")].iloc[0]
    assert wait.ci_low >= 0 and wait.ci_high <= 400


def test_share_of_oracle_is_undefined_when_the_oracle_gain_interval_reaches_zero():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.9, 1.1, 10)
    idle = base + rng.normal(0, 0.01, 10)  # load 0.5: no queue, the oracle gains nothing for sure
    runs = _runs({
        ("fcfs", "none", 0.5): base, ("oracle-sjf", CLAIRVOYANT, 0.5): idle, ("sjf", "h", 0.5): base * 0.999,
        ("fcfs", "none", 0.9): base, ("oracle-sjf", CLAIRVOYANT, 0.9): base * 0.6, ("sjf", "h", 0.9): base * 0.8,
    })
    g = gains(runs).set_index(["policy", "predictor", "load", "metric"])
    oracle_gain = g.loc[("oracle-sjf", CLAIRVOYANT, 0.5, "gain_vs_fcfs")]
    assert oracle_gain.ci_low <= 0 <= oracle_gain.ci_high
    for pol, pred in (("sjf", "h"), ("oracle-sjf", CLAIRVOYANT), ("fcfs", "none")):
        share = g.loc[(pol, pred, 0.5, "share_of_oracle")]
        assert is_undefined(share.value) and is_undefined(share.ci_low) and is_undefined(share.ci_high)
    busy = g.loc[("sjf", "h", 0.9, "share_of_oracle")]
    assert busy.value == pytest.approx(0.5) and busy.ci_low == pytest.approx(0.5)  # a defined share
    assert g.loc[("sjf", "h", 0.9, "gain_vs_fcfs")].value == pytest.approx(0.2)


def test_undefined_shares_survive_the_csv_and_render_in_t5(tmp_path):
    runs = _runs({("fcfs", "none", 0.5): np.ones(10), ("oracle-sjf", CLAIRVOYANT, 0.5): np.ones(10),
                  ("sjf", MEAN_ORACLE, 0.5): np.ones(10)})
    summarize_runs(runs).to_csv(tmp_path / "sched_results.csv", index=False)
    gains(runs).to_csv(tmp_path / "sched_gains.csv", index=False)
    assert "undefined" in (tmp_path / "sched_gains.csv").read_text()
    res, g = read_sched(tmp_path / "sched_results.csv"), read_sched(tmp_path / "sched_gains.csv")
    md = table_t5(res, g).to_markdown()
    assert "| 0.500 | sjf | mean-oracle |" in md and "| undefined |" in md and "nan" not in md
    assert "10 seeds" in md and "clairvoyant" in md


def test_short_t5_is_below_capacity_and_read_from_the_tidy_results(tmp_path):
    assert below_capacity([0.8, 0.95, 1.05]) == 0.95 and below_capacity([1.1, 1.2]) == 1.1
    rng = np.random.default_rng(2)
    base = rng.uniform(0.9, 1.1, 10)
    vals = {}
    for load, k in ((0.8, 0.9), (0.95, 0.7), (1.05, 0.3)):
        vals |= {("fcfs", "none", load): base, ("oracle-sjf", CLAIRVOYANT, load): base * k,
                 ("sjf", MEAN_ORACLE, load): base * (k + 0.05), ("sjf", "linear", load): base * (k + 0.1),
                 ("mlfq", "none", load): base * 2}
    runs = _runs(vals)
    summarize_runs(runs).to_csv(tmp_path / "sched_results.csv", index=False)
    gains(runs).to_csv(tmp_path / "sched_gains.csv", index=False)
    text = t5_summary(tmp_path)
    assert "load 0.95 (below capacity), 10 seeds" in text
    lines = [ln.split() for ln in text.splitlines() if ln.startswith(("fcfs", "sjf", "oracle-sjf", "mlfq"))]
    assert [ln[:2] for ln in lines] == [["fcfs", "none"], ["oracle-sjf", CLAIRVOYANT], ["sjf", MEAN_ORACLE],
                                        ["sjf", "linear"]]
    assert lines[3][5] == "+20.0%"  # linear: 1 − 0.8 at load 0.95, not 1.05's +60%
    direct = short_t5(summarize_runs(runs), gains(runs))
    assert direct.splitlines()[0] == text.splitlines()[0]


@pytest.mark.parametrize("option", ["default", "paper", "laps_sd"])
def test_every_sched_config_runs_at_least_ten_seeds_and_a_load_below_capacity(option, tmp_path):
    from tests.conftest import compose_cfg

    cfg = compose_cfg([f"sched={option}"], tmp_path)
    assert len(set(cfg.sched.seeds)) >= 10
    assert min(cfg.sched.loads) < 1


def test_shares_are_undefined_below_the_minimum_oracle_gain():
    """A tight but tiny oracle gain (0.5%, interval above 0) is no base for shares: undefined below 2 points."""
    rng = np.random.default_rng(2)
    base = rng.uniform(0.9, 1.1, 10)
    runs = _runs({("fcfs", "none", 0.8): base, ("oracle-sjf", CLAIRVOYANT, 0.8): base * 0.995,
                  ("sjf", "h", 0.8): base * 1.03,
                  ("fcfs", "none", 0.95): base, ("oracle-sjf", CLAIRVOYANT, 0.95): base * 0.9,
                  ("sjf", "h", 0.95): base * 0.95})
    g = gains(runs).set_index(["policy", "predictor", "load", "metric"])
    assert g.loc[("oracle-sjf", CLAIRVOYANT, 0.8, "gain_vs_fcfs")].ci_low > 0  # the interval alone would pass
    assert is_undefined(g.loc[("sjf", "h", 0.8, "share_of_oracle")].value)
    assert g.loc[("sjf", "h", 0.95, "share_of_oracle")].value == pytest.approx(0.5)
    loose = gains(runs, min_oracle_gain=0.1).set_index(["policy", "predictor", "load", "metric"])
    assert loose.loc[("sjf", "h", 0.8, "share_of_oracle")].value == pytest.approx(-6.0)
    strict = gains(runs, min_oracle_gain=12.0).set_index(["policy", "predictor", "load", "metric"])
    assert is_undefined(strict.loc[("sjf", "h", 0.95, "share_of_oracle")].value)


def test_random_row_is_printed_by_t5_and_short_t5(tmp_path):
    from lengthpred.sched.sweep.pool import RANDOM

    base = np.random.default_rng(3).uniform(0.9, 1.1, 10)
    runs = _runs({("fcfs", "none", 0.9): base, ("oracle-sjf", CLAIRVOYANT, 0.9): base * 0.6,
                  ("sjf", MEAN_ORACLE, 0.9): base * 0.7, ("sjf", RANDOM, 0.9): base * 1.05,
                  ("sjf", "h", 0.9): base * 0.8})
    s, g = summarize_runs(runs), gains(runs)
    text = short_t5(s, g)
    rows = [ln.split()[:2] for ln in text.splitlines()[3:7]]
    assert rows == [["fcfs", "none"], ["oracle-sjf", CLAIRVOYANT], ["sjf", MEAN_ORACLE], ["sjf", RANDOM]]
    assert "leave-one-out" in text and "anchor" in text
    md = table_t5(s, g).to_markdown()
    assert "| sjf | random |" in md and "leave-one-out" in md
