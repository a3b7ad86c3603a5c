"""W&B logging (offline, as by default): tables keep their numbers, runs are named by stage and overrides, and a
feature store or predictions file is logged as a reference artifact (its path and digest, nothing uploaded)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.integrity import write_checksum
from lengthpred.stages import tracking
from tests.conftest import compose_cfg


def test_table_cells_keep_numbers():
    df = pd.DataFrame({"head": ["linear", "probe"], "spearman": [0.5, np.nan], "n": np.array([3, 4], dtype=np.int64),
                       "ci": [[0.1, 0.2], None]})
    rows = tracking.table_cells(df.itertuples(index=False))
    assert rows == [["linear", 0.5, 3, "[0.1, 0.2]"], ["probe", None, 4, None]]
    assert all(type(r[2]) is int and (r[1] is None or type(r[1]) is float) for r in rows)


def test_runs_are_named_by_stage_and_what_they_compute():
    assert tracking.run_name("train", ["head=linear", "paths.data_dir=/x", "hydra.run.dir=/y", "logger.mode=offline",
                                       "data=trace"]) == "train head=linear data=trace"
    long = tracking.run_name("train", [f"head.params.k{i}=v{i}" for i in range(40)])
    assert len(long) == tracking.NAME_CHARS and long.endswith("…")


@pytest.mark.slow  # a W&B offline run: its service process starts in a few seconds
def test_an_offline_run_logs_a_table_and_a_store_by_reference(tmp_path, monkeypatch):
    store = tmp_path / "store"
    (store / "parts").mkdir(parents=True)
    (store / "parts" / "a.safetensors").write_bytes(b"x" * 64)
    write_checksum(store / "parts" / "a.safetensors")
    monkeypatch.setattr(tracking, "_task_overrides", lambda: ["head=linear", "paths.data_dir=/x"])
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = compose_cfg(["logger=wandb", "logger.mode=offline", f"logger.dir={tmp_path}"], tmp_path)
    with tracking.tracked(cfg, "train") as tracker:
        assert tracker.run.name == "train head=linear"
        tracker.log_frame("t", pd.DataFrame({"a": [1, 2], "b": [0.5, np.nan]}))
        art = tracker.log_reference("features-tiny", "feature-store", store, {"prompts": 1})
    refs = sorted(e.ref for e in art.manifest.entries.values())  # every file by reference, none uploaded
    assert refs == [(store / "parts" / n).resolve().as_uri() for n in ("a.safetensors", "a.safetensors.sha256")]
    assert art.metadata["digest"] and art.metadata["path"] == str(store.resolve()) and art.type == "feature-store"
    assert list(tmp_path.glob("wandb/offline-run-*"))
