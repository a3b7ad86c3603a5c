"""Serving traces' bad input (one line naming file, line, row and field; or skip and count), and trace windows:
refused when the trace is too short, disjoint per seed, scaled to a load by one constant (CV kept)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lengthpred.data.serving_traces import load_trace
from lengthpred.errors import ConfigError, DataError
from lengthpred.sched import get_profile
from lengthpred.sched.core.workload import capacity
from lengthpred.sched.traces.windows import interarrival_cv, scale_to_rate, trace_windows, window_stats

HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _azure(root, rows, head=HEAD):
    (root / "traces").mkdir(parents=True, exist_ok=True)
    f = root / "traces/azure2023_conv.csv"
    f.write_text(head + "\n" + "\n".join(rows) + "\n")
    return f


def _ts(s: float) -> str:
    return f"2023-11-16 18:17:{s:010.7f}"


def test_non_monotone_timestamp_is_named_not_sorted(tmp_path):
    f = _azure(tmp_path, [f"{_ts(1)},10,3", f"{_ts(3)},11,4", f"{_ts(2)},12,5", f"{_ts(4)},13,6"])
    with pytest.raises(DataError) as e:
        load_trace("azure2023_conv", tmp_path)
    msg = str(e.value)
    assert f"{f}:4" in msg and "row 3" in msg and "'TIMESTAMP'" in msg and "non-monotone" in msg
    assert "\n" not in msg
    df = load_trace("azure2023_conv", tmp_path, on_bad="skip")
    assert df["prompt_tokens"].tolist() == [10, 11, 13]  # the out-of-order row dropped, the rest in file order
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 2.0, 3.0])
    assert df.attrs["bad_input"] == {"non-monotone timestamp": 1}


@pytest.mark.parametrize("row, field, kind", [
    (f"{_ts(2)},0,3", "ContextTokens", "token count"),
    (f"{_ts(2)},10,-4", "GeneratedTokens", "token count"),
    (f"{_ts(2)},10,2.5", "GeneratedTokens", "token count"),
    (f"{_ts(2)},,3", "ContextTokens", "token count"),
    (",10,3", "TIMESTAMP", "timestamp"),
    ("yesterday,10,3", "TIMESTAMP", "timestamp"),
])
def test_bad_values_name_file_line_row_and_field(tmp_path, row, field, kind):
    f = _azure(tmp_path, [f"{_ts(1)},10,3", row, f"{_ts(3)},12,5"])
    with pytest.raises(DataError) as e:
        load_trace("azure2023_conv", tmp_path)
    msg = str(e.value)
    assert f"{f}:3" in msg and "row 2" in msg and f"'{field}'" in msg and kind in msg
    df = load_trace("azure2023_conv", tmp_path, on_bad="skip")
    assert len(df) == 2 and sum(df.attrs["bad_input"].values()) == 1


def test_unknown_and_missing_columns(tmp_path):
    _azure(tmp_path, [f"{_ts(1)},10,3,x", f"{_ts(2)},11,4,y"], head=HEAD + ",Region")
    with pytest.raises(DataError, match=r"unknown column.*'Region'"):
        load_trace("azure2023_conv", tmp_path)
    df = load_trace("azure2023_conv", tmp_path, on_bad="skip")
    assert len(df) == 2 and df.attrs["bad_input"] == {"unknown column": 1}
    _azure(tmp_path, [f"{_ts(1)},10", f"{_ts(2)},11"], head="TIMESTAMP,ContextTokens")
    with pytest.raises(DataError, match="line 1: no column 'GeneratedTokens'"):
        load_trace("azure2023_conv", tmp_path, on_bad="skip")  # a missing column cannot be skipped
    with pytest.raises(ConfigError, match="on_bad_input"):
        load_trace("azure2023_conv", tmp_path, on_bad="sort")


def test_mooncake_rows_and_ties(tmp_path):
    (tmp_path / "traces").mkdir()
    f = tmp_path / "traces/mooncake_conversation.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 6, "output_length": 4, "hash_ids": [0]}\n'
                 '{"timestamp": 0, "input_length": 7, "output_length": 5, "hash_ids": [1]}\n'
                 '{"timestamp": 3000, "input_length": 8, "output_length": 0, "hash_ids": [2]}\n')
    with pytest.raises(DataError, match=r"mooncake_conversation.jsonl:3: .*row 3, field 'output_length'"):
        load_trace("mooncake_conversation", tmp_path)
    df = load_trace("mooncake_conversation", tmp_path, on_bad="skip")
    assert df["arrival_s"].tolist() == [0.0, 0.0]  # equal timestamps are fine (Mooncake's 3 s ticks)


def _trace(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(0.25, 4.0, n)  # bursty: CV 2
    return pd.DataFrame({"arrival_s": np.cumsum(gaps) - gaps[0], "prompt_tokens": rng.integers(10, 2000, n),
                         "output_tokens": rng.integers(1, 800, n)})


def test_windows_are_disjoint_and_a_short_trace_is_refused_with_its_size():
    df = _trace(1000)
    ws = trace_windows(df, "t", n_requests=300, n_windows=3, offset=50)
    assert [w.first for w in ws] == [50, 350, 650]
    assert all(w.arrival[0] == 0 and len(w) == 300 for w in ws)
    assert ws[1].output.tolist() == df["output_tokens"].iloc[350:650].tolist()
    with pytest.raises(DataError, match="trace t has 1000 requests; 4 windows of 300 from row 0 need 1200"):
        trace_windows(df, "t", n_requests=300, n_windows=4)
    with pytest.raises(DataError, match="one instant"):
        trace_windows(df.assign(arrival_s=0.0), "t", n_requests=10, n_windows=1)
    with pytest.raises(ConfigError):
        trace_windows(df, "t", n_requests=1, n_windows=1)


def test_scaling_to_a_load_keeps_the_burstiness():
    df = _trace(2000)
    w = trace_windows(df, "t", n_requests=2000, n_windows=1)[0]
    prof = get_profile("a100-llama2-7b")
    cap = capacity(prof, w.prompt, w.output)
    a = scale_to_rate(w.arrival, 0.9 * cap)
    assert (len(a) - 1) / a[-1] == pytest.approx(0.9 * cap)
    assert interarrival_cv(a) == pytest.approx(interarrival_cv(w.arrival)) and interarrival_cv(a) > 1.5
    st = window_stats([w], prof, [0.5, 0.9])
    assert st["scaled_cv"].tolist() == pytest.approx(st["trace_cv"].tolist())
    assert st["time_scale"].iloc[0] == pytest.approx(1.8 * st["time_scale"].iloc[1])  # higher load: compressed
    assert st["capacity"].iloc[0] == pytest.approx(cap)
