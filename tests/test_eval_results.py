"""predictions.parquet → results.csv: scoring, undefined values, ceiling/shift/paired rows, refusals."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lengthpred.errors import DataError
from lengthpred.eval import read_results, write_results
from lengthpred.eval.report import evaluate_run, make_tables
from lengthpred.metrics import UNDEFINED
from lengthpred.stages.provenance import provenance_of
from tests.eval_fixtures import write_experiment

NO_CFG = provenance_of(None)


def _evaluate(root: Path, n_boot: int = 100) -> pd.DataFrame:
    return evaluate_run(
        root, NO_CFG, n_boot=n_boot, reference=root / "reference.jsonl", splits_json=root / "splits.json"
    )


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    return write_experiment(tmp_path_factory.mktemp("exp"), n=30)


@pytest.fixture(scope="module")
def results(experiment) -> pd.DataFrame:
    return _evaluate(experiment)


def _get(df: pd.DataFrame, head: str, split: str, metric: str) -> pd.Series:
    rows = df[(df["head"] == head) & (df["split"] == split) & (df["metric"] == metric)]
    assert len(rows) == 1, (head, split, metric)
    return rows.iloc[0]


def test_results_rows_and_provenance(results):
    r = _get(results, "linear", "indomain/math/test", "spearman")
    assert r.ci_low <= r.value <= r.ci_high and r.n == 30
    assert (r.experiment, r.model, r.data) == ("synth", "smollm2-135m", "synth") and len(r.config_hash) == 12
    assert _get(results, "constant", "indomain/math/test", "spearman").value is UNDEFINED
    pooled = _get(results, "linear", "indomain/all/test", "spearman")
    assert pooled.n == 90 and 0 < pooled.value < 1  # three domains of 30 prompts
    assert _get(results, "noise_ceiling", "indomain/all/test", "ceiling_mean_k").n == 90
    assert _get(results, "linear", "indomain/math/test", "n_parameters").value == 577
    ceil = _get(results, "noise_ceiling", "indomain/math/test", "ceiling_mean_k")
    assert 0.5 < ceil.value <= 1.0
    assert _get(results, "_split", "cross/chat->math/test", "shift").value == pytest.approx(0.61)
    gain = _get(results, "rls@0.999", "cross/chat->code/test", "spearman_diff_vs_static")
    assert gain.value > 0 and gain.ci_low <= gain.value <= gain.ci_high


def test_results_file_round_trips_undefined(results, tmp_path):
    path = write_results(results, tmp_path / "results.csv")
    text = path.read_text()
    assert "undefined" in text and "nan" not in text.lower()
    back = read_results(path)
    assert _get(back, "constant", "indomain/chat/test", "kendall").ci_high is UNDEFINED
    assert _get(back, "linear", "indomain/chat/test", "mae").value == pytest.approx(
        _get(results, "linear", "indomain/chat/test", "mae").value, rel=1e-9
    )


def test_results_from_another_model_are_refused(results, tmp_path):
    a = write_results(results, tmp_path / "a" / "results.csv")
    other = results.copy()
    other["model"] = "llama-3.1-8b"
    b = write_results(other, tmp_path / "b" / "results.csv")
    with pytest.raises(DataError, match=r"disagree on model: model='llama-3.1-8b' from .*b/results.csv"):
        make_tables([a, b], tmp_path / "tables", plot=False)
    other = results.copy()
    other["config_hash"] = "0123456789ab"
    c = write_results(other, tmp_path / "c" / "results.csv")
    with pytest.raises(DataError, match="disagree on config_hash"):
        make_tables([a, c], tmp_path / "tables", plot=False)
    with pytest.raises(DataError, match="appear more than once"):
        make_tables([a, a], tmp_path / "tables", plot=False)


def test_evaluate_refuses_runs_of_two_models(experiment, tmp_path):
    root = tmp_path / "exp"
    shutil.copytree(experiment, root)
    run2 = root / "runs" / "r2"
    shutil.copytree(root / "runs" / "r1", run2)
    df = pd.read_parquet(run2 / "predictions.parquet")
    df["head"] = df["head"] + "_v2"
    df.to_parquet(run2 / "predictions.parquet")
    cfg = run2 / ".hydra" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("smollm2-135m", "qwen2.5-7b"))
    with pytest.raises(DataError, match="qwen2.5-7b"):
        _evaluate(root, n_boot=0)


def test_rerun_supersedes_older_predictions(experiment, tmp_path):
    root = tmp_path / "exp"
    shutil.copytree(experiment, root)
    run2 = root / "runs" / "r2"  # a later run of the same heads and splits
    shutil.copytree(root / "runs" / "r1", run2)
    df = pd.read_parquet(run2 / "predictions.parquet")
    df["y_pred"] = df["y_true"]  # perfect
    df.to_parquet(run2 / "predictions.parquet")
    res = _evaluate(root, n_boot=0)
    assert _get(res, "linear", "indomain/chat/test", "mae").value == 0.0
    # a later multirun job wins over an earlier run although "multiruns/" sorts before "runs/"
    job = root / "multiruns" / "t" / "0"
    shutil.copytree(root / "runs" / "r1", job)
    os.utime(job / "predictions.parquet", ns=(2**62, 2**62))
    res = _evaluate(root, n_boot=0)
    assert _get(res, "linear", "indomain/chat/test", "mae").value > 0


def test_parameter_counts_come_from_the_runs_metrics_json(experiment, tmp_path):
    root = tmp_path / "exp"
    shutil.copytree(experiment, root)
    run = root / "runs" / "r1"
    df = pd.read_parquet(run / "predictions.parquet").drop(columns=["n_parameters"])
    df.to_parquet(run / "predictions.parquet")
    (run / "metrics.json").write_text('{"head": "linear", "n_parameters": 1153, "spearman": 0.5}')
    res = _evaluate(root, n_boot=0)
    assert _get(res, "linear", "indomain/code/test", "n_parameters").value == 1153
    assert res[(res["head"] == "constant") & (res["metric"] == "n_parameters")].empty


def test_bad_predictions_file_is_named(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    pd.DataFrame({"head": ["a"], "split": ["indomain/x/test"], "id": ["1"]}).to_parquet(
        run / "predictions.parquet"
    )
    with pytest.raises(DataError, match="lacks column.*y_true"):
        evaluate_run(tmp_path, NO_CFG, n_boot=0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no predictions.parquet"):
        evaluate_run(empty, NO_CFG)
    with pytest.raises(DataError, match="no such run or experiment directory"):
        evaluate_run(tmp_path / "missing", NO_CFG)


def test_ceiling_from_prompt_table_lengths(experiment):
    from lengthpred.eval.report import read_reference_samples
    from lengthpred.targets import samples_from_prompts

    ref = read_reference_samples(experiment / "reference.jsonl")
    records = [{"id": i, "lengths": v} for i, v in ref.items()] + [{"id": "single", "lengths": [3]}]
    samples = samples_from_prompts(records)
    assert "single" not in samples and len(samples) == len(ref)
    res = evaluate_run(experiment, NO_CFG, n_boot=0, samples=samples)
    via_file = evaluate_run(experiment, NO_CFG, n_boot=0, reference=experiment / "reference.jsonl")
    a = _get(res, "noise_ceiling", "indomain/code/test", "ceiling_mean_k").value
    assert a == _get(via_file, "noise_ceiling", "indomain/code/test", "ceiling_mean_k").value


def test_evaluate_names_the_config_key_that_differs(experiment, tmp_path):
    root = tmp_path / "exp"
    shutil.copytree(experiment, root)
    run2 = root / "runs" / "r2"
    shutil.copytree(root / "runs" / "r1", run2)
    df = pd.read_parquet(run2 / "predictions.parquet")
    df.assign(head=df["head"] + "_v2").to_parquet(run2 / "predictions.parquet")
    cfg = run2 / ".hydra" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("temperature: 0.7", "temperature: 1.0, batch_size: 64"))
    with pytest.raises(DataError, match=r"config_hash.*\[generate.temperature: 0.7 vs 1.0\]"):
        _evaluate(root, n_boot=0)


def test_paired_heads_compare_heads_of_different_files(experiment, tmp_path):
    """Heads saved by separate runs share a test set: `paired_heads` compares them on the same resampled
    prompts (the per-file `paired_baselines` cannot, since no file holds both)."""
    src = experiment / "runs" / "r1"
    df = pd.read_parquet(src / "predictions.parquet")
    for head, g in df[df["split"].str.startswith("indomain/")].groupby("head"):
        run = tmp_path / "runs" / head
        shutil.copytree(src / ".hydra", run / ".hydra")
        g.to_parquet(run / "predictions.parquet")
    alone = evaluate_run(tmp_path, NO_CFG, n_boot=50, paired_baselines=["linear"])
    assert not alone["metric"].eq("spearman_diff_vs_linear").any()
    res = evaluate_run(tmp_path, NO_CFG, n_boot=50, paired_baselines=[], paired_heads=["linear"])
    pooled = res[(res["split"] == "indomain/all/test") & (res["metric"] == "spearman")]
    others = sorted(set(pooled["head"]) - {"linear", "constant"})
    assert others
    for head in others:
        d = _get(res, head, "indomain/all/test", "spearman_diff_vs_linear")
        expect = (_get(res, head, "indomain/all/test", "spearman").value
                  - _get(res, "linear", "indomain/all/test", "spearman").value)
        assert d.value == pytest.approx(expect) and d.ci_low <= d.value <= d.ci_high and d.n == 90
    assert not res[res["split"] == "indomain/math/test"]["metric"].str.contains("diff_vs_linear").any()
