"""Bad inputs of issue 60, each one line before any work: a lone-surrogate prompt, a length past what a store
holds, and the recovery hint for a trace set (which `data=<name>` alone would not select)."""

from __future__ import annotations

import json

import pytest

from lengthpred.errors import DataError
from tests.conftest import compose_cfg


def trace_cfg(tmp_path, rows, *extra):
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return compose_cfg(["data=trace", "data.name=mylog", f"data.train_path={tmp_path / 't.jsonl'}",
                        f"paths.data_dir={tmp_path / 'data'}", *extra], tmp_path)


def rows(n=20):
    return [{"prompt": f"q {i}", "length": 10 + i} for i in range(n)]


def test_a_lone_surrogate_prompt_is_one_line_naming_the_row(tmp_path):
    from lengthpred.stages.data import prepare

    bad = rows()
    bad[3]["prompt"] = "\ud800 hello"
    with pytest.raises(DataError, match=r"t.jsonl:4: malformed field: field 'prompt' holds '\\ud800'.*lone surrogate"):
        prepare(trace_cfg(tmp_path, bad))
    out = prepare(trace_cfg(tmp_path, bad, "data.on_bad_input=skip"))
    assert json.loads((out / "splits.json").read_text())["meta"]["bad_input_skipped"] == {"malformed field": 1}


def test_a_length_past_int32_is_one_line(tmp_path):
    from lengthpred.stages.data import prepare

    bad = rows()
    bad[4]["length"] = 2**64
    with pytest.raises(DataError, match=r"t.jsonl:5: malformed field: field 'length'=18446744073709551616 is out of range"):
        prepare(trace_cfg(tmp_path, bad))


def test_the_hint_for_a_trace_set_selects_it(tmp_path):
    from lengthpred.data import load_prompts

    with pytest.raises(DataError, match=r"run `python scripts/prepare_data.py data=trace data.name=mylog`"):
        load_prompts(trace_cfg(tmp_path, rows()).data)
    with pytest.raises(DataError, match=r"prepare_data.py data=demo`"):
        load_prompts(compose_cfg(["data=demo", f"data.out_dir={tmp_path / 'nowhere'}"]).data)


def test_more_shards_than_prompts_is_one_line():
    from lengthpred.errors import ConfigError
    from lengthpred.stages.shards import check_shard_fits

    assert check_shard_fits("1/3", 3) == (1, 3)
    with pytest.raises(ConfigError, match=r"shard=0/8: 8 shards for 5 prompts; use at most 5"):
        check_shard_fits("0/8", 5)
    with pytest.raises(ConfigError, match="need 0 <= i < n"):
        check_shard_fits("3/2", 5)


FULL = "Error while serializing: I/O error: No space left on device (os error 28)"  # safetensors' own error type


def test_a_full_disk_while_writing_tensors_is_an_oserror_naming_the_file(tmp_path):
    from safetensors import SafetensorError

    from lengthpred.integrity import save_tensors

    def full(tensors, path, **kw):
        open(path, "wb").write(b"partial")
        raise SafetensorError(FULL)

    with pytest.raises(OSError) as e:
        save_tensors(full, {}, tmp_path / "x.safetensors")
    assert e.value.errno == 28 and e.value.filename == str(tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()  # the partial file removed

    def other(tensors, path, **kw):
        raise SafetensorError("invalid tensor name")

    with pytest.raises(SafetensorError):  # not an I/O failure: passed on as it is
        save_tensors(other, {}, tmp_path / "y.safetensors")


def test_a_full_disk_mid_extraction_is_one_line_naming_the_file(tiny_model, tokenizer, tmp_path, capsys, monkeypatch):
    from safetensors import SafetensorError

    from lengthpred.cli import stage
    from lengthpred.features import store
    from lengthpred.features.extract import extract_features
    from lengthpred.features.settings import FeatureSettings

    def full(tensors, path, **kw):
        open(path, "wb").write(b"partial")
        raise SafetensorError(FULL)

    monkeypatch.setattr(store, "save_file", full)
    prompts = [{"id": f"q{i}", "messages": [{"role": "user", "content": "word " * (3 + i)}]} for i in range(4)]
    settings = FeatureSettings(layers=(0,), pools=("last",), fused=(), attn_layers=(), batch_size=2)

    def main(cfg):
        extract_features(settings, tiny_model, tokenizer, prompts, out_dir=tmp_path / "s", progress=False)

    with pytest.raises(SystemExit) as e:
        stage(main)(compose_cfg([]))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert "No space left on device" in err and f"cannot write {tmp_path / 's'}" in err
    assert not list((tmp_path / "s").rglob("*.tmp"))  # no partial part left behind
