"""The demo prompt selection is frozen (the committed reference trace is keyed by its ids) and seeded."""

from __future__ import annotations

import hashlib

import pytest

from lengthpred.data.build import build_from_sources
from lengthpred.paths import default_datasets_root
from tests.conftest import compose_cfg

# sha1 of the comma-joined sorted ids of data=demo (360 prompts + 24 chain-of-thought variants)
DEMO_IDS_SHA1 = "d7c0f4a9fa7a7e271035c25f831023b7a691d32c"

needs_data = pytest.mark.skipif(not (default_datasets_root() / "MANIFEST.json").is_file(),
                                reason="datasets not present (run scripts/fetch_datasets.py)")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cfg = compose_cfg(["data=demo"], tmp_path_factory.mktemp("demo"))
    return build_from_sources(cfg.data)


@needs_data
def test_demo_selection_is_frozen(demo):
    records, splits = demo
    ids = sorted(r["id"] for r in records)
    assert len(ids) == 384 == len(set(ids))
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
    assert len(splits["forelen"]["reasoning"]) == 24
