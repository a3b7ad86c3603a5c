"""data=trace: JSONL/CSV/Parquet, text or chat prompts, int or list lengths, bad input named or counted."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import open_dict

from lengthpred.data import load_prompts, load_splits
from lengthpred.data.build import build_from_sources
from lengthpred.data.settings import data_settings
from lengthpred.data.trace import build_from_trace
from lengthpred.errors import ConfigError, DataError
from lengthpred.stages.data import prepare
from tests.conftest import compose_cfg


def _cfg(tmp_path, **kw):
    cfg = compose_cfg(["data=trace"], tmp_path)
    with open_dict(cfg):
        cfg.paths.data_dir = str(tmp_path / "data")
        for k, v in kw.items():
            cfg.data[k] = v
    return cfg


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(n, offset=0):
    return [{"prompt": f"question {i}", "length": [10 + i, 20 + i], "task": "a" if i % 2 else "b"}
            for i in range(offset, offset + n)]


def test_jsonl_lists_stat_and_domains(tmp_path):
    p = _write_jsonl(tmp_path / "t.jsonl", _rows(40))
    cfg = _cfg(tmp_path, train_path=str(p), domain_field="task", length_stat="max")
    out = prepare(cfg)
    ds, splits = load_prompts(cfg.data), load_splits(cfg.data)
    assert out.name == "trace" and len(ds) == 40
    row = next(r for r in ds if r["messages"][0]["content"] == "question 3")
    assert row["lengths"] == [13, 23] and row["length"] == 23.0 and row["domain"] == "a"
    assert set(splits["indomain"]) == {"a", "b"}  # per-domain parts partition the trace; no "all" beside them
    ids = [i for parts in splits["indomain"].values() for part in parts.values() for i in part]
    assert sorted(ids) == sorted(ds["id"])
    assert {p["name"] for p in splits["cross"]} == {"a->b", "b->a"}  # a mix needs three domains


def test_test_path_duplicates_removed_and_counted(tmp_path):
    tr = _write_jsonl(tmp_path / "train.jsonl", _rows(20))
    te = _write_jsonl(tmp_path / "test.jsonl", _rows(5, offset=18))  # 2 prompts also in train
    records, splits = build_from_trace(data_settings(_cfg(tmp_path, train_path=str(tr), test_path=str(te)).data))
    assert splits["meta"]["train_test_duplicates_removed"] == 2
    parts = splits["indomain"]["all"]
    assert len(parts["test"]) == 5 and not set(parts["train"] + parts["val"]) & set(parts["test"])


def test_csv_and_parquet_chat_messages_and_int_lengths(tmp_path):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    csv = tmp_path / "t.csv"
    csv.write_text('prompt,length\n"hi there",12\n"second one",7\n')
    table = pa.table({"prompt": [json.dumps(msgs), "plain"], "length": [3, 4]})
    pq.write_table(table, tmp_path / "t.parquet")
    recs, _ = build_from_trace(data_settings(_cfg(tmp_path, train_path=[str(csv), str(tmp_path / "t.parquet")]).data))
    by_text = {r["messages"][-1]["content"]: r for r in recs}
    assert by_text["hi there"]["lengths"] == [12]
    assert by_text["hello"]["messages"][0] == {"role": "system", "content": "be brief"}


@pytest.mark.parametrize("content,kind", [
    (b'{"prompt": "ok", "length": 3}\n{"prompt": "bad", "length": \n', "malformed JSON"),
    (b'{"prompt": "ok", "length": 3}\n{"length": 3}\n', "missing field"),
    (b'{"prompt": "ok", "length": 3}\n{"prompt": "   ", "length": 3}\n', "empty prompt"),
    (b'{"prompt": "ok", "length": 3}\n{"prompt": "caf\xe9", "length": 3}\n', "non-UTF-8"),
    (b'{"prompt": "ok", "length": 3}\n{"prompt": "x", "length": "many"}\n', "malformed field"),
])
def test_bad_input_named_or_skipped_and_counted(tmp_path, content, kind):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(DataError, match=rf"bad.jsonl:2: {kind}"):
        build_from_trace(data_settings(_cfg(tmp_path, train_path=str(p)).data))
    recs, splits = build_from_trace(data_settings(_cfg(tmp_path, train_path=str(p), on_bad_input="skip").data))
    assert len(recs) == 1 and sum(splits["meta"]["bad_input_skipped"].values()) == 1


def test_missing_file_and_bad_options(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: file not found"):
        build_from_trace(data_settings(_cfg(tmp_path, train_path=str(tmp_path / "nope.jsonl")).data))
    with pytest.raises(ConfigError, match="train_path"):
        build_from_trace(data_settings(_cfg(tmp_path).data))
    p = _write_jsonl(tmp_path / "t.jsonl", _rows(3))
    with pytest.raises(ConfigError, match="length_stat"):
        build_from_trace(data_settings(_cfg(tmp_path, train_path=str(p), length_stat="mode").data))
    with pytest.raises(DataError, match="does not exist"):
        build_from_sources(data_settings(compose_cfg(["data=demo", "data.root=/nonexistent"], tmp_path).data))


def test_data_settings_name_an_unknown_key_and_kind(tmp_path):
    """A typo in the data group is one line naming it, never a silent default; every shipped group reads."""
    for group in ("demo", "bench", "paper", "trace", "castillo"):
        s = data_settings(compose_cfg([f"data={group}"], tmp_path).data)
        assert s.name == group and s.kind in ("sources", "trace")
    assert data_settings(compose_cfg(["data=demo"], tmp_path).data).forelen.exclude_train is True
    with pytest.raises(ConfigError, match=r"unknown keys \['per_domian'\]"):
        data_settings(compose_cfg(["data=demo", "+data.per_domian=5"], tmp_path).data)
    with pytest.raises(ConfigError, match=r"data.forelen: unknown keys \['longsq'\]"):
        data_settings(compose_cfg(["data=demo", "+data.forelen.longsq=5"], tmp_path).data)
    with pytest.raises(ConfigError, match="castillo_union is read by experiment=castillo"):
        data_settings(compose_cfg(["data=castillo_all"], tmp_path).data)


@pytest.mark.datasets
def test_castillo_as_a_user_reads_it(tmp_path):
    cfg = compose_cfg(["data=castillo"], tmp_path)
    with open_dict(cfg):
        cfg.data.train_path = f"{cfg.data.train_path}/Mbpp/{cfg.data.trace_file}"
    assert cfg.data.prompt_field == "prompt_text" and cfg.data.length_field == "output_sizes"
    recs, splits = build_from_trace(data_settings(cfg.data))
    assert len(recs) == 195 and all(len(r["lengths"]) == 10 for r in recs)
    assert recs[0]["length_model"] == "castillo:meta-llama--Llama-3.1-8B-Instruct"


def test_reference_trace_adds_served_shift_and_column(tmp_path, capsys):
    p = _write_jsonl(tmp_path / "t.jsonl", _rows(80))  # ≥ 5 test prompts per domain
    cfg = _cfg(tmp_path, train_path=str(p), domain_field="task")
    prepare(cfg)
    ids = load_prompts(cfg.data)["id"]
    ref = tmp_path / "data" / "reference" / cfg.model.name / "trace.jsonl"
    ref.parent.mkdir(parents=True)
    meta = json.dumps({"meta": {"model": cfg.model.name}}) + "\n"
    ref.write_text(meta + "".join(json.dumps({"id": i, "sample": 0, "length": 5 + k}) + "\n" for k, i in enumerate(ids)))
    capsys.readouterr()
    prepare(cfg)  # the trace changes the hash, so this rebuilds
    assert "served_len" in capsys.readouterr().out
    splits = load_splits(cfg.data)
    assert all(p["shift"]["served_length_wasserstein"] >= 0 for p in splits["cross"])
    ref.write_text(meta + '{"id": "x"}\n')
    with pytest.raises(DataError, match="trace.jsonl: reference trace rows need id and length"):
        prepare(cfg)
    ref.write_text('{"id": "x", "length": 3}\n')
    with pytest.raises(DataError, match="first line must be"):
        prepare(cfg)


def test_json_array_non_utf8_names_the_line(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'[{"prompt": "a", "length": 1},\n {"prompt": "caf\xe9", "length": 2}]')
    with pytest.raises(DataError, match=r"t.json:2: non-UTF-8"):
        build_from_trace(data_settings(_cfg(tmp_path, train_path=str(p), on_bad_input="skip").data))


def test_a_change_to_the_data_code_rebuilds_the_cached_prompt_set(tmp_path, monkeypatch):
    """The cache key holds the data package's source hash, not only the config's: a splits file built by
    an older selection rule is never reused."""
    import lengthpred.data.build as build

    p = _write_jsonl(tmp_path / "t.jsonl", _rows(80))
    cfg = _cfg(tmp_path, train_path=str(p), domain_field="task")
    prepare(cfg)
    splits = tmp_path / "data" / "splits" / cfg.data.name / "splits.json"
    before = splits.stat().st_mtime_ns
    prepare(cfg)
    assert splits.stat().st_mtime_ns == before  # same config, same code: cached
    monkeypatch.setattr(build, "code_hash", lambda: "changed-code")
    prepare(cfg)
    assert splits.stat().st_mtime_ns > before  # same config, new code: rebuilt


def test_a_folder_with_trace_file_reads_that_file_in_each_sub_folder(tmp_path):
    from lengthpred.data.trace import expand_paths

    for ds in ("b", "a", "c"):
        (tmp_path / ds).mkdir()
        if ds != "c":  # a dataset this model has no file in is skipped, as CASTILLO's smaller models need
            (tmp_path / ds / "m.jsonl").write_text("{}\n")
    assert expand_paths(str(tmp_path), "data.train_path", "m.jsonl") == [tmp_path / "a" / "m.jsonl", tmp_path / "b" / "m.jsonl"]
    with pytest.raises(DataError, match="no sub-folder holds other.jsonl"):
        expand_paths(str(tmp_path), "data.train_path", "other.jsonl")
