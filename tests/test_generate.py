"""The generate stage on the tiny random-weight model: schema, censoring, bad prompts, kill-and-resume."""

from __future__ import annotations

import json
import sys

import datasets
import pyarrow.parquet as pq
import pytest

from lengthpred.errors import ConfigError, ModelError
from lengthpred.generate import GenerationSettings, load_generations, store
from lengthpred.generate.backends import BACKENDS, Sample, split_answer
from lengthpred.generate.checks import retokenised_agreement
from lengthpred.generate.runner import run_generation
from lengthpred.integrity import write_checksum

CAP = 12


def _prompts(n: int = 6, extra: list[tuple[str, str]] | None = None) -> datasets.Dataset:
    rows = [(f"{i:016x}", f"Question {i}: " + "tell me more " * (i + 1)) for i in range(n)] + (extra or [])
    return datasets.Dataset.from_dict(
        {"id": [r[0] for r in rows], "messages": [[{"role": "user", "content": r[1]}] for r in rows]}
    )


def _settings(**kw) -> GenerationSettings:
    base = dict(backend="static", num_samples=2, max_new_tokens=CAP, batch_size=2, seed=3)
    return GenerationSettings(**{**base, **kw})


def _run(tmp_path, tiny_model, tokenizer, prompts=None, shard=(0, 1), impl=None, **kw):
    s = _settings(**kw)
    be = impl or BACKENDS.get(s.backend)(tiny_model, tokenizer, s)
    return run_generation(prompts if prompts is not None else _prompts(), be, tokenizer, s, tmp_path,
                          max_context=512, shard=shard, progress=False)


def test_settings_hash_ignores_bookkeeping_and_rejects_bad_keys():
    a, b = _settings(), _settings(batch_size=7, limit=3)
    assert a.settings_hash() == b.settings_hash()
    assert a.settings_hash() != _settings(max_new_tokens=CAP + 1).settings_hash()
    with pytest.raises(ConfigError, match="unknown keys"):
        GenerationSettings.from_cfg({"backend": "cb", "tempreature": 0.5})
    with pytest.raises(ConfigError, match="backend"):
        GenerationSettings(backend="tgi")
    assert GenerationSettings.from_cfg({"backend": "cb", "targets": {"statistic": "mean"}}).backend == "cb"


def test_split_answer_cuts_at_eos_and_flags_the_cap():
    assert split_answer([5, 6, 2, 7], {2}, 4) == Sample([5, 6], "eos")
    assert split_answer([5, 6, 7, 8], {2}, 4) == Sample([5, 6, 7, 8], "length")
    assert split_answer([2, 2, 2, 2], {2}, 4) == Sample([], "eos")


def test_static_run_writes_consistent_rows(tmp_path, tiny_model, tokenizer):
    summary = _run(tmp_path, tiny_model, tokenizer)
    assert summary.merged and summary.n_generated == 6
    ds = load_generations(tmp_path)
    assert len(ds) == 12 and set(ds["sample"]) == {0, 1}
    for r in ds:
        assert r["length"] == len(r["token_ids"]) <= CAP
        assert (r["finish_reason"] == "length") == (r["length"] == CAP)
        assert r["text"] == tokenizer.decode(r["token_ids"], skip_special_tokens=False)
        assert 2 not in r["token_ids"]  # EOS excluded
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["n_rows"] == 12 and manifest["settings"]["max_new_tokens"] == CAP


def test_stored_lengths_agree_with_retokenised_texts(tmp_path, tiny_model, tokenizer):
    _run(tmp_path, tiny_model, tokenizer)
    report = retokenised_agreement(load_generations(tmp_path), tokenizer)
    assert report["n"] == 12
    # every answer whose token ids are the tokenizer's own spelling of its text re-tokenises to its length
    assert report["canonical_exact"] == 1.0
    assert report["n_canonical"] >= 1


class _Crash(RuntimeError):
    pass


class _DiesAfter:
    """Wraps a backend and raises (like a kill) once `k` parts have been generated."""

    def __init__(self, inner, k: int) -> None:
        self.inner, self.k, self.name = inner, k, inner.name

    def generate(self, prompts, keys, seed):
        if self.k == 0:
            raise _Crash("killed")
        self.k -= 1
        return self.inner.generate(prompts, keys, seed)


def test_kill_and_resume_equals_uninterrupted_run(tmp_path, tiny_model, tokenizer):
    s = _settings()
    full = tmp_path / "full"
    _run(full, tiny_model, tokenizer)
    resumed = tmp_path / "resumed"
    dying = _DiesAfter(BACKENDS.get("static")(tiny_model, tokenizer, s), k=1)
    with pytest.raises(_Crash):
        _run(resumed, tiny_model, tokenizer, impl=dying)
    (store.shard_dir(resumed, (0, 1)) / "part-99999-deadbeef.parquet.tmp").write_bytes(b"half a part")
    assert len(store.part_files(resumed)) == 1 and not (resumed / "merged").exists()
    summary = _run(resumed, tiny_model, tokenizer)
    assert summary.n_generated == 4 and summary.merged  # only the 2 missing parts of 2 prompts each
    a, b = load_generations(full).to_pandas(), load_generations(resumed).to_pandas()
    assert not b.duplicated(["id", "sample"]).any()
    assert a.drop(columns="token_ids").equals(b.drop(columns="token_ids"))
    assert a["token_ids"].map(list).tolist() == b["token_ids"].map(list).tolist()
    assert _run(resumed, tiny_model, tokenizer).n_generated == 0  # a third run has nothing to do


def test_shards_merge_only_when_all_are_done(tmp_path, tiny_model, tokenizer):
    first = _run(tmp_path, tiny_model, tokenizer, shard=(0, 2))
    assert not first.merged and first.n_prompts == 3
    second = _run(tmp_path, tiny_model, tokenizer, shard=(1, 2))
    assert second.merged
    ds = load_generations(tmp_path).to_pandas()
    assert sorted(ds["id"].unique()) == sorted(_prompts()["id"])
    assert not ds.duplicated(["id", "sample"]).any()


def test_merge_refuses_duplicates(tmp_path, tiny_model, tokenizer):
    _run(tmp_path, tiny_model, tokenizer)
    part = store.part_files(tmp_path)[0]
    copy = part.with_name("part-77777-copy0000.parquet")
    pq.write_table(pq.read_table(part), copy)
    write_checksum(copy)  # an intact part (one without its digest is not trusted at all)
    with pytest.raises(Exception, match="duplicate"):
        store.merge(tmp_path, _prompts()["id"], 2)


def test_empty_and_overlong_prompts_are_counted_not_lost(tmp_path, tiny_model, tokenizer):
    long_text = "word " * 600
    prompts = _prompts(3, extra=[("e" * 16, "   "), ("f" * 16, long_text)])
    prompts = prompts.add_column("domain", ["chat", "code", "code", "qa", "code"])
    rej = _run(tmp_path / "reject", tiny_model, tokenizer, prompts=prompts, overflow="reject")
    assert rej.n_rejected == 2 and rej.merged
    assert rej.rejected_by_domain == {"qa": 1, "code": 1}
    reasons = json.loads((tmp_path / "reject" / "manifest.json").read_text())["rejected"]
    assert "empty prompt" in reasons["e" * 16] and "max_prompt_tokens" in reasons["f" * 16]
    trunc = _run(tmp_path / "trunc", tiny_model, tokenizer, prompts=prompts, overflow="truncate")
    assert trunc.n_rejected == 1 and trunc.n_truncated == 1
    ds = load_generations(tmp_path / "trunc").to_pandas().set_index("id")
    assert ds.loc["f" * 16, "truncated"].all() and (ds.loc["f" * 16, "prompt_tokens"] == 512 - CAP).all()


def test_missing_vllm_is_one_line_naming_the_extra(monkeypatch, tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ModelError, match=r"lengthpred\[vllm\]"):
        BACKENDS.get("vllm")("/nowhere", tokenizer, _settings(backend="vllm"))


def test_continuous_batching_matches_schema(tmp_path, tiny_model, tokenizer):
    summary = _run(tmp_path, tiny_model, tokenizer, prompts=_prompts(3), backend="cb")
    assert summary.merged
    ds = load_generations(tmp_path)
    assert len(ds) == 6
    assert all(r["length"] == len(r["token_ids"]) <= CAP for r in ds)


@pytest.mark.integration
def test_real_model_lengths_agree_with_retokenised_texts(tmp_path):
    from lengthpred.models.serving import load_causal_lm
    from lengthpred.models.specs import embedded_serving_spec

    model, tok = load_causal_lm(embedded_serving_spec())
    prompts = datasets.Dataset.from_dict({"id": ["a" * 16, "b" * 16], "messages": [
        [{"role": "user", "content": "Name three colours."}],
        [{"role": "user", "content": "What is the capital of France?"}]]})
    s = GenerationSettings(backend="cb", num_samples=1, max_new_tokens=24, batch_size=2)
    run_generation(prompts, BACKENDS.get("cb")(model, tok, s), tok, s, tmp_path, max_context=2048, progress=False)
    report = retokenised_agreement(load_generations(tmp_path), tok)
    assert report["n"] == 2 and report["n_length_ne_token_ids"] == 0 and report["canonical_exact"] == 1.0
    assert report["mean_abs_diff"] <= 1.0
