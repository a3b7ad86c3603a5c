"""The readout inside the server (lengthpred.vllm_plugin.live_readout): checkpoints written off the step's path, and
none lost to one already under way. No vLLM needed."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lengthpred.vllm_plugin.live_readout as live_readout
from lengthpred.online.readout_file import ModelIdentity, read_readout, write_readout
from lengthpred.online.rls import RLSRegressor
from lengthpred.vllm_plugin.live_readout import LiveReadout

IDENT = ModelIdentity("m", "LlamaForCausalLM", 8, 4, "f" * 64)


@pytest.fixture
def readout(tmp_path):
    rng = np.random.default_rng(0)
    est = RLSRegressor(alpha=3.0, forgetting=0.999).fit(rng.normal(size=(40, 8)), np.exp(rng.normal(4, 1, 40)).round())
    return read_readout(write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2))


def test_a_checkpoint_asked_for_while_one_is_written_follows_it_with_every_update(readout, tmp_path, monkeypatch):
    ckpt = tmp_path / "live.safetensors"
    live = LiveReadout(readout, updates="inline", checkpoint=ckpt, checkpoint_every=1000)
    n0 = live.n_updates
    entered, gate, written, reports = threading.Event(), threading.Event(), [], []
    real = live_readout.write_readout

    def slow_write(path, est, *args, **kwargs):
        written.append(int(est.n_updates_))
        entered.set()
        assert gate.wait(10)
        return real(path, est, *args, **kwargs)

    monkeypatch.setattr(live_readout, "write_readout", slow_write)
    row = np.linspace(-1, 1, 8)
    live.learn(row, 50, capped=False)
    live.checkpoint_soon(then=lambda: reports.append(threading.current_thread().name))
    assert entered.wait(10)  # the first write is under way, on its own thread
    live.learn(row, 60, capped=False)
    live.checkpoint_soon(then=lambda: reports.append("second"))
    gate.set()
    live.close()  # waits for the writer, then writes once more
    assert written[:2] == [n0 + 1, n0 + 2]  # the second request was not dropped: it wrote the later update
    assert reports == ["lp-checkpoint", "second"]  # each report after its write, off the caller's thread
    assert read_readout(ckpt).estimator.n_updates_ == n0 + 2


def test_a_report_that_fails_does_not_stop_later_checkpoints(readout, tmp_path):
    ckpt = tmp_path / "live.safetensors"
    live = LiveReadout(readout, updates="thread", checkpoint=ckpt, checkpoint_every=1000)
    n0, done = readout.estimator.n_updates_, threading.Event()

    def broken() -> None:
        raise OSError("disk full")

    live.learn(np.ones(8), 10, capped=False)
    live.checkpoint_soon(then=broken)
    live.checkpoint_soon(then=done.set)
    assert done.wait(10)
    live.close()
    assert read_readout(ckpt).estimator.n_updates_ == n0 + 1


def test_a_request_log_write_that_fails_stops_the_log_with_one_line_not_the_server(tmp_path, caplog):
    from lengthpred.vllm_plugin.request_log import RequestLog

    class FullDisk:
        closed = False

        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            self.closed = True

    log = RequestLog(tmp_path / "requests.jsonl")
    log.write({"request_id": "a"})
    log._f.close()
    log._f = FullDisk()
    with caplog.at_level("ERROR", logger="vllm.lengthpred"):
        log.write({"request_id": "b"})
        log.write({"request_id": "c"})  # the log has stopped: no second error
    assert [r.getMessage() for r in caplog.records] == [
        f"lengthpred: request log {tmp_path / 'requests.jsonl'} stopped: No space left on device"]
    assert (tmp_path / "requests.jsonl").read_text() == '{"request_id": "a"}\n'
