"""Every MANIFEST file is read by some source loader, and every loader yields valid records."""

from __future__ import annotations

import re

import pytest

from lengthpred.data import SOURCES
from lengthpred.data.readers import BadInputLog
from lengthpred.data.records import DOMAINS
from lengthpred.data.serving_traces import COLUMNS, TRACES
from lengthpred.data.sources import manifest_files
from lengthpred.paths import default_datasets_root

ROOT = default_datasets_root()
pytestmark = pytest.mark.datasets


def test_every_manifest_file_has_a_loader():
    covered = {f for name in SOURCES for f in SOURCES.get(name).files}
    covered |= {f for name in TRACES for f in TRACES.get(name).files}
    assert set(manifest_files(ROOT)) - covered == set()
    assert covered - set(manifest_files(ROOT)) == set()


@pytest.mark.parametrize("name", SOURCES.names())
def test_source_loads(name):
    recs = list(SOURCES.get(name).load(ROOT, BadInputLog("raise")))
    assert recs, name
    for r in recs[:200]:
        assert re.fullmatch(r"[0-9a-f]{16}", r["id"])
        assert r["domain"] in DOMAINS
        assert r["messages"][-1]["role"] == "user"
    if name.startswith(("castillo", "alpaca_eval")):
        assert all(r["lengths"] and r["length_model"] for r in recs)
    if name.startswith("castillo"):
        assert all(len(r["lengths"]) == 10 for r in recs)


@pytest.mark.parametrize("name", TRACES.names())
def test_serving_trace_loads(name):
    df = TRACES.get(name).load(ROOT)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) > 1000
    assert df["arrival_s"].iloc[0] == 0.0 and df["arrival_s"].is_monotonic_increasing
    assert (df["prompt_tokens"] >= 1).all() and (df["output_tokens"] >= 1).all()
    assert df["arrival_s"].iloc[-1] > 60  # real arrivals span minutes, not one burst
