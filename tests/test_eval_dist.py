"""The distributional experiment: every row fitted and scored on synthetic samples, the known-truth checks,
and the stage end to end on the tiny model (features) with a written reference trace (caps)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lengthpred.distributions import Observations
from lengthpred.errors import ConfigError, DataError
from lengthpred.eval.distributional import (
    ALL_HEADS,
    CEILING_FAIR,
    DistSplit,
    fit_distributions,
    pit_table,
    recap_check,
    score_table,
    synthetic_check,
)
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)


def split(n: int, seed: int, cap: float = 512.0) -> DistSplit:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    mu = np.repeat(5.0 + X[:, :2] @ np.array([0.5, -0.4]), 3)
    L = np.floor(np.expm1(mu + 0.6 * rng.normal(size=mu.size)))
    return DistSplit(X, Observations(np.repeat(np.arange(n), 3), np.minimum(L, cap), L >= cap, cap))


def test_every_row_is_fitted_and_scored_and_the_censored_fit_leads_the_naive_one():
    train, val, test = split(300, 0), split(60, 1), split(120, 2)
    dists = fit_distributions(train, val, test, ALL_HEADS, log=lambda _: None)
    assert list(dists) == list(ALL_HEADS)
    scores = score_table(dists, test.obs, n_boot=100).set_index("head")
    assert set(scores.index) == {*ALL_HEADS, CEILING_FAIR}
    ok = scores.dropna(subset=["crps_low"])
    assert ((ok["crps_low"] <= ok["crps"]) & (ok["crps"] <= ok["crps_high"])).all()
    assert scores.loc["censored_lognormal", "crps"] < scores.loc["lognormal_naive", "crps"]
    assert scores.loc["censored_lognormal", "crps"] < scores.loc["train_marginal", "crps"]
    assert abs(scores.loc["censored_lognormal", "coverage@0.8"] - 0.8) < 0.06
    assert scores.loc["linear_point", "coverage@0.8"] < 0.1  # a point claims certainty it lacks
    pit = pit_table(dists, test.obs)
    np.testing.assert_allclose(pit.sum(axis=1), 1.0, atol=1e-9)
    with pytest.raises(ValueError, match="unknown distributional row"):
        fit_distributions(train, val, test, ["nope"], log=lambda _: None)


def test_recap_check_recovers_the_share_beyond_the_short_cap():
    df = recap_check(split(400, 3), split(200, 4), 128.0, log=lambda _: None).set_index("fit")
    observed = df.iloc[0]
    t = [c for c in df.columns if c.startswith("P(L>=")][1]  # between the two caps
    assert abs(df.loc["censored@128", t] - observed[t]) < 0.05
    assert df.loc["naive@128", t] < observed[t] - 0.1
    synth = synthetic_check(n_prompts=300, seed=1).set_index("fit")
    assert abs(synth.loc["censored", "sigma"] - 0.6) < abs(synth.loc["naive (cap as value)", "sigma"] - 0.6)


def test_censored_rls_adapts_a_shifted_stream_in_crps():
    """Source prompts shorter by 0.5 in log length than the target's: streaming the target's completions,
    censored RLS lowers the CRPS below the static fit's; RLS on capped-as-value lengths gains less."""
    from lengthpred.eval.distributional import adaptation_curve

    def shifted(n, seed, shift):
        sp = split(n, seed)
        rng = np.random.default_rng(seed + 100)
        mu = np.repeat(5.0 + shift + sp.X[:, :2] @ np.array([0.5, -0.4]), 3)
        L = np.floor(np.expm1(mu + 0.6 * rng.normal(size=mu.size)))
        return DistSplit(sp.X, Observations(sp.obs.row, np.minimum(L, 512), L >= 512, 512.0))

    curve = adaptation_curve(shifted(300, 0, 0.0), shifted(300, 1, 0.7), shifted(100, 2, 0.7), every=100)
    last = curve[curve["labels"] == 300].set_index("model")["crps"]
    assert set(curve["labels"]) == {0, 100, 200, 300}
    assert last["censored_rls"] < 0.9 * last["static"]
    assert last["censored_rls"] < last["rls_cap_as_value"]


def _write_reference(cfg, cap: int | None) -> None:
    from lengthpred.data import load_prompts
    from lengthpred.stages.locations import reference_path

    rng = np.random.default_rng(0)
    path = reference_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = {"max_new_tokens": cap} if cap else {}
    with path.open("w") as f:
        f.write(json.dumps({"meta": {"settings": settings}}) + "\n")
        for r in load_prompts(cfg.data):
            for s in range(3):
                n = int(rng.integers(5, 80))
                capped = cap is not None and n >= 60
                f.write(json.dumps({"id": r["id"], "sample": s, "length": min(n, 60) if capped else n,
                                    "finish_reason": "length" if capped else "eos", "prompt_tokens": 10}) + "\n")


def test_the_stage_writes_tables_and_figure_and_refuses_a_trace_without_a_cap(trace_run):  # noqa: F811
    from lengthpred.stages.dist import run_dist

    cfg = trace_run("linear", "distribution.layer=2", "distribution.short_cap=30", "distribution.n_boot=50",
                    "distribution.heads=[censored_lognormal,quantile_linear,linear_point,train_marginal]",
                    "distribution.sched.heads=[censored_lognormal]", "distribution.sched.loads=[0.9]",
                    "distribution.sched.seeds=[0]", "distribution.sched.n_requests=40")
    _write_reference(cfg, cap=60)
    out = run_dist(cfg, cfg.paths.output_dir, log=lambda _: None)
    assert set(out["scores"]["head"]) == {"censored_lognormal", "quantile_linear", "linear_point",
                                          "train_marginal"}
    md = open(f"{cfg.paths.output_dir}/dist.md").read()
    assert "| censored_lognormal |" in md and "re-capped at 30" in md and "hs.L2.last" in md
    assert open(f"{cfg.paths.output_dir}/dist_pit.png", "rb").read(4) == b"\x89PNG"
    assert "Schedulers using the distribution: load 0.9" in md and "| amin | censored_lognormal:q0.1 |" in md
    assert {"sjf", "amin", "amin-swap", "amin-nopreempt", "fcfs", "oracle-sjf"} == set(out["sched"]["policy"])
    cfg.distribution.sched.heads = ["probe"]
    with pytest.raises(ConfigError, match="sched.heads need"):
        run_dist(cfg, cfg.paths.output_dir, log=lambda _: None)
    cfg.distribution.sched.heads = ["censored_lognormal"]
    cfg.distribution.features = "domains"
    with pytest.raises(ConfigError, match="distribution.features"):
        run_dist(cfg, cfg.paths.output_dir, log=lambda _: None)
    cfg.distribution.features = "hs"
    cfg.distribution.heads = ["linear"]
    with pytest.raises(ConfigError, match="distribution.heads: unknown"):
        run_dist(cfg, cfg.paths.output_dir, log=lambda _: None)
    cfg.distribution.heads = ["censored_lognormal"]
    _write_reference(cfg, cap=None)
    with pytest.raises(DataError, match="records no cap"):
        run_dist(cfg, cfg.paths.output_dir, log=lambda _: None)
