"""Where the gap to the noise ceiling is: learning curves, their fitted trend, and the error breakdown."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.eval.error_breakdown import all_wrong, bins, breakdown, domain_mix, noise_table
from lengthpred.eval.learning_curve import (
    CurvePoint,
    ceiling_rows,
    check_fractions,
    draw_means,
    fit_power_law,
    size_to_reach,
    stratified_rows,
    trend,
)
from lengthpred.metrics import noise_ceiling
from tests.test_eval_dist import _write_reference
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)


def test_fractions_are_checked_in_one_line_before_any_fit():
    assert check_fractions([0.125, 0.5, 1.0], 1440) == [180, 720, 1440]
    with pytest.raises(DataError, match=r"fraction 0.01 of 1440 train prompts is 14 \(< 30\).*allows is 0.021"):
        check_fractions([0.01, 1.0], 1440)
    with pytest.raises(DataError, match=r"fraction 1.5: use fractions in \(0, 1\]"):
        check_fractions([1.5], 1440)
    with pytest.raises(DataError, match="fraction 0"):
        check_fractions([0], 1440)


def test_subsamples_keep_each_domains_share_and_are_seeded():
    domains = ["a"] * 80 + ["b"] * 40
    rows = stratified_rows(domains, 0.25, seed=1)
    assert sum(domains[i] == "a" for i in rows) == 20 and sum(domains[i] == "b" for i in rows) == 10
    assert rows == stratified_rows(domains, 0.25, seed=1) != stratified_rows(domains, 0.25, seed=2)
    assert stratified_rows(domains, 1.0, seed=5) == list(range(120))


def test_the_power_law_is_recovered_and_solved_for_the_target():
    n = np.array([100, 200, 400, 800, 1600])
    a, b, c = fit_power_law(n, 0.85 - 2.0 * n ** -0.5)
    assert (a, b, c) == pytest.approx((0.85, 2.0, 0.5), rel=1e-3)
    n_star = size_to_reach(a, b, c, 0.80)
    assert a - b * n_star ** -c == pytest.approx(0.80, abs=1e-6)
    assert math.isinf(size_to_reach(0.78, 1.0, 0.5, 0.80))  # the asymptote stays below: never


def test_bootstrap_ceiling_row_zero_is_the_ceiling_of_the_data():
    rng = np.random.default_rng(0)
    mu = rng.normal(5, 0.7, 200)
    S = np.exp(mu[:, None] + rng.normal(0, 0.5, (200, 3)))
    got = ceiling_rows(S)(np.arange(200)[None, :])[0]
    assert got == pytest.approx(noise_ceiling(S.tolist(), k=3).ceiling_mean_k, rel=1e-9)


def synthetic(n=300, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(5, 0.7, n)
    S = np.minimum(np.exp(mu[:, None] + rng.normal(0, 0.4, (n, 3))), 1000)
    y = S.mean(axis=1)
    return mu, S, y


def test_trend_on_a_head_that_improves_with_data():
    mu, S, y = synthetic()
    rng = np.random.default_rng(1)
    pts = []
    for n_train, noise in ((100, 1.2), (200, 0.8), (400, 0.55), (800, 0.42), (1600, 0.35)):
        for r in range(3):
            pts.append(CurvePoint("h", n_train / 1600, n_train, r, math.nan, math.nan,
                                  np.exp(mu + rng.normal(0, noise, len(mu))), 1.0))
    t = trend(pts, y, S, share=0.9, n_boot=200, seed=0)
    assert t.ceiling > 0.8 and t.target == pytest.approx(0.9 * t.ceiling)
    assert t.a_ci[0] <= t.a <= t.a_ci[1] and t.gain_last_doubling > 0
    assert t.ceiling_ci[0] <= t.ceiling <= t.ceiling_ci[1]
    assert 0 < t.full_share < 1.1 and 0 <= t.reachable_share <= 1


def test_breakdown_and_the_prompts_every_head_gets_wrong():
    mu, S, y = synthetic(240)
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"id": [str(i) for i in range(240)], "domain": np.repeat(["a", "b", "c"], 80), "y_true": y,
                          "prompt_tokens": rng.integers(10, 500, 240), "capped_frac": (S >= 1000).mean(axis=1)})
    frame["pred:good"] = np.exp(mu + rng.normal(0, 0.2, 240))
    frame["pred:bad"] = np.exp(mu + rng.normal(0, 0.2, 240))
    frame.loc[:9, ["pred:good", "pred:bad"]] *= 5  # ten prompts both heads miss by 5x
    assert all_wrong(frame, S, ["good", "bad"]).sum() >= 10
    assert bins(frame, "answer length").nunique() == 4 and set(bins(frame, "domain")) == {"a", "b", "c"}
    bd = breakdown(frame, S, ["good", "bad"], "domain", n_boot=100)
    assert list(bd["bin"]) == ["a", "b", "c"] and (bd["n"] == 80).all()
    assert (bd["good:spearman_low"] <= bd["good:spearman"]).all() and (bd["good:spearman"] <= bd["good:spearman_high"]).all()
    nt = noise_table(frame, S, ["good", "bad"], n_boot=100).set_index("group")
    wrong = nt.index[0]
    assert nt.loc[wrong, "n"] >= 10 and nt.loc[wrong, "within_2se"] < 0.2  # 5x misses are not sampling noise
    mix = domain_mix(frame, all_wrong(frame, S, ["good", "bad"]))
    assert mix.loc["a", "wrong"] >= 10 and mix["test"].sum() == 240


def test_the_stage_end_to_end_on_the_tiny_model(trace_run):  # noqa: F811
    from lengthpred.stages.gap import run_gap

    cfg = trace_run("linear", "targets_from=generations", "generate.max_new_tokens=60", "gap.heads=[linear]", "+gap.head_overrides.linear={layer: 2}",
                    "gap.fractions=[0.5,1.0]", "gap.resamples=2", "gap.min_train=2", "gap.n_boot=50")
    _write_reference(cfg, cap=60)
    out = run_gap(cfg, cfg.paths.output_dir, log=lambda _: None)
    assert set(out["points"]["fraction"]) == {0.5, 1.0} and len(out["points"]) == 4
    md = open(f"{cfg.paths.output_dir}/gap.md").read()
    assert "### Fitted trend" in md and "### By domain" in md and "Prompts every head gets wrong" in md
    assert "| linear | 2 |" in md  # the reach table: both draws at the full train set
    # a train run's predictions join the breakdown and the reach table, one array per seed column
    from lengthpred.data import load_splits
    from lengthpred.heads.assemble import indomain_ids

    ids = indomain_ids(load_splits(cfg.data))["test"]
    pd.DataFrame({"id": ids, "split": ["indomain/all/test"] * len(ids), "y_pred": np.arange(len(ids)) + 10.0,
                  "y_pred_seed0": np.arange(len(ids)) + 10.0, "y_pred_seed1": np.arange(len(ids)) + 11.0}
                 ).to_parquet(f"{cfg.paths.output_dir}/extra.parquet")
    cfg.gap.extra_predictions = {"other": f"{cfg.paths.output_dir}/extra.parquet"}
    out = run_gap(cfg, cfg.paths.output_dir, log=lambda _: None)
    reach = out["reach"].set_index("head")
    assert reach.loc["other", "seeds"] == 2 and "other Spearman" in open(f"{cfg.paths.output_dir}/gap.md").read()
    import lengthpred.stages.gap as gap_stage

    with pytest.MonkeyPatch.context() as mp:  # refused before any feature is read (or extracted)
        mp.setattr(gap_stage, "_sets", lambda *a: pytest.fail("features read before the check"))
        cfg.gap.extra_predictions = {"linear": f"{cfg.paths.output_dir}/extra.parquet"}
        with pytest.raises(ConfigError, match="linear is also in gap.heads"):
            run_gap(cfg, cfg.paths.output_dir, log=lambda _: None)
        cfg.gap.extra_predictions = {"other": f"{cfg.paths.output_dir}/no_such.parquet"}
        with pytest.raises(DataError, match="no predictions file at .*no_such.parquet"):
            run_gap(cfg, cfg.paths.output_dir, log=lambda _: None)
    cfg.gap.extra_predictions = {}
    cfg.gap.fractions = [0.01, 1.0]
    cfg.gap.min_train = 5
    with pytest.MonkeyPatch.context() as mp:  # a fraction too small for the train set: refused before any load
        mp.setattr(gap_stage, "_sets", lambda *a: pytest.fail("features read before the check"))
        with pytest.raises(DataError, match="fraction 0.01"):
            run_gap(cfg, cfg.paths.output_dir, log=lambda _: None)


def test_the_learning_curve_figure_draws_a_head_fitted_on_the_full_train_set_only(tmp_path, monkeypatch):
    import lengthpred.eval.plots as plots

    figs = []
    monkeypatch.setattr(plots.plt, "close", figs.append)  # keep the figure to read it back
    points = pd.DataFrame({"head": ["a"] * 4, "n_train": [10, 10, 20, 20], "test_spearman": [0.5, 0.6, 0.7, 0.72]})
    plots.learning_curve_figure(points, {"a": (0.8, 1.0, 0.5)}, 0.9, 0.9, tmp_path / "c.png",
                                others={"lora": [0.80, 0.84, float("nan")], "none": [float("nan")]}, others_at=25,
                                ceiling_ci=(0.85, 0.95))
    ax = figs[0].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "lora (full train set only, mean over seeds)" in labels and not any(x.startswith("none") for x in labels)
    band = [p for p in ax.patches if p.get_label() == "the ceiling's 95% interval"]
    assert len(band) == 1 and labels.index("the ceiling's 95% interval") == labels.index("noise ceiling (test)") + 1
    ys = band[0].get_patch_transform().transform(band[0].get_path().vertices)[:, 1]  # Rectangle or Polygon alike
    assert min(ys) == pytest.approx(0.85) and max(ys) == pytest.approx(0.95)
    diamonds = [c for c in ax.collections if (c.get_offsets()[:, 0] == 25).all()]
    assert sorted(np.vstack([c.get_offsets() for c in diamonds])[:, 1].round(2).tolist()) == [0.8, 0.82, 0.84]
    assert {tuple(c.get_facecolor()[0]) for c in diamonds} != {tuple(ax.collections[0].get_facecolor()[0])}


def test_draw_means_resample_the_draws_as_well_as_the_prompts():
    rng = np.random.default_rng(0)
    same = np.tile(np.linspace(0.6, 0.8, 201), (3, 1))  # three identical draws: nothing to add
    assert np.allclose(draw_means(same, rng), same[0], rtol=0, atol=1e-12)
    spread = np.vstack([np.full(2001, 0.70), np.full(2001, 0.75), np.full(2001, 0.80)])
    m = draw_means(spread, rng)
    assert m[0] == pytest.approx(0.75)  # column 0: every draw once
    assert m[1:].min() < 0.72 and m[1:].max() > 0.78  # the replicates see other mixes of draws
    assert set(np.round(m[1:] * 3, 6)) <= {round(0.70 * 3 + k * 0.05, 6) for k in range(7)}  # sums of 3 draws


def test_the_reach_verdict_rests_on_the_mean_over_seeds():
    from lengthpred.stages.gap import reach_table

    mu, S, y = synthetic(400)
    rng = np.random.default_rng(3)
    seeds = [np.exp(mu + rng.normal(0, sd, len(mu))) for sd in (0.9, 0.3, 0.3)]  # a poor first seed
    r = reach_table({"h": seeds}, y, S, share=0.9, n_boot=200, seed=0).iloc[0]
    from lengthpred.metrics import spearman_rows

    each = [float(spearman_rows(y[None, :], p[None, :])[0]) for p in seeds]
    assert r["spearman"] == pytest.approx(np.mean(each)) and r["seed_sd"] == pytest.approx(np.std(each, ddof=1))
    assert r["spearman_low"] <= r["spearman"] <= r["spearman_high"] and r["share_low"] <= r["share"] <= r["share_high"]
    assert r["verdict"] == ("reached" if r["share_low"] >= 0.9 else "not reached" if r["share_high"] < 0.9
                            else "not shown either way")
    one = reach_table({"h": seeds[:1]}, y, S, share=0.9, n_boot=200, seed=0).iloc[0]
    assert one["spearman"] == pytest.approx(each[0]) and math.isnan(one["seed_sd"])


def test_the_noise_sentence_says_what_the_noise_table_shows():
    from lengthpred.eval.error_breakdown import noise_sentence

    assert noise_sentence(57, 0.19, 423, 0.67) == (
        "Of the prompts every head gets wrong, 19% have an error within 2 standard errors of their own target, "
        "against 67% of the rest: most of these misses are larger than their own samples' noise explains.")
    assert noise_sentence(57, 0.6, 423, 0.67).endswith("their own samples' noise could explain most of these misses.")
    assert noise_sentence(0, math.nan, 480, 0.6) == "No test prompt is missed by every head."
    assert noise_sentence(5, math.nan, 475, 0.6) == "The noise table has no within-2-SE share to compare."
