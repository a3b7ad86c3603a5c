"""Heads from separate runs compared on their seed means (lengthpred.eval.seed_pairs, scripts/compare_seeds.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.eval.seed_pairs import compare_seed_means, seed_pairs_markdown
from lengthpred.metrics import spearman

N = 240


def frame(head: str, y: np.ndarray, preds: list[np.ndarray], *, median: list[np.ndarray] | None = None,
          seed_cols: bool = True) -> pd.DataFrame:
    ids = [f"p{i:03d}" for i in range(len(y))]
    test = pd.DataFrame({"head": head, "split": [f"indomain/d{i % 3}/test" for i in range(len(y))], "id": ids,
                         "y_true": y, "y_pred": preds[0]})
    if seed_cols:
        for i, p in enumerate(preds):
            test[f"y_pred_seed{i}"] = p
    for i, m in enumerate(median or []):
        test[f"y_pred_median_seed{i}"] = m
    val = test.assign(split=test["split"].str.replace("test", "val"), y_true=test["y_true"] + 1)
    return pd.concat([val, test], ignore_index=True)


@pytest.fixture
def y() -> np.ndarray:
    return np.random.default_rng(0).gamma(2.0, 100.0, N)


def noisy(y: np.ndarray, sd: float, seed: int) -> np.ndarray:
    return y + np.random.default_rng(seed).normal(0, sd, len(y))


def test_a_heads_seeds_may_come_from_several_runs_and_pair_on_shared_prompts(y):
    ref = frame("probe", y, [noisy(y, 30, s) for s in range(3)])
    a = frame("proxy", y, [noisy(y, 120, 10), noisy(y, 120, 11)])
    b = frame("proxy", y, [noisy(y, 120, 12)], seed_cols=False)  # a one-seed run: its y_pred is the seed
    df = compare_seed_means({"probe": [ref], "proxy": [a, b]}, "probe", ["indomain/*/test"], n_boot=300)
    sp = df[df["metric"] == "spearman"].set_index("head")
    assert sp.loc["probe", "n_seeds"] == 3 and sp.loc["proxy", "n_seeds"] == 3 and (sp["n"] == N).all()
    want = np.mean([spearman(y, noisy(y, 120, s)) for s in (10, 11, 12)])
    assert sp.loc["proxy", "seed_mean"] == pytest.approx(want, abs=1e-12)  # test rows only (val's y differs)
    assert sp.loc["proxy", "ci_high"] < 0 and sp.loc["proxy", "p_value"] > 0.95
    assert np.isnan(sp.loc["probe", "diff_vs_reference"])
    md = seed_pairs_markdown(df, "probe")
    assert "| probe | 3 | spearman (y_pred) |" in md and "(reference)" in md


def test_mae_scores_each_seeds_median_where_the_file_records_it(y):
    ref = frame("probe", y, [y * 1.5, y * 1.5], median=[y, y])  # means overshoot; medians exact
    other = frame("other", y, [y * 1.2])
    df = compare_seed_means({"probe": [ref], "other": [other]}, "probe", ["indomain/*/test"], n_boot=100)
    mae = df[df["metric"] == "mae"].set_index("head")
    assert mae.loc["probe", "seed_mean"] == 0.0 and mae.loc["other", "diff_vs_reference"] > 0


def test_one_kind_of_prediction_per_head_and_files_holding_several_heads(y):
    # one file with a 2-seed head and a 1-seed head: the latter's seed columns are NaN there
    both = pd.concat([frame("probe", y, [noisy(y, 30, 0), noisy(y, 30, 1)], median=[y, y]),
                      frame("const", y, [np.full(N, 200.0)], seed_cols=False)], ignore_index=True)
    no_median = frame("probe", y, [noisy(y, 30, 2)])  # a later run of the probe without median columns
    df = compare_seed_means({"probe": [both, no_median], "const": [both]}, "probe", ["indomain/*/test"], n_boot=50)
    mae = df[df["metric"] == "mae"].set_index("head")
    assert mae.loc["probe", "n_seeds"] == 3 and mae.loc["probe", "scored"] == "y_pred"  # not a mix
    sp = df[df["metric"] == "spearman"].set_index("head")
    assert sp.loc["const", "n_seeds"] == 1 and np.isnan(sp.loc["const", "seed_mean"])
    assert np.isnan(sp.loc["const", "diff_vs_reference"])
    md = seed_pairs_markdown(df, "probe")
    assert "| const | 1 | spearman (y_pred) | undefined | undefined |" in md


def test_bad_inputs_are_one_line_errors(y):
    ref = frame("probe", y, [noisy(y, 30, 0)])
    with pytest.raises(DataError, match="reference head 'linear' is not among"):
        compare_seed_means({"probe": [ref]}, "linear", ["indomain/*/test"])
    with pytest.raises(DataError, match="no rows whose split matches"):
        compare_seed_means({"probe": [ref]}, "probe", ["cross/*"])
    with pytest.raises(DataError, match="appears twice"):
        compare_seed_means({"probe": [ref]}, "probe", ["indomain/*"])
    other = frame("other", y + 1, [y])
    with pytest.raises(DataError, match="y_true differs"):
        compare_seed_means({"probe": [ref], "other": [other]}, "probe", ["indomain/*/test"])
    disjoint = frame("other", y, [y]).assign(id=lambda d: "q" + d["id"])
    with pytest.raises(DataError, match="share 0 prompt"):
        compare_seed_means({"probe": [ref], "other": [disjoint]}, "probe", ["indomain/*/test"])


def test_the_script_reads_run_folders_and_writes_the_table(y, tmp_path, capsys):
    import scripts.compare_seeds as cli

    for name, f in {"probe": frame("probe", y, [noisy(y, 30, 0)]), "proxy": frame("proxy", y, [noisy(y, 90, 1)])}.items():
        (tmp_path / name).mkdir()
        f.to_parquet(tmp_path / name / "predictions.parquet")
    out = tmp_path / "docs" / "pairs.md"
    rc = cli.main(["--reference", "probe", "--n-boot", "50", "--out", str(out),
                   f"probe={tmp_path / 'probe'}", f"proxy={tmp_path / 'proxy' / 'predictions.parquet'}"])
    assert rc == 0 and out.read_text() == capsys.readouterr().out
    assert len(pd.read_csv(out.with_suffix(".csv"))) == 4
    assert cli.main(["--reference", "probe", "probe"]) == 2
    assert "HEAD=PATH" in capsys.readouterr().err
