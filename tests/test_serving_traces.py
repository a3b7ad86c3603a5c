"""Serving-trace loaders on small files written here: columns, ordering, and bad rows named."""

from __future__ import annotations

import pytest

from lengthpred.data.serving_traces import TRACES, load_trace
from lengthpred.errors import ConfigError, DataError


def _azure(root, rows):
    (root / "traces").mkdir(parents=True, exist_ok=True)
    (root / "traces/azure2023_conv.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows))


def test_azure_rows_become_seconds_since_first(tmp_path):
    _azure(tmp_path, ["2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 18:17:05.5000000,10,3"])
    df = load_trace("azure2023_conv", tmp_path)
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 1.52004])
    assert df["prompt_tokens"].tolist() == [4808, 10]
    assert df["output_tokens"].tolist() == [10, 3]


def test_mooncake_ms_timestamps(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces/mooncake_conversation.jsonl").write_text(
        '{"timestamp": 0, "input_length": 6, "output_length": 4, "hash_ids": [0]}\n'
        '{"timestamp": 2500, "input_length": 7, "output_length": 5, "hash_ids": [1]}\n')
    df = TRACES.get("mooncake_conversation").load(tmp_path)
    assert df["arrival_s"].tolist() == [0.0, 2.5]
    assert df["output_tokens"].tolist() == [4, 5]


def test_bad_row_is_named(tmp_path):
    _azure(tmp_path, ["2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 18:17:04.0,12,0"])
    with pytest.raises(DataError, match="row 2"):
        load_trace("azure2023_conv", tmp_path)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_trace("azure2023_code", tmp_path)
    with pytest.raises(ConfigError, match="azure2023_conv"):
        load_trace("nope", tmp_path)
