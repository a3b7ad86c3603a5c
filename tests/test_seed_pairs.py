"""Heads from separate runs compared on their seed means (lengthpred.eval.seed_pairs, scripts/compare_seeds.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.eval.seed_pairs import compare_seed_means, merge_seed_runs, seed_pairs_markdown
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


def test_one_seed_runs_merge_into_the_file_one_run_over_every_seed_writes(y):
    preds = [noisy(y, 50, s) for s in range(3)]
    medians = [p * 0.9 for p in preds]
    one_run = frame("lora", y, preds, median=medians)
    runs = []
    for p, m in zip(preds, medians, strict=True):
        f = frame("lora", y, [p], seed_cols=False)
        runs.append(f.assign(y_pred_median=np.concatenate([m + 1, m])))  # the val rows' medians differ
    runs = [runs[0], runs[1].iloc[::-1].reset_index(drop=True), runs[2]]  # row order does not matter
    merged = merge_seed_runs(runs, "lora")
    test = merged[merged["split"].str.endswith("/test")].set_index("id")
    want = one_run[one_run["split"].str.endswith("/test")].set_index("id")
    for i in range(3):
        np.testing.assert_array_equal(test[f"y_pred_seed{i}"], want[f"y_pred_seed{i}"])
        np.testing.assert_array_equal(test[f"y_pred_median_seed{i}"], want[f"y_pred_median_seed{i}"])
    np.testing.assert_array_equal(test["y_pred"], preds[0])  # the first run's own columns, as they were
    assert len(merged) == len(runs[0])
    df = compare_seed_means({"lora": [merged], "same": [one_run]}, "lora", ["indomain/*/test"], n_boot=50)
    sp = df[df["metric"] == "spearman"].set_index("head")
    assert sp.loc["lora", "n_seeds"] == 3 and sp.loc["same", "diff_vs_reference"] == pytest.approx(0, abs=1e-12)


def test_a_multi_seed_run_contributes_every_seed_and_runs_that_disagree_are_refused(y):
    a = frame("lora", y, [noisy(y, 50, 0), noisy(y, 50, 1)])
    b = frame("lora", y, [noisy(y, 50, 2)], seed_cols=False)
    merged = merge_seed_runs([a, b], "lora")
    assert [c for c in merged.columns if c.startswith("y_pred_seed")] == ["y_pred_seed0", "y_pred_seed1",
                                                                         "y_pred_seed2"]
    np.testing.assert_array_equal(merged["y_pred_seed2"].to_numpy()[-N:], noisy(y, 50, 2))
    with pytest.raises(DataError, match="run 2: y_true differs"):
        merge_seed_runs([a, b.assign(y_true=b["y_true"] + 1)], "lora")
    with pytest.raises(DataError, match="run 2: its rows differ"):
        merge_seed_runs([a, b.iloc[1:]], "lora")
    with pytest.raises(DataError, match="run 1: no rows of head 'probe'"):
        merge_seed_runs([a, b], "probe")


def test_the_merge_script_writes_one_file_and_never_overwrites(y, tmp_path, capsys):
    import scripts.merge_seeds as cli

    for k in range(2):
        (tmp_path / f"s{k}").mkdir()
        frame("lora", y, [noisy(y, 50, k)], seed_cols=False).to_parquet(tmp_path / f"s{k}" / "predictions.parquet")
    out = tmp_path / "merged"
    assert cli.main(["--head", "lora", "--out", str(out), str(tmp_path / "s0"), str(tmp_path / "s1")]) == 0
    merged = pd.read_parquet(out / "predictions.parquet")
    assert list(merged.filter(like="y_pred_seed").columns) == ["y_pred_seed0", "y_pred_seed1"]
    before = (out / "predictions.parquet").read_bytes()
    assert cli.main(["--head", "lora", "--out", str(out), str(tmp_path / "s0")]) == 2
    assert "exists" in capsys.readouterr().err and (out / "predictions.parquet").read_bytes() == before
    assert cli.main(["--head", "lora", "--out", str(tmp_path / "new"), str(tmp_path / "nope")]) == 2
    assert "no predictions file" in capsys.readouterr().err


def _fit_record(seed: int, rho: float, val: float, n_parameters: int) -> dict:
    return {"spearman": rho, "kendall": rho / 2, "mae": 80.0 + seed, "mae_mean": 81.0, "head": "lora",
            "n_train": 10, "n_val": 5, "n_test": 5, "n_parameters": n_parameters, "params": {"random_state": seed},
            "selected": {"lr": 1e-4 * (seed + 1)}, "val_spearman": val, "fit_seconds": 60.0, "model": "m", "data": "d",
            "search": {"protocol": "random", "budget": 2, "seed": seed, "space": {"lr": [1e-4, 3e-4]}, "subsample": None},
            "candidates": [{"random_state": seed, "params": {"lr": lr}, "val_spearman": val} for lr in (1e-4, 3e-4)]}


def test_merged_seed_metrics_read_like_one_run_over_every_seed():
    from lengthpred.eval.seed_pairs import merge_seed_metrics
    from lengthpred.eval.selection import best_on_validation

    runs = [_fit_record(0, 0.74, 0.78, 100), _fit_record(1, 0.76, 0.70, 100), _fit_record(2, 0.72, 0.72, 300)]
    m = merge_seed_metrics(runs)
    assert m["n_seeds"] == 3 and [s["random_state"] for s in m["seeds"]] == [0, 1, 2]
    assert m["spearman"] == 0.74 and m["spearman_seed_mean"] == pytest.approx(0.74)  # the first seed's head is kept
    assert m["n_parameters"] is None and m["fit_seconds_seeds"] == 180.0  # the seeds' sizes differ: no one count
    assert merge_seed_metrics(runs[:2])["n_parameters"] == 100
    assert [c["random_state"] for c in m["candidates"]] == [0, 0, 1, 1, 2, 2]  # every seed's search, not the first's
    # eval.paired.heads=[auto] scores it on its seeds' mean validation Spearman (0.733), not the first seed's 0.78
    assert best_on_validation({"lora": m, "probe": {"val_spearman": 0.75}}) == "probe"
    with pytest.raises(DataError, match="run 2: .* n_train"):
        merge_seed_metrics([runs[0], runs[1] | {"n_train": 11}])
    with pytest.raises(DataError, match="run 2: .* data, search.budget"):
        merge_seed_metrics([runs[0], runs[1] | {"data": "other", "search": runs[1]["search"] | {"budget": 3}}])
    with pytest.raises(DataError, match="seed 0 appears in more than one run"):
        merge_seed_metrics([runs[0], runs[0]])
    with pytest.raises(DataError, match="not 'probe'"):
        merge_seed_metrics(runs, head="probe")
    with pytest.raises(DataError, match="run 2: .* not a JSON object"):
        merge_seed_metrics([runs[0], None])


def test_the_merge_script_writes_the_metrics_when_every_run_has_them(y, tmp_path, capsys):
    import json

    import scripts.merge_seeds as cli

    for k in range(2):
        (tmp_path / f"s{k}").mkdir()
        frame("lora", y, [noisy(y, 50, k)], seed_cols=False).to_parquet(tmp_path / f"s{k}" / "predictions.parquet")
        (tmp_path / f"s{k}" / "metrics.json").write_text(json.dumps(_fit_record(k, 0.7, 0.7, 100)))
    runs = [str(tmp_path / "s0"), str(tmp_path / "s1")]
    assert cli.main(["--head", "lora", "--out", str(tmp_path / "m"), *runs]) == 0
    assert json.loads((tmp_path / "m" / "metrics.json").read_text())["n_seeds"] == 2
    (tmp_path / "s1" / "metrics.json").write_text(json.dumps(_fit_record(1, 0.7, 0.7, 100) | {"head": "probe"}))
    assert cli.main(["--head", "lora", "--out", str(tmp_path / "bad"), *runs]) == 2
    assert "head" in capsys.readouterr().err and not (tmp_path / "bad").exists()  # nothing written
    (tmp_path / "s1" / "metrics.json").write_text(json.dumps(_fit_record(1, 0.7, 0.7, 100)))
    files = [str(tmp_path / f"s{k}" / "predictions.parquet") for k in range(2)]  # runs given as their files
    assert cli.main(["--head", "lora", "--out", str(tmp_path / "f"), *files]) == 0
    assert json.loads((tmp_path / "f" / "metrics.json").read_text())["n_seeds"] == 2
    (tmp_path / "s1" / "metrics.json").unlink()
    assert cli.main(["--head", "lora", "--out", str(tmp_path / "n"), *runs]) == 0
    assert not (tmp_path / "n" / "metrics.json").exists() and "eval.paired.heads=[]" in capsys.readouterr().out
