"""The demo prompt selection is frozen (the committed reference trace is keyed by its ids) and seeded."""

from __future__ import annotations

import hashlib

import pytest

from lengthpred.data.build import build_from_sources
from lengthpred.data.settings import data_settings
from tests.conftest import compose_cfg

# sha1 of the comma-joined sorted ids of data=demo (360 prompts; its CoT variants left with the ForeLen
# leak fix: every one of them is in the committed reference trace)
DEMO_IDS_SHA1 = "45e073af29e400ba628ef6a38459b3d8c6fd9476"

needs_data = pytest.mark.datasets


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cfg = compose_cfg(["data=demo"], tmp_path_factory.mktemp("demo"))
    return build_from_sources(data_settings(cfg.data))


@needs_data
def test_demo_selection_is_frozen(demo):
    records, splits = demo
    ids = sorted(r["id"] for r in records)
    assert len(ids) == 360 == len(set(ids))
    assert hashlib.sha1(",".join(ids).encode()).hexdigest() == DEMO_IDS_SHA1


@needs_data
def test_demo_splits_shape(demo):
    records, splits = demo
    assert set(splits["indomain"]) == {"chat", "math", "code", "writing", "summarization", "qa"}
    for parts in splits["indomain"].values():
        assert [len(parts[k]) for k in ("train", "val", "test")] == [36, 12, 12]
        assert not set(parts["train"]) & set(parts["test"])
    assert len(splits["cross"]) == 6 * 6  # 5 single sources + the mix, per target
    assert all(p["shift"]["length_wasserstein"] >= 0 for p in splits["cross"])
    seen = {i for parts in splits["indomain"].values() for i in parts["train"] + parts["val"]}
    assert splits["forelen"]["reasoning"] == []
    assert len(splits["forelen"]["longseq"]) == 30 and len(splits["forelen"]["rl"]) == 24
    for name in ("longseq", "rl"):
        assert not set(splits["forelen"][name]) & seen


# sha1 of the sorted ids of data=bench (6 x 400 prompts + 40 CoT variants of val/test math prompts): the
# committed trace data/reference/smollm2-135m/bench.jsonl is keyed by them
BENCH_IDS_SHA1 = "a1260ba7a6d1a5103ad37112c4a13f967445f9f8"


@needs_data
def test_bench_selection_is_frozen_and_contains_the_demo(demo, tmp_path):
    records, splits = build_from_sources(data_settings(compose_cfg(["data=bench"], tmp_path).data))
    ids = sorted(r["id"] for r in records)
    assert len(ids) == 2440 and hashlib.sha1(",".join(ids).encode()).hexdigest() == BENCH_IDS_SHA1
    assert {r["id"] for r in demo[0]} <= set(ids)  # the demo's trace rows serve bench too
    for parts in splits["indomain"].values():
        assert [len(parts[k]) for k in ("train", "val", "test")] == [240, 80, 80]
    train = {i for parts in splits["indomain"].values() for i in parts["train"]}
    val = {i for parts in splits["indomain"].values() for i in parts["val"]}
    for pair in splits["cross"]:
        assert len(pair["test"]) == 80 and not set(pair["train"]) & set(pair["test"])
    by_id = {r["id"]: r for r in records}
    train_texts = {by_id[i]["messages"][-1]["content"] for i in train}
    for name, sub in splits["forelen"].items():
        assert len(sub) >= 30 and not set(sub) & (train | val), name
    for i in splits["forelen"]["reasoning"]:  # no CoT variant of a train prompt
        assert by_id[i]["messages"][-1]["content"].rsplit("\n\n", 1)[0] not in train_texts
