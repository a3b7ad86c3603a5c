"""Defects a second read of the reliability work found (each test failed on the code before its fix): swapped
train and test traces, an interrupted build, a log's timestamps in a stage's fingerprint, temps of writers that
died, a part moved aside between check and read, and two pipelines on one experiment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lengthpred.data import load_prompts
from lengthpred.errors import DataError
from lengthpred.integrity import sweep_stale_temps, temp_path, tree_digest, verify, write_checksum
from lengthpred.stages.data import prepare
from tests.test_reliability_store import trace_cfg, write_trace


def test_swapping_the_train_and_test_traces_is_a_change(tmp_path):
    a, b = write_trace(tmp_path / "a.jsonl"), write_trace(tmp_path / "b.jsonl", offset=500)
    prepare(trace_cfg(tmp_path, a, test_path=str(b)))
    swapped = trace_cfg(tmp_path, b, test_path=str(a))
    with pytest.raises(DataError, match="other trace contents"):
        load_prompts(swapped.data)


def test_an_interrupted_build_is_refused_then_rebuilt(tmp_path):
    cfg = trace_cfg(tmp_path, write_trace(tmp_path / "t.jsonl"))
    prepare(cfg)
    stamp = tmp_path / "data" / "splits" / "trace" / "build.json"
    stamp.write_text(json.dumps({"state": "building"}))  # what a crash mid-build leaves
    with pytest.raises(DataError, match="last build was interrupted"):
        load_prompts(cfg.data)
    prepare(cfg)
    assert load_prompts(cfg.data)
    stamp.unlink()  # a trace set without fingerprints: its files cannot be checked
    with pytest.raises(DataError, match="prepared before fingerprints"):
        load_prompts(cfg.data)


def test_a_logs_timestamps_leave_the_fingerprint_alone(tmp_path):
    (tmp_path / "out.csv").write_text("a,b\n")
    (tmp_path / "train.log").write_text("12:00:01 started\n")
    before = tree_digest(tmp_path)
    (tmp_path / "train.log").write_text("12:07:44 started\n")
    assert tree_digest(tmp_path) == before
    (tmp_path / "out.csv").write_text("a,c\n")
    assert tree_digest(tmp_path) != before


def test_temps_of_dead_writers_are_swept_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = tmp_path / f".part.safetensors.{pid}.0123abcd.tmp"
    stale.write_text("half")
    (tmp_path / f".prompts.{pid}.89abcdef.tmp").mkdir()
    live = temp_path(tmp_path / "part.safetensors")  # this process's: still writing
    live.write_text("half")
    (tmp_path / "part.safetensors").write_text("done")
    assert sweep_stale_temps(tmp_path) == 2
    assert live.exists() and (tmp_path / "part.safetensors").exists() and not stale.exists()
    assert os.getpid() != pid


def test_a_part_moved_aside_between_check_and_read_counts_as_damaged(tmp_path):
    part = tmp_path / "p.safetensors"
    part.write_bytes(b"x" * 10)
    write_checksum(part)
    assert verify(part) is True
    part.unlink()  # another reader quarantined it
    assert verify(part) is False
