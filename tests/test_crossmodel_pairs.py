"""lengthpred.crossmodel.pairs on small synthetic tables: which rows are paired, the direction of the difference
and of p, heads fitted on different targets, and what is refused or noted rather than scored."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.crossmodel.pairs import TOO_FEW, compare_pairs, parse_pairs, table_t7_pairs
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.errors import ConfigError

M1, M2 = "acme--m1", "acme--m2"


def _setup(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = [f"p{i:02d}" for i in range(n)]
    samples = rng.lognormal(5.0, 0.6, size=(n, 2, 10))
    samples[:5, 1] = np.nan  # m2 has no lengths for the first five prompts
    table = LengthTable(ids, [M1, M2], samples)
    return ids, table, rng


def _preds(head: str, fit: str, ids, values, **extra) -> pd.DataFrame:
    return pd.DataFrame({"id": ids, "y_pred": values, **extra}).assign(head=head, fit=fit)


def test_a_good_head_beats_a_noisy_one_on_each_scored_model_with_p_pointing_its_way():
    ids, table, rng = _setup()
    truth = table.target(ALL_MODELS, ids)
    good = truth * rng.lognormal(0, 0.05, len(ids))
    noisy = truth * rng.lognormal(0, 1.0, len(ids))
    preds = pd.concat([_preds("good", ALL_MODELS, ids, good), _preds("noisy", ALL_MODELS, ids, noisy),
                       _preds("noisy", M1, ids, noisy)], ignore_index=True)  # an own fit only one head has
    df = compare_pairs(preds, table, ids, [("good", "noisy")], min_test=5, n_boot=200)
    assert set(df["fit"]) == {ALL_MODELS} and set(df["model"]) == {M1, M2}  # every model the all-models fit scores
    assert dict(zip(df["model"], df["n"], strict=True)) == {M1: 40, M2: 35}  # each model's own prompts
    sp = df[df.metric == "spearman"].set_index("model")
    mae = df[df.metric == "mae"].set_index("model")
    assert (sp["diff"] > 0).all() and (sp["ci_low"] > 0).all() and (sp["p_value"] < 0.05).all()
    assert (mae["diff"] < 0).all() and (mae["ci_high"] < 0).all() and (mae["p_value"] < 0.05).all()
    flipped = compare_pairs(preds, table, ids, [("noisy", "good")], min_test=5, n_boot=200)
    fs = flipped[flipped.metric == "spearman"].set_index("model")
    np.testing.assert_allclose(fs["diff"], -sp["diff"])
    assert (fs["p_value"] > 0.95).all()


def test_seeds_are_averaged_on_the_metric_and_a_median_is_scored_where_recorded():
    ids, table, rng = _setup()
    truth = table.target(ALL_MODELS, ids)
    s0, s1 = truth * rng.lognormal(0, 0.3, len(ids)), truth * rng.lognormal(0, 0.6, len(ids))
    head = _preds("h", ALL_MODELS, ids, s0, y_pred_seed0=s0, y_pred_seed1=s1, y_pred_median=s0 * 0.9,
                  y_pred_median_seed0=s0 * 0.9, y_pred_median_seed1=s1 * 0.9)
    ref = _preds("r", ALL_MODELS, ids, truth)
    df = compare_pairs(pd.concat([head, ref], ignore_index=True), table, ids, [("h", "r")], min_test=5, n_boot=50)
    row = df[(df.metric == "mae") & (df.model == M1)].iloc[0]
    y = table.target(M1, ids)
    assert row.n_seeds == 2 and row.scored == "median" and row.reference_scored == "y_pred"
    assert row.seed_mean == pytest.approx(np.mean([np.abs(s0 * 0.9 - y).mean(), np.abs(s1 * 0.9 - y).mean()]))


def test_too_few_prompts_and_a_missing_seed_are_rows_that_say_so():
    ids, table, rng = _setup()
    truth = table.target(ALL_MODELS, ids)
    broken = truth.copy()
    broken[3] = np.nan
    preds = pd.concat([_preds("a", ALL_MODELS, ids, truth, y_pred_seed0=truth, y_pred_seed1=broken),
                       _preds("b", ALL_MODELS, ids, truth)], ignore_index=True)
    df = compare_pairs(preds, table, ids, [("a", "b")], min_test=36)
    notes = dict(zip(df["model"], df["note"], strict=True))
    assert notes[M2] == f"{TOO_FEW} (35)"
    assert notes[M1] == "not compared: y_pred_seed1 is missing for 1 of 40 prompts"
    md = table_t7_pairs(df, 1000).to_markdown()
    assert f"| {TOO_FEW} (35) |" in md and "nan" not in md


def test_the_table_labels_its_unit_and_floors_p_at_the_bootstrap():
    ids, table, rng = _setup()
    truth = table.target(ALL_MODELS, ids)
    preds = pd.concat([_preds("a", ALL_MODELS, ids, truth), _preds("b", ALL_MODELS, ids, rng.permutation(truth))],
                      ignore_index=True)
    md = table_t7_pairs(compare_pairs(preds, table, ids, [("a", "b")], min_test=5, n_boot=100), 100).to_markdown()
    assert "| MAE (tokens) (y_pred, y_pred) |" in md and "| < 0.01 |" in md


def test_pairs_are_checked_before_any_work():
    targets = {"lora": (ALL_MODELS, M1), "probe": (ALL_MODELS, M1, M2), "proxy_reg": (M2,)}
    known = ["lora", "probe", "proxy_reg", "linear"]
    assert parse_pairs([["lora", "probe"]], targets, known) == [("lora", "probe")]
    assert parse_pairs([["linear", "probe"]], targets, known) == []  # a narrower run: left out, with a warning
    for pairs, said in (([["lora"]], "is not a pair of two different heads"),
                        ([["lora", "lora"]], "is not a pair of two different heads"),
                        (["lora"], "is not a pair of two different heads"),
                        ([["lora", "prob"]], r"\['prob'\] is not a head"),
                        ([["lora", "proxy_reg"]], "lora and proxy_reg share no fit target")):
        with pytest.raises(ConfigError, match=said):
            parse_pairs(pairs, targets, known)
