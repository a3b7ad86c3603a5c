"""Per-prompt targets: censoring, statistics, the reference trace file and load_targets' sources."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import open_dict

from lengthpred.errors import ConfigError, DataError
from lengthpred.stages.locations import reference_path
from lengthpred.stages.targets import load_targets
from lengthpred.targets import (
    per_prompt,
    read_reference,
    sample_agreement,
    target_statistic,
    write_reference,
)
from tests.conftest import compose_cfg

ROWS = pd.DataFrame({
    "id": ["b", "a", "a", "b", "a", "b"],
    "sample": [0, 0, 1, 1, 2, 2],
    "length": [10, 4, 300, 20, 8, 30],  # a/1 hit the cap of 256 (reported past it by a buggy backend)
    "finish_reason": ["eos", "eos", "length", "eos", "eos", "eos"],
    "prompt_tokens": [5, 7, 7, 5, 7, 5],
})


def test_capped_samples_count_as_the_cap_and_are_counted():
    t = per_prompt(ROWS, "mean", cap=256)
    assert list(t.index) == ["a", "b"]
    assert t.loc["a", "lengths"] == [4, 256, 8]
    assert t.loc["a", "n_capped"] == 1 and t.loc["a", "capped_frac"] == pytest.approx(1 / 3)
    assert t.loc["a", "target"] == pytest.approx((4 + 256 + 8) / 3)
    assert t.loc["b", "n_capped"] == 0 and t.loc["b", "target"] == pytest.approx(20.0)
    assert per_prompt(ROWS, "median", cap=256).loc["a", "target"] == 8
    assert per_prompt(ROWS, "first", cap=256).loc["b", "target"] == 10


def test_bad_statistic_and_duplicates_are_named():
    with pytest.raises(ConfigError, match="statistic"):
        target_statistic([1, 2], "mode")
    with pytest.raises(DataError, match="duplicate"):
        per_prompt(pd.concat([ROWS, ROWS.iloc[:1]]), "mean", cap=256)


def test_sample_agreement_is_one_for_identical_samples_and_lower_for_noise():
    rng = np.random.default_rng(0)
    base = rng.integers(1, 200, size=50)
    same = pd.DataFrame({"lengths": [[v, v, v] for v in base], "n_samples": 3})
    assert sample_agreement(same) == pytest.approx(1.0)
    noisy = pd.DataFrame({"lengths": [list(rng.integers(1, 200, size=3)) for _ in base], "n_samples": 3})
    assert abs(sample_agreement(noisy)) < 0.5


def test_reference_round_trip_has_no_texts(tmp_path):
    path = write_reference(ROWS.assign(text="secret"), tmp_path / "ref.jsonl", {"settings": {"max_new_tokens": 256}})
    assert "secret" not in path.read_text()
    rows, meta = read_reference(path)
    assert meta["settings"]["max_new_tokens"] == 256 and len(rows) == 6
    with pytest.raises(DataError, match="no reference trace"):
        read_reference(tmp_path / "missing.jsonl")


def _cfg(tmp_path, *overrides):
    cfg = compose_cfg(["model=tiny", *overrides], tmp_path)
    with open_dict(cfg):
        cfg.paths.data_dir = str(tmp_path)
    return cfg


def test_load_targets_prefers_merged_generations_and_falls_back_to_the_reference(tmp_path, tiny_model, tokenizer):
    import datasets

    from lengthpred.stages.generate import generate_from_cfg

    cfg = _cfg(tmp_path, "generate.backend=static", "generate.num_samples=2", "generate.max_new_tokens=8")
    ref_rows = ROWS.assign(length=[3, 4, 8, 5, 6, 7], finish_reason=["eos", "eos", "length", "eos", "eos", "eos"])
    write_reference(ref_rows, reference_path(cfg), {"settings": {"max_new_tokens": 8, "num_samples": 3}})
    with pytest.raises(ConfigError, match="num_samples=3 in the trace but 2"):
        load_targets(cfg)  # a trace made with other settings is refused, naming the setting
    write_reference(ref_rows, reference_path(cfg), {"settings": {"max_new_tokens": 8, "num_samples": 2}})
    t = load_targets(cfg)
    assert t.attrs["source"].endswith("tiny/demo.jsonl") and t.loc["a", "n_capped"] == 1
    prompts = datasets.Dataset.from_dict({"id": ["a", "b"], "messages": [
        [{"role": "user", "content": "hi there"}], [{"role": "user", "content": "what is 2+2?"}]]})
    assert generate_from_cfg(cfg, prompts, model=tiny_model, tokenizer=tokenizer, progress=False).merged
    t = load_targets(cfg, statistic="first")
    assert "generations" in t.attrs["source"] and list(t["n_samples"]) == [2, 2]
    assert t.attrs["cap"] == 8 and (t["target"] <= 8).all()
    with open_dict(cfg):
        cfg.generate.targets.use_reference = False
        cfg.generate.max_new_tokens = 9
    with pytest.raises(DataError, match="no merged generations"):
        load_targets(cfg)
    assert json.loads(reference_path(cfg).read_text().splitlines()[0])["meta"]["settings"]["num_samples"] == 2


def test_partial_export_keeps_only_complete_prompts(tmp_path, tiny_model, tokenizer):
    import datasets

    from lengthpred.stages.generate import generate_from_cfg
    from lengthpred.stages.targets import export_reference

    cfg = _cfg(tmp_path, "generate.backend=static", "generate.max_new_tokens=6", "generate.batch_size=1",
               "shard=0/2")
    prompts = datasets.Dataset.from_dict({"id": ["a", "b", "c"], "messages": [
        [{"role": "user", "content": f"question {i}"}] for i in range(3)]})
    assert not generate_from_cfg(cfg, prompts, model=tiny_model, tokenizer=tokenizer, progress=False).merged
    with pytest.raises(DataError, match="no merged generations"):
        export_reference(cfg)
    rows, meta = read_reference(export_reference(cfg, allow_partial=True))
    assert meta["partial"] and sorted(rows["id"].unique()) == ["a", "c"] and meta["n_prompts"] == 2
    assert set(rows["sample"]) == set(range(int(cfg.generate.num_samples)))


def test_truncated_reference_trace_is_refused(tmp_path):
    path = write_reference(ROWS, tmp_path / "t.jsonl", {"n_rows": len(ROWS), "settings": {}})
    path.write_text("\n".join(path.read_text().splitlines()[:-2]) + "\n")
    with pytest.raises(DataError, match="truncated"):
        read_reference(path)
