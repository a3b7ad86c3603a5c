"""The selection table and the paired comparisons' reference head come from the train runs' validation
scores (metrics.json), never from test."""

from __future__ import annotations

import json
import os

import pytest

from lengthpred.errors import DataError
from lengthpred.eval.report import evaluate_run
from lengthpred.eval.selection import candidates_table, read_fits, resolve_paired_heads, selection_table
from lengthpred.stages.provenance import provenance_of

SEARCH = {
    "protocol": "random",
    "budget": 2,
    "seed": 0,
    "space": {"alpha": [0.1, 10.0]},
    "space_size": 2,
    "subsample": None,
    "n_search_train": 60,
    "refit_on_all_train": False,
}


def fit(head, val, test, **kw):
    cands = [
        {"params": {"alpha": 0.1}, "val_spearman": val - 0.1, "fit_seconds": 0.5},
        {"params": {"alpha": 10.0}, "val_spearman": val, "fit_seconds": 1.5},
    ]
    return {
        "head": head,
        "n_train": 60,
        "val_spearman": val,
        "spearman": test,
        "selected": {"alpha": 10.0},
        "candidates": cands,
        "search": SEARCH,
    } | kw


def write(root, name, blob, mtime=None):
    d = root / "train" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.json").write_text(json.dumps(blob))
    if mtime is not None:
        os.utime(d / "metrics.json", (mtime, mtime))


def test_reference_is_best_on_validation_not_on_test(tmp_path):
    write(tmp_path, "linear", fit("linear", val=0.70, test=0.80))
    write(tmp_path, "probe", fit("probe", val=0.75, test=0.60))  # worse on test, better on val
    assert resolve_paired_heads(["auto"], tmp_path) == ["probe"]
    assert resolve_paired_heads(["linear", "auto"], tmp_path) == ["linear", "probe"]
    assert resolve_paired_heads(["egtp"], tmp_path) == ["egtp"]  # named heads stay as they are


def test_multi_seed_heads_compete_on_their_seed_mean_and_the_newest_run_counts(tmp_path):
    seeds = [{"val_spearman": v} for v in (0.78, 0.60, 0.60)]  # first seed best, mean 0.66
    write(tmp_path, "egtp", fit("egtp", val=0.78, test=0.7, seeds=seeds, n_seeds=3))
    write(tmp_path, "linear_old", fit("linear", val=0.50, test=0.7), mtime=1)
    write(tmp_path, "linear", fit("linear", val=0.70, test=0.7))
    assert read_fits(tmp_path)["linear"]["val_spearman"] == 0.70
    assert resolve_paired_heads(["auto"], tmp_path) == ["linear"]


def test_auto_without_train_runs_is_an_error_before_any_prediction_is_read(tmp_path):
    with pytest.raises(DataError, match="no train-stage metrics.json"):
        evaluate_run(tmp_path, provenance_of(None), paired_heads=["auto"])


def test_selection_table_shows_budget_space_choice_and_spread(tmp_path):
    write(tmp_path, "linear", fit("linear", val=0.70, test=0.8))
    write(
        tmp_path,
        "constant",
        {
            "head": "constant",
            "n_train": 60,
            "val_spearman": None,
            "fit_seconds": 0.01,
            "search": None,
            "candidates": [],
        },
    )
    table = selection_table(read_fits(tmp_path))
    md = table.to_markdown()
    assert "| constant | no search | — (no learned hyperparameters)" in md
    assert (
        "| linear (reference) | 2 of 2 (random) | alpha ∈ {0.1, 10} | alpha=10 | 0.700 | 0.600 – 0.700 |"
        in md
    )
    assert "2.0 s (1.00 s / candidate)" in md
    assert selection_table({}) is None


def test_candidates_table_lists_every_setting_with_its_seed_mean_and_how_many_seeds_chose_it(tmp_path):
    a, b = {"alpha": 0.1}, {"alpha": 10.0}
    cands = [  # seed 0 prefers b, seed 1 prefers a; b has the better mean
        {"random_state": 0, "params": a, "val_spearman": 0.50, "fit_seconds": 1.0},
        {"random_state": 0, "params": b, "val_spearman": 0.70, "fit_seconds": 3.0},
        {"random_state": 1, "params": a, "val_spearman": 0.62, "fit_seconds": 1.0},
        {"random_state": 1, "params": b, "val_spearman": 0.60, "fit_seconds": 1.0},
    ]
    write(tmp_path, "probe", fit("probe", val=0.7, test=0.7, candidates=cands))
    write(tmp_path, "constant", {"head": "constant", "n_train": 60, "search": None, "candidates": []})
    md = candidates_table(read_fits(tmp_path)).to_markdown()
    rows = [r for r in md.splitlines() if r.startswith("| probe")]
    assert rows == ["| probe | alpha=10 | 0.650 | 0.600 – 0.700 | 2 | 2.00 s | 1 of 2 |",
                    "| probe | alpha=0.1 | 0.560 | 0.500 – 0.620 | 2 | 1.00 s | 1 of 2 |"]
    assert "constant" not in md
    assert candidates_table({"constant": {"candidates": []}}) is None


def test_the_selection_script_tables_chosen_run_folders_and_refuses_a_second_run_of_a_head(tmp_path, capsys):
    from scripts.selection_tables import main

    runs = []
    for name, blob in (("a", fit("linear", 0.70, 0.9)), ("b", fit("probe", 0.75, 0.1)), ("c", fit("probe", 0.8, 0.1))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(blob))
        runs.append(str(tmp_path / name))
    assert main(runs[:2] + ["--out", str(tmp_path / "t.md")]) == 0
    text = (tmp_path / "t.md").read_text()
    assert "| probe (reference) |" in text  # best on validation, although linear is far better on test
    assert text.count("| linear | alpha=10") == 1 and text.count("| linear | alpha=0.1") == 1  # every candidate
    assert main(runs) == 2 and "a second run of head 'probe'" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2 and capsys.readouterr().err.startswith("error: ")
