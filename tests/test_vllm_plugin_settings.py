"""The plugin's settings and the row channel between vLLM's processes: no vLLM needed."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.errors import ConfigError
from lengthpred.vllm_plugin._vllm_private import check_version
from lengthpred.vllm_plugin.channel import RowReceiver, RowSender, StepRows, address
from lengthpred.vllm_plugin.settings import PluginSettings

ENV = {"LENGTHPRED_READOUT": "/models/readout.safetensors"}


def test_defaults_and_the_checkpoint_beside_the_readout():
    s = PluginSettings.from_sources(ENV, None)
    assert (s.policy, s.aging_weight, s.max_yields, s.updates) == ("sjf", 0.0, None, "thread")
    assert str(s.checkpoint) == "/models/readout.live.safetensors"
    assert s.deadline_s is None
    assert PluginSettings.from_sources(ENV, {"lengthpred": {"deadline_s": 30}}).deadline_s == 30.0
    s = PluginSettings.from_sources(ENV, {"lengthpred": {"policy": "srpt", "max_yields": 2, "aging_weight": 300,
                                                         "checkpoint_path": "/tmp/x.safetensors"}})
    assert (s.policy, s.max_yields, s.aging_weight, str(s.checkpoint)) == ("srpt", 2, 300.0, "/tmp/x.safetensors")


@pytest.mark.parametrize("opts, message", [
    ({"policy": "lifo"}, "valid: fcfs, sjf, srpt"),
    ({"aging_weight": -1}, ">= 0"),
    ({"aging_weight": float("inf")}, "finite"),
    ({"max_yields": -1}, ">= 0 or null"),
    ({"max_prefill_slots": 0}, ">= 1 or null"),
    ({"deadline_s": 0}, "> 0 seconds or null"),
    ({"deadline_s": float("nan")}, "> 0 seconds or null"),
    ({"policy": "fcfs", "deadline_s": 30}, "with policy fcfs"),
    ({"updates": "sometimes"}, "valid: thread, inline, off"),
    ({"checkpoint_every": 0}, ">= 1"),
    ({"rows_timeout_s": 0}, "> 0"),
    ({"max_yields": 1.5}, "expected a int"),
    ({"policy": "fcfs", "aging_weight": 10}, "with policy fcfs"),
    ({"policy": "fcfs", "max_yields": 2}, "with policy fcfs"),
    ({"policy": "fcfs", "max_prefill_slots": 1}, "with policy fcfs"),
    ({"polcy": "sjf"}, "unknown option"),
])
def test_an_option_out_of_range_is_one_line(opts, message):
    with pytest.raises(ConfigError, match=message) as e:
        PluginSettings.from_sources(ENV, {"lengthpred": opts})
    assert "\n" not in str(e.value) and str(e.value).startswith("--additional-config lengthpred")


@pytest.mark.parametrize("raw", ["sjf", 5, ["policy", "sjf"]])
def test_options_that_are_not_an_object_are_one_line(raw):
    with pytest.raises(ConfigError, match="expected an object of options") as e:
        PluginSettings.from_sources(ENV, {"lengthpred": raw})
    assert "\n" not in str(e.value)


def test_paths_expand_the_home_folder(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    s = PluginSettings.from_sources(ENV, {"lengthpred": {"checkpoint_path": "~/c.safetensors",
                                                         "request_log": "~/requests.jsonl"}})
    assert (str(s.checkpoint), str(s.request_log)) == ("/home/someone/c.safetensors", "/home/someone/requests.jsonl")


@pytest.mark.parametrize("engine, message", [
    ({"async_scheduling": True, "policy": "fcfs"}, "without --async-scheduling"),
    ({"async_scheduling": False, "policy": "priority"}, "without --scheduling-policy priority"),
])
def test_engine_settings_the_scheduler_cannot_plan_under_are_one_line(engine, message):
    from types import SimpleNamespace

    PluginSettings.check_engine(SimpleNamespace(async_scheduling=False, policy="fcfs"))
    with pytest.raises(ConfigError, match=message) as e:
        PluginSettings.check_engine(SimpleNamespace(**engine))
    assert "\n" not in str(e.value)


def test_no_readout_named_is_refused_with_the_variable_to_set():
    with pytest.raises(ConfigError, match="LENGTHPRED_READOUT=<file>"):
        PluginSettings.from_sources({"LENGTHPRED_READOUT": "  "}, None)


def test_version_pin():
    check_version("0.32.0")
    check_version("0.32.3+cpu")
    for old in ("0.31.9", "0.33.0", "1.0.0"):
        with pytest.raises(ConfigError, match="supports vLLM 0.32.x"):
            check_version(old)


def test_rows_cross_the_channel_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    addr = address("inst/1")
    assert addr.startswith("ipc://") and "inst_1" in addr
    send = RowSender(addr)
    send.send(StepRows((1, 5), (9, 5), (9,), np.zeros((1, 3), np.float32)))  # before the reader binds (warm-up)
    recv = RowReceiver(addr)
    try:
        assert recv.drain() == 1
        rows = np.arange(6, dtype=np.float32).reshape(2, 3)
        send.send(StepRows((7, 1, 4), (7, 12, 4), (0, 2), rows))
        got = recv.receive(5.0)
        assert got.qlens == (7, 1, 4) and got.seq_lens == (7, 12, 4) and got.chunks == (0, 2)
        np.testing.assert_array_equal(got.rows, rows)
        assert recv.receive(0.01) is None
    finally:
        send.close()
        recv.close()
