"""Other stages' outputs are found through `lengthpred.stages.locations` by file name, and when a name occurs
twice the newest wins by the one rule of `lengthpred.artefacts`: the file written last (then the later path)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from lengthpred import artefacts
from lengthpred.eval.report import latest_file_per_group
from lengthpred.sched.sweep.sources import read_prediction_files
from lengthpred.stages import locations
from lengthpred.stages.runs import find_head_runs


def _write(path: Path, text: str, mtime: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, ns=(mtime, mtime))
    return path


def _predictions(path: Path, y_pred: float, mtime: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "head": ["linear"],
            "split": ["indomain/all/test"],
            "id": ["p0"],
            "y_true": [10.0],
            "y_pred": [y_pred],
        }
    ).to_parquet(path, index=False)
    os.utime(path, ns=(mtime, mtime))
    return path


# a stage run twice: first under runs/<time>/ (a later path), then again as the demo's adapt/ (an earlier path)
S = 1_000_000_000


def test_the_run_written_last_wins_not_the_later_path(tmp_path):
    old = _write(tmp_path / "runs" / "2026-12-01_10-00-00" / "summary.csv", "old", 1 * S)
    new = _write(tmp_path / "adapt" / "summary.csv", "new", 2 * S)
    assert sorted([old, new])[-1] == old  # path order would have picked the older run
    assert locations.online_summary(tmp_path) == new
    assert locations.newest_run(tmp_path, artefacts.ONLINE_SUMMARY) == new.parent
    assert artefacts.outputs(tmp_path, artefacts.ONLINE_SUMMARY) == [old, new]


def test_equal_write_times_fall_back_to_the_later_path(tmp_path):
    a = _write(tmp_path / "a" / "costs.json", "{}", 5 * S)
    b = _write(tmp_path / "b" / "costs.json", "{}", 5 * S)
    assert locations.costs_file(tmp_path) == b and artefacts.newest([b, a]) == b


def test_every_resolver_answers_none_when_the_stage_has_not_run(tmp_path):
    for resolve in (
        locations.online_summary,
        locations.online_curves,
        locations.sched_results,
        locations.sched_latencies,
        locations.costs_file,
    ):
        assert resolve(tmp_path) is None and resolve(tmp_path / "absent") is None
    assert locations.predictions_files(tmp_path / "absent") == []


def test_sched_and_eval_take_each_head_from_the_newest_file_by_the_same_rule(tmp_path):
    old = _predictions(tmp_path / "runs" / "2026-12-01_10-00-00" / "predictions.parquet", 1.0, 1 * S)
    new = _predictions(tmp_path / "adapt" / "predictions.parquet", 2.0, 2 * S)
    assert locations.predictions_files(tmp_path) == [old, new]
    assert read_prediction_files(tmp_path)["y_pred"].tolist() == [2.0]  # the simulator's request pool
    loaded = [(f, pd.read_parquet(f)) for f in sorted([old, new])]
    assert latest_file_per_group(loaded) == {("linear", "indomain/all/test"): new}  # the evaluate stage


def test_a_head_saved_twice_resolves_to_the_newer_save(tmp_path):
    def save(run: str, mtime: int) -> Path:
        head = tmp_path / "train" / run / "head"
        _write(head / "head.json", json.dumps({"head": "linear"}), mtime)
        return head

    newer, older = save("a", 2 * S), save("b", 1 * S)
    assert locations.saved_heads(tmp_path, ["train"]) == [older, newer]
    (run,) = find_head_runs(tmp_path, ["train"])
    assert run.name == "linear" and run.head_dir == newer
    assert locations.saved_heads(tmp_path, ["train/b"]) == [older]  # a folder under the experiment picks one


def test_splits_dir_is_the_data_configs_out_dir(tmp_path):
    from tests.conftest import compose_cfg

    cfg = compose_cfg([f"paths.data_dir={tmp_path}"], tmp_path)
    assert locations.splits_dir(cfg) == tmp_path / "splits" / str(cfg.data.name)
    assert locations.splits_json(cfg) == tmp_path / "splits" / str(cfg.data.name) / "splits.json"
    assert artefacts.splits_dir({"name": "x"}, tmp_path) == tmp_path / "splits" / "x"


# files allowed to spell a name besides artefacts.py (none left: pipeline.py now reads the constants)
NOT_YET: dict[str, list[str]] = {}


@pytest.mark.parametrize(
    "name",
    [
        "predictions.parquet",
        "summary.csv",
        "curves.csv",
        "stream_curves.csv",
        "sched_results.csv",
        "sched_latencies.parquet",
        "costs.json",
        "metrics.json",
    ],
)
def test_the_file_names_are_spelled_once(name):
    root = Path(artefacts.__file__).parent
    spelled = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if f'"{name}"' in p.read_text())
    assert spelled == sorted(["artefacts.py", *NOT_YET.get(name, [])])


def test_stray_outputs_are_the_scanned_names_no_pipeline_stage_wrote(tmp_path):
    exp = tmp_path / "exp"
    for f in ["train/linear/predictions.parquet", "simulate/sched_results.csv", "stack/predictions.parquet",
              "runs/2026-12-03/costs.json", "runs/2026-12-03/notes.txt", "results.csv", "tables/T1.md"]:
        _write(exp / f, "x", S)
    got = {str(p.relative_to(exp)) for p in locations.stray_outputs(exp, ["train", "simulate", "evaluate"])}
    assert got == {"stack/predictions.parquet", "runs/2026-12-03/costs.json"}
    assert locations.stray_outputs(tmp_path / "absent", ["train"]) == []
