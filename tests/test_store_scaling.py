"""A feature store that scales and stays whole: each part verified once, per-shard folders, one shard layout (and
one model) per store with its repair command, parts without a digest recomputed, compaction into one memory-mapped
Arrow file per column readable by datasets/pyarrow, and the size estimate checked against the disk before any work.
Comparisons are between stores of the same float32 extraction, so byte-equal."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

from lengthpred import integrity
from lengthpred.errors import ConfigError, DataError
from lengthpred.features import budget
from lengthpred.features.extract import extract_features
from lengthpred.features.maintenance import compact_store, repair_store
from lengthpred.features.settings import FeatureSettings
from lengthpred.features.store import load_features, part_files

PROMPTS = [{"id": f"q{i:02d}", "messages": [{"role": "user", "content": "word " * (3 + 2 * i)}]} for i in range(6)]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small(**kw) -> FeatureSettings:
    base = dict(layers=(0, 2, 4), pools=("last", "mean"), fused=(), attn_layers=(), dtype="float16", batch_size=2)
    return FeatureSettings(**{**base, **kw})


def run(model, tok, root, **kw):
    return extract_features(small(), model, tok, PROMPTS, out_dir=root, progress=False, **kw)


@pytest.fixture
def store(tiny_model, tokenizer, tmp_path):
    return run(tiny_model, tokenizer, tmp_path / "s")


def columns(fs) -> dict[str, np.ndarray]:
    return {n: fs.get(n) for n in fs.names}


def test_each_part_is_hashed_once_then_trusted_by_size_and_mtime(store, monkeypatch):
    load_features(store)  # the extraction's own loads already checked every part
    hashed = []
    real = integrity.file_digest
    monkeypatch.setattr(integrity, "file_digest", lambda p: hashed.append(p) or real(p))
    before = columns(load_features(store))
    assert hashed == []  # nothing re-read
    part = part_files(store)[0]
    st = part.stat()
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, not changed: hashed again, trusted
    load_features(store)
    assert hashed == [os.fspath(part)]
    data = bytearray(part.read_bytes())
    data[-1] ^= 0xFF  # a flipped byte with a new mtime: caught, moved aside
    part.write_bytes(bytes(data))
    with pytest.raises(DataError, match="features incomplete"):
        load_features(store)
    assert part.with_name(part.name + ".bad").is_file()
    assert before  # the columns read fine before the damage


def test_a_part_without_its_digest_is_recomputed_not_trusted(store, tiny_model, tokenizer):
    want = columns(load_features(store))
    part = part_files(store)[0]
    integrity.checksum_path(part).unlink()
    (store / integrity.VERIFIED).unlink()  # not even a record of an earlier check trusts it
    with pytest.raises(DataError, match="features incomplete"):
        load_features(store)
    got = columns(load_features(run(tiny_model, tokenizer, store)))  # the resume recomputes it
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_a_recorded_part_whose_digest_file_is_deleted_is_no_longer_trusted(store, monkeypatch):
    load_features(store)  # checked and recorded
    part = part_files(store)[-1]
    integrity.checksum_path(part).unlink()  # the part itself unchanged, the record of its check kept
    stats = []
    real = os.stat
    monkeypatch.setattr(integrity.os, "stat", lambda p, *a, **k: stats.append(os.fspath(p)) or real(p, *a, **k))
    with pytest.raises(DataError, match="features incomplete"):
        load_features(store)
    assert part.with_name(part.name + ".bad").is_file()
    digests = {s for s in stats if s.endswith(integrity.CHECKSUM_SUFFIX)}  # presence read from the load's listing:
    assert digests <= {os.fspath(integrity.checksum_path(part))}  # only the move aside looks for the lost one


def test_shards_write_their_own_folders_and_one_layout_per_store(tiny_model, tokenizer, tmp_path):
    root = tmp_path / "s"
    run(tiny_model, tokenizer, root, shard=(0, 2))
    assert {p.parent.name for p in part_files(root)} == {"shard-0-of-2"}
    with pytest.raises(ConfigError, match=r"started in 2 shard\(s\) \(shard=i/2\).*lengthpred store repair"):
        run(tiny_model, tokenizer, root, shard=(0, 1))
    run(tiny_model, tokenizer, root, shard=(1, 2))
    assert {p.parent.name for p in part_files(root)} == {"shard-0-of-2", "shard-1-of-2"}
    assert len(load_features(root)) == len(PROMPTS)


def test_two_layouts_at_once_are_repaired_by_the_command_the_error_names(tiny_model, tokenizer, tmp_path):
    root, other = tmp_path / "s", tmp_path / "other"
    run(tiny_model, tokenizer, root, shard=(0, 2))
    run(tiny_model, tokenizer, other, shard=(0, 1))  # as if it had written into `root` in the same instant
    shutil.copytree(other / "parts" / "shard-0-of-1", root / "parts" / "shard-0-of-1")
    with pytest.raises(DataError, match="ids stored twice.*lengthpred store repair"):
        load_features(root)
    kept, moved = repair_store(root)
    assert moved > 0
    run(tiny_model, tokenizer, root, shard=(0, 1))  # any layout resumes after the repair
    assert len(load_features(root)) == len(PROMPTS)


def test_a_store_of_another_model_or_layer_set_is_refused(store, tiny_model, tokenizer):
    with pytest.raises(ConfigError, match="written with model"):
        extract_features(small(), tiny_model, tokenizer, PROMPTS, out_dir=store, model_name="other", progress=False)
    with pytest.raises(ConfigError, match="written with layers"):
        extract_features(small(layers=(1, 3)), tiny_model, tokenizer, PROMPTS, out_dir=store, progress=False)


def test_a_second_checkpoint_under_one_name_is_refused(tiny_model, tokenizer, tmp_path):
    root = tmp_path / "s"
    run(tiny_model, tokenizer, root, source="/ckpt/a")
    with pytest.raises(ConfigError, match="checkpoint /ckpt/a"):
        run(tiny_model, tokenizer, root, source="/ckpt/b")


def test_compaction_is_read_by_our_loader_datasets_and_pyarrow(store):
    import datasets

    want = load_features(store)
    folder = compact_store(store)
    got = load_features(store)
    assert got.compact is not None and got.ids == want.ids
    for name in want.names:
        np.testing.assert_array_equal(got.get(name), want.get(name))
    sub = got.subset(want.ids[::-2])
    np.testing.assert_array_equal(sub.get("hs.L2.last"), want.subset(want.ids[::-2]).get("hs.L2.last"))
    ids = datasets.Dataset.from_file(str(folder / "ids.arrow"))["id"]
    col = datasets.Dataset.from_file(str(folder / "hs.L2.last.arrow"))
    assert list(ids) == want.ids
    np.testing.assert_array_equal(np.asarray(col["hs.L2.last"], dtype=np.float32), want.get("hs.L2.last"))
    table = pa.ipc.open_stream(pa.memory_map(str(folder / "hs.L4.mean.arrow"))).read_all()
    assert table.num_rows == len(want.ids) and table.schema.field(0).type.list_size == want.get("hs.L4.mean").shape[1]
    assert compact_store(store) == folder  # once is enough


def test_a_damaged_compact_file_is_one_line_and_the_parts_remain(store):
    folder = compact_store(store)
    f = folder / "hs.L2.last.arrow"
    data = bytearray(f.read_bytes())
    data[-8] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(0, 10**9))
    with pytest.raises(DataError, match=r"checksum mismatch.*lengthpred store compact"):
        load_features(store).get("hs.L2.last")
    (folder / "index.json").unlink()  # without a finished compaction the parts are read
    assert load_features(store).compact is None and len(load_features(store).get("hs.L2.last")) == len(PROMPTS)


def test_the_size_estimate_is_printed_and_a_full_disk_refused_before_any_work(tiny_model, tokenizer, tmp_path,
                                                                               capsys, monkeypatch):
    run(tiny_model, tokenizer, tmp_path / "a")
    out = capsys.readouterr().out
    assert "features: about" in out and f"for {len(PROMPTS)} prompts (7 columns, float16)" in out
    monkeypatch.setattr(budget, "free_bytes", lambda _f: 1000)
    with pytest.raises(DataError, match=r"not enough disk space for the feature store at .*/b: it needs about"):
        run(tiny_model, tokenizer, tmp_path / "b")
    assert not part_files(tmp_path / "b")
    checked: list[int] = []
    real_check = budget.check_space
    monkeypatch.setattr(budget, "free_bytes", lambda _f: 10**12)
    monkeypatch.setattr("lengthpred.features.extract.check_space",
                        lambda root, n_bytes: checked.append(n_bytes) or real_check(root, n_bytes))
    run(tiny_model, tokenizer, tmp_path / "c", shard=(0, 2))
    run(tiny_model, tokenizer, tmp_path / "d", shard=(0, 1))
    half, whole = checked  # shard 0 of 2 checks for every shard's share, since they all write one folder
    assert half == pytest.approx(whole, rel=0.2)  # about the whole store (its tokens estimated), not half of it


def test_large_models_get_a_trimmed_default_set_said_in_words():
    default = FeatureSettings(fused=budget.DEFAULT_FUSED, token_layers=(20,))
    trimmed, said = budget.trim_for_model(default, n_layers=32, d=4096)  # Llama-3.1-8B
    assert trimmed.layers == (0, 4, 8, 12, 16, 20, 24, 28, 32)
    assert trimmed.fused == ("mix0.5", "prod") and trimmed.token_layers == ()
    assert "2.4 MB to 442.4 KB a prompt" in said and "features.trim=false" in said
    assert budget.trim_for_model(default, n_layers=30, d=576) == (default, None)  # SmolLM2-135M: kept
    chosen = FeatureSettings(layers=(10, 20))
    assert budget.trim_for_model(chosen, n_layers=32, d=4096) == (chosen, None)  # an explicit choice: kept


def test_the_verification_record_is_no_content_of_the_store(store):
    before = integrity.tree_digest(store, use_checksums=True)  # what the pipeline records of a stage's output
    (store / integrity.VERIFIED).unlink(missing_ok=True)
    load_features(store)  # writes the record
    assert (store / integrity.VERIFIED).is_file() and integrity.tree_digest(store, use_checksums=True) == before


def test_a_models_shape_comes_from_its_config_never_from_a_hub(tmp_path):
    from lengthpred.models.checkpoint import layer_shape
    from lengthpred.models.specs import ModelSpec

    assert layer_shape(ModelSpec(name="hub", hf_id="org/never-fetched")) is None  # no network, no cache lookup
    assert layer_shape(ModelSpec(name="8b", hf_id="org/m", num_hidden_layers=32, hidden_size=4096)) == (32, 4096)
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 28, "hidden_size": 3584}')
    assert layer_shape(ModelSpec(name="local", path=str(tmp_path))) == (28, 3584)


def test_checking_many_files_agrees_with_checking_each(tmp_path, monkeypatch):
    folder = tmp_path / "f"
    folder.mkdir()
    paths = []
    for i in range(6):
        f = folder / f"p{i}.bin"
        f.write_bytes(bytes([i]) * 64)
        integrity.write_checksum(f)
        paths.append(os.fspath(f))
    listed = {os.fspath(p) for p in folder.iterdir()}
    verified = integrity.VerifiedFiles(folder)
    assert verified.check_all(paths, listed) == [None] * 6  # the first check hashes each against its digest
    verified.save()
    record = json.loads((folder / integrity.VERIFIED).read_text())
    record["p0.bin"][2] = "a stamp"  # an entry in the format from before: checked again
    (folder / integrity.VERIFIED).write_text(json.dumps(record))
    st = os.stat(paths[1])
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, bytes unchanged
    st = os.stat(paths[2])
    with open(paths[2], "r+b") as f:  # a flipped byte, then a new mtime
        f.write(b"\xff")
    os.utime(paths[2], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    os.unlink(paths[4])  # gone since the listing
    listed.discard(paths[3] + integrity.CHECKSUM_SUFFIX)  # its digest file removed: never trusted
    hashed = []
    real = integrity.file_digest
    monkeypatch.setattr(integrity, "file_digest", lambda p: hashed.append(os.fspath(p)) or real(p))
    many = integrity.VerifiedFiles(folder).check_all(paths, listed)
    assert hashed == paths[:3]  # the old entry, the touched and the edited file are read; the unchanged p5 is not
    one = integrity.VerifiedFiles(folder)
    each = [one.check(p, has_digest=p + integrity.CHECKSUM_SUFFIX in listed) for p in paths]
    assert many == each
    assert many[:2] == [None, None] and "checksum mismatch" in many[2]
    assert "no stored digest" in many[3] and "unreadable" in many[4] and many[5] is None


def _sealed_folder(tmp_path, n=5):
    folder = tmp_path / "f"
    folder.mkdir()
    paths = []
    for i in range(n):
        f = folder / "sub" / f"p{i}.bin"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(bytes([i]) * 64)
        integrity.write_checksum(f)
        paths.append(os.fspath(f))
    listed = {os.fspath(p) for p in (folder / "sub").iterdir()}
    verified = integrity.VerifiedFiles(folder)
    assert verified.check_all(paths, listed) == [None] * n
    verified.save()
    assert json.loads((folder / integrity.VERIFIED).read_text())[integrity.SEAL][""]["n"] == n
    return folder, paths, listed


def test_a_sealed_load_compares_once_and_reads_nothing(tmp_path, monkeypatch):
    folder, paths, listed = _sealed_folder(tmp_path)
    monkeypatch.setattr(integrity, "file_digest", lambda p: pytest.fail(f"{p} re-hashed"))
    monkeypatch.setattr(integrity.VerifiedFiles, "check", lambda *a, **k: pytest.fail("checked one by one"))
    assert integrity.VerifiedFiles(folder).check_all(paths, listed) == [None] * len(paths)


def _touch(p):
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def _flip(p):
    """Invert the file's first byte (an Arrow stream starts with 0xff: writing one would change nothing)."""
    with open(p, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    _touch(p)


@pytest.mark.parametrize("change", ["touched", "flipped", "digest gone", "file gone", "one more file",
                                    "another order", "folder moved", "forgotten"])
def test_a_seal_is_trusted_only_for_exactly_what_it_sealed(tmp_path, monkeypatch, change):
    folder, paths, listed = _sealed_folder(tmp_path)
    if change == "touched":
        _touch(paths[1])
    elif change == "flipped":
        _flip(paths[2])
    elif change == "digest gone":
        listed.discard(paths[3] + integrity.CHECKSUM_SUFFIX)
    elif change == "file gone":
        os.unlink(paths[4])
    elif change == "one more file":
        extra = folder / "sub" / "p9.bin"
        extra.write_bytes(b"new")
        paths.append(os.fspath(extra))  # no digest: never trusted
        listed.add(paths[-1])
    elif change == "another order":
        paths.reverse()
    elif change == "folder moved":
        moved = tmp_path / "moved"
        folder.rename(moved)
        folder, paths = moved, [p.replace(os.fspath(tmp_path / "f"), os.fspath(moved)) for p in paths]
        listed = {p.replace(os.fspath(tmp_path / "f"), os.fspath(moved)) for p in listed}
    elif change == "forgotten":
        v = integrity.VerifiedFiles(folder)
        v.forget(paths[0])
        v.save()
        assert integrity.SEAL not in json.loads((folder / integrity.VERIFIED).read_text())
    each = [integrity.VerifiedFiles(folder).check(p, has_digest=p + integrity.CHECKSUM_SUFFIX in listed)
            for p in paths]
    calls = []
    real = integrity.VerifiedFiles.check
    monkeypatch.setattr(integrity.VerifiedFiles, "check", lambda self, p, **k: calls.append(p) or real(self, p, **k))
    assert integrity.VerifiedFiles(folder).check_all(paths, listed) == each
    # a moved store keeps its seal (its files are recorded relative to it, as each file's own entry is); any other
    # change is outside the seal: every file is then checked on its own
    assert calls == ([] if change == "folder moved" else paths)
    caught = {"touched": [None] * 5, "another order": [None] * 5, "folder moved": [None] * 5,
              "forgotten": [None] * 5}
    if change in caught:
        assert each == caught[change]
    else:
        assert sum(w is not None for w in each) == 1


def test_token_level_files_are_checked_when_token_states_are_read(tiny_model, tokenizer, tmp_path, monkeypatch):
    root = extract_features(small(token_layers=(2,)), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "s",
                            progress=False)
    first = load_features(root)
    want = [first.token_states(2, i) for i in first.ids]
    tokens = sorted(root.rglob("*.tokens.safetensors"))
    stats = []
    real = os.stat
    monkeypatch.setattr(integrity.os, "stat", lambda p, *a, **k: stats.append(os.fspath(p)) or real(p, *a, **k))
    fs = load_features(root)  # a pooled load stats the parts, not the token-level files it does not read
    assert not {os.fspath(t) for t in tokens} & set(stats) and any(s.endswith(".safetensors") for s in stats)
    monkeypatch.undo()
    _flip(tokens[0])
    before = fs.get("hs.L2.last")  # pooled columns still read: their parts are intact
    with pytest.raises(DataError, match=r"token-level file\(s\) cannot be trusted .*checksum mismatch.*rerun "
                                        r"scripts/extract.py"):
        fs.token_states(2, fs.ids[0])
    assert tokens[0].with_name(tokens[0].name + ".bad").is_file()  # moved aside with its part
    with pytest.raises(DataError, match="features incomplete"):
        load_features(root)
    again = load_features(extract_features(small(token_layers=(2,)), tiny_model, tokenizer, PROMPTS, out_dir=root,
                                           progress=False))
    for a, b in zip([again.token_states(2, i) for i in again.ids], want, strict=True):  # both files recomputed
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(again.get("hs.L2.last"), before)


def test_store_verify_checks_token_level_files_too(tiny_model, tokenizer, tmp_path):
    from lengthpred.features.maintenance import verify_store

    root = extract_features(small(token_layers=(2,)), tiny_model, tokenizer, PROMPTS, out_dir=tmp_path / "s",
                            progress=False)
    verify_store(root)
    _flip(sorted(root.rglob("*.tokens.safetensors"))[-1])
    with pytest.raises(DataError, match="token-level"):
        verify_store(root)


def test_store_verify_checks_every_compacted_column_and_the_parts_beside_them(store):
    from lengthpred.features.maintenance import verify_store

    folder = compact_store(store)
    verify_store(store)
    _flip(folder / "hs.L4.mean.arrow")  # a column no load has read yet
    with pytest.raises(DataError, match=r"hs.L4.mean.arrow: checksum mismatch"):
        verify_store(store)
    compact_store(store)  # rewritten from the parts
    verify_store(store)
    _flip(part_files(store)[0])  # the columns read fine, a part beneath them is damaged
    with pytest.raises(DataError, match="the parts lack 2 prompts the compacted columns hold"):
        verify_store(store)


def test_the_merge_job_verifies_token_files_and_logs_the_store_by_reference(tiny_model, tokenizer, tmp_path,
                                                                            monkeypatch):
    import contextlib

    from lengthpred.stages import features, merge

    root = tmp_path / "s"
    for shard in ((0, 2), (1, 2)):
        extract_features(small(token_layers=(2,)), tiny_model, tokenizer, PROMPTS, out_dir=root, shard=shard,
                         progress=False)
    logged = []

    class Recorder:
        def log_reference(self, name, kind, path, meta):
            logged.append((kind, path, meta))

    monkeypatch.setattr(merge, "load_prompts", lambda _d: PROMPTS)
    monkeypatch.setattr(features, "feature_dir", lambda _c, _p: root)
    monkeypatch.setattr(merge, "tracked", lambda _c, stage: contextlib.nullcontext(Recorder()))
    config = {"shard": "0/2", "data": {}, "features": {"compact": False}, "model": {"name": "tiny"}}
    line = merge.merge_and_verify(config, "extract")
    assert "2 shards complete and intact, 6 prompts" in line
    assert logged == [("feature-store", root, {"model": "tiny", "prompts": 6, "columns": 7})]
    _flip(sorted(root.rglob("*.tokens.safetensors"))[0])
    with pytest.raises(DataError, match="token-level"):
        merge.merge_and_verify(config, "extract")
