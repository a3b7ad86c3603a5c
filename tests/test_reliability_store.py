"""Nothing lost, nothing stale (issue 29): damaged parts are moved aside and recomputed, writers never collide,
prepared data follows its inputs' contents, and the pipeline reruns a stage whose output is gone.
One test per defect of the issue; each failed on the code before it."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from omegaconf import open_dict

import lengthpred.features.extract as fx
from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import DataError
from lengthpred.features import FeatureSettings, extract_features, load_features
from lengthpred.features.store import done_ids, part_files, write_part
from lengthpred.generate import reference_parts
from lengthpred.generate import store as gen_store
from lengthpred.integrity import locked
from lengthpred.pipeline import run_stage
from lengthpred.stages.data import prepare
from lengthpred.stages.features import truncated_counts
from lengthpred.targets import read_reference
from tests.conftest import compose_cfg

PROMPTS = [{"id": f"q{i:02d}", "messages": [{"role": "user", "content": "word " * (3 + 5 * i) + f"#{i}"}]}
           for i in range(6)]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small(**kw) -> FeatureSettings:
    return FeatureSettings(**{**dict(layers=(0, 2), pools=("last", "mean"), fused=(), attn_layers=(-1,),
                                     span="all", dtype="float32", batch_size=2), **kw})


def extract(model, tok, root, **kw):
    return extract_features(small(**kw), model, tok, PROMPTS, out_dir=root, progress=False)


def overwrite_tail(path, n=64):
    """Finite bytes overwritten in place near the end of a file (inside its data, not its header)."""
    data = bytearray(path.read_bytes())
    data[-n:] = bytes(n)
    path.write_bytes(bytes(data))


def test_corrupted_feature_part_is_moved_aside_and_recomputed(tiny_model, tokenizer, tmp_path, caplog):
    root = extract(tiny_model, tokenizer, tmp_path / "f")
    want = load_features(root).get("hs.L2.last")
    victim = part_files(root)[1]
    overwrite_tail(victim)
    with pytest.raises(DataError, match="incomplete"):  # not silently read
        load_features(root)
    assert f"{victim}: checksum mismatch" in caplog.text and victim.with_name(victim.name + ".bad").is_file()
    np.testing.assert_array_equal(load_features(extract(tiny_model, tokenizer, root)).get("hs.L2.last"), want)


def test_truncated_feature_part_counts_as_missing(tiny_model, tokenizer, tmp_path):
    root = extract(tiny_model, tokenizer, tmp_path / "f")
    victim = part_files(root)[0]
    victim.write_bytes(victim.read_bytes()[:100])
    victim.with_name(victim.name + ".sha256").unlink(missing_ok=True)  # no checksum to compare: the read itself fails
    assert len(done_ids(root)) == len(PROMPTS) - 2  # no SafetensorError traceback: resume recomputes it


def test_two_writers_of_one_part_never_collide(tmp_path):
    import torch

    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(60):
                write_part(tmp_path, ["a", "b"], {"x": torch.ones(2, 3)})
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and done_ids(tmp_path) == {"a", "b"}
    assert not list((tmp_path / "parts").glob("*.tmp"))


def test_two_identical_extractions_do_the_work_once(tiny_model, tokenizer, tmp_path, monkeypatch):
    real, writes = fx.write_part, []
    def slow_write(*a, **k):  # both runs are mid-extraction at once
        writes.append(a[1])
        time.sleep(0.2)
        return real(*a, **k)

    monkeypatch.setattr(fx, "write_part", slow_write)
    threads = [threading.Thread(target=extract, args=(tiny_model, tokenizer, tmp_path / "f")) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(writes) == 3 and len(load_features(tmp_path / "f")) == len(PROMPTS)


def test_a_lock_makes_the_second_holder_wait(tmp_path):
    order: list[str] = []

    def second():
        with locked(tmp_path / ".lock"):
            order.append("second")

    with locked(tmp_path / ".lock"):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first")
    t.join()
    assert order == ["first", "second"]


def test_damaged_generation_part_is_regenerated(tmp_path):
    rows = [dict(id="p1", sample=0, length=5, finish_reason="eos", text="x", prompt_tokens=3, truncated=False,
                 token_ids=[1, 2, 3, 4, 5])]
    part = tmp_path / "shard-0-of-1" / "part-00000-abc.parquet"
    gen_store.write_part(part, rows)
    assert gen_store.done_ids(tmp_path) == {"p1"}
    overwrite_tail(part, 16)
    assert gen_store.done_ids(tmp_path) == set() and part.with_name(part.name + ".bad").is_file()


def test_edited_reference_part_fails_its_checksum(tmp_path):
    rows = [{"id": "p1", "sample": 0, "length": 10, "finish_reason": "eos", "prompt_tokens": 4}]
    path = reference_parts.write_part(rows, tmp_path, {"settings": {"num_samples": 1}})
    path.write_text(path.read_text().replace('"length": 10', '"length": 99'))
    with pytest.raises(DataError, match="rows_sha256"):
        reference_parts.read_part(path)


def test_damaged_model_cache_is_moved_aside(tmp_path):
    from lengthpred.models import checkpoint

    cache = tmp_path / "m"
    cache.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        (cache / name).write_text(name)
    assert checkpoint._verified_cache(cache)  # checksums written for a cache made before them
    checkpoint._VERIFIED.clear()
    (cache / "model.safetensors").write_text("changed")
    assert not checkpoint._verified_cache(cache) and (tmp_path / "m.bad").is_dir() and not cache.exists()


# -- prepared data follows the contents of its inputs ---------------------------------------------------
def trace_cfg(tmp_path, path, **kw):
    cfg = compose_cfg(["data=trace"], tmp_path)
    with open_dict(cfg):
        cfg.paths.data_dir = str(tmp_path / "data")
        cfg.data.train_path = str(path)
        cfg.data.update(kw)
    return cfg


def write_trace(path, offset=0, n=30):
    path.write_text("".join(json.dumps({"prompt": f"question {i}", "length": 10 + i}) + "\n"
                            for i in range(offset, offset + n)))
    return path


def test_trace_edited_in_place_is_rebuilt(tmp_path):
    cfg = trace_cfg(tmp_path, write_trace(tmp_path / "t.jsonl"))
    prepare(cfg)
    write_trace(tmp_path / "t.jsonl", offset=100)  # same path, new prompts
    prepare(cfg)
    assert {r["messages"][0]["content"] for r in load_prompts(cfg.data)} >= {"question 100"}


def test_another_train_path_is_not_trained_on_the_old_trace(tmp_path):
    prepare(trace_cfg(tmp_path, write_trace(tmp_path / "a.jsonl")))
    other = trace_cfg(tmp_path, write_trace(tmp_path / "b.jsonl", offset=500))
    with pytest.raises(DataError, match="other trace contents"):
        load_prompts(other.data)


def test_damaged_splits_json_is_one_line_and_rebuilt(tmp_path):
    cfg = trace_cfg(tmp_path, write_trace(tmp_path / "t.jsonl"))
    prepare(cfg)
    path = tmp_path / "data" / "splits" / "trace" / "splits.json"
    path.write_text(path.read_text()[:50])
    with pytest.raises(DataError, match="splits.json is damaged"):
        load_splits(cfg.data)
    prepare(cfg)  # rebuilds
    assert load_splits(cfg.data)["indomain"]


def test_partial_reference_line_names_file_and_line(tmp_path):
    path = tmp_path / "ref.jsonl"
    path.write_text('{"meta": {}}\n{"id": "a", "sample": 0, "length": 3, "finish_reason": "eos"}\n{"id": "b", "sam')
    with pytest.raises(DataError, match=r"ref.jsonl:3: not a JSON line"):
        read_reference(path)


def test_deleted_stage_output_reruns_the_stage(tmp_path):
    product = tmp_path / "data" / "splits" / "demo"
    runs: list[int] = []

    def stage(out):
        runs.append(1)
        product.mkdir(parents=True, exist_ok=True)
        (product / "splits.json").write_text("{}")
        (out / "_outputs.json").write_text(json.dumps([str(product)]))

    assert run_stage("data", tmp_path / "out", "k", stage)
    assert not run_stage("data", tmp_path / "out", "k", stage)
    (product / "splits.json").unlink()
    product.rmdir()
    assert run_stage("data", tmp_path / "out", "k", stage) and len(runs) == 2
    (product / "splits.json").write_text('{"edited": 1}')  # changed since the stage wrote it: rerun too
    assert run_stage("data", tmp_path / "out", "k", stage) and len(runs) == 3


def test_truncated_prompts_are_counted_per_split(tiny_model, tokenizer, tmp_path):
    from lengthpred.prompting import encode_prompt

    budget = len(encode_prompt(tokenizer, PROMPTS[1]["messages"]))  # q00 and q01 fit, the longer ones are cut
    fs = load_features(extract(tiny_model, tokenizer, tmp_path / "f", max_prompt_tokens=budget))
    assert sorted(fs.truncated) == ["q02", "q03", "q04", "q05"] and min(fs.truncated.values()) > budget
    parts = {"train": ["q00", "q02", "q03"], "val": ["q01"], "test": ["q04", "q05"]}
    assert truncated_counts(fs, parts) == {"train": 2, "val": 0, "test": 2}


@pytest.mark.parametrize("value", ["true", "Infinity"])
def test_reference_length_that_is_no_number_names_file_and_line(tmp_path, value):
    path = tmp_path / "ref.jsonl"
    path.write_text('{"meta": {}}\n{"id": "a", "sample": 0, "length": ' + value + ', "finish_reason": "eos"}\n')
    with pytest.raises(DataError, match=r"ref.jsonl:2: field 'length'=.* is not a finite non-negative number"):
        read_reference(path)


def test_a_changed_declared_output_changes_the_next_stages_key(tmp_path):
    from lengthpred.pipeline import outputs_digest

    product = tmp_path / "splits"
    product.mkdir()
    (product / "splits.json").write_text("{}")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_outputs.json").write_text(json.dumps([str(product)]))
    before = outputs_digest(tmp_path / "out")
    assert outputs_digest(tmp_path / "out") == before
    (product / "splits.json").write_text('{"indomain": {}}')  # rebuilt by hand with other contents
    assert outputs_digest(tmp_path / "out") != before
