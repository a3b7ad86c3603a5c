"""Committed reference parts and the streaming runner: a long trace survives a crash or a fresh clone,
a truncated part is found and regenerated, the final merge refuses gaps, duplicates and mixed settings."""

from __future__ import annotations

import random

import datasets
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.generate import GenerationSettings, load_generations, reference_parts
from lengthpred.generate.backends import Sample
from lengthpred.generate.runner import run_generation
from lengthpred.targets import read_reference

CAP = 12


def _prompts(n: int) -> datasets.Dataset:
    ids = [f"{i:016x}" for i in range(n)]
    return datasets.Dataset.from_dict(
        {"id": ids, "messages": [[{"role": "user", "content": f"question {i} " * (i + 1)}] for i in range(n)]})


def _settings(**kw) -> GenerationSettings:
    return GenerationSettings(**{**dict(backend="vllm", num_samples=2, max_new_tokens=CAP, batch_size=3,
                                        seed=1), **kw})


class _FakeEngine:
    """A streaming backend whose answers finish out of order (longest prompt last), like a real engine;
    each answer's length is a function of the prompt, so runs can be compared."""

    name = "vllm"

    def __init__(self, settings: GenerationSettings, die_after: int | None = None) -> None:
        self.s, self.die_after, self.calls, self.max_live = settings, die_after, 0, 0

    def _answer(self, tokens):
        n = len(tokens) % (CAP + 3)
        return [Sample(list(range(min(n + j, CAP))), "length" if n + j >= CAP else "eos")
                for j in range(self.s.num_samples)]

    def generate(self, prompts, keys, seed):
        return [self._answer(p) for p in prompts]

    def stream(self, items, in_flight):
        live: list = []
        rng = random.Random(0)
        it = iter(items)
        while True:
            while len(live) < in_flight and (nxt := next(it, None)) is not None:
                live.append(nxt)
            self.max_live = max(self.max_live, len(live))
            if not live:
                return
            key, toks = live.pop(rng.randrange(len(live)))
            self.calls += 1
            if self.die_after is not None and self.calls > self.die_after:
                raise RuntimeError("killed")
            yield key, self._answer(toks)


def _run(root, tokenizer, prompts, engine, settings, **kw):
    return run_generation(prompts, engine, tokenizer, settings, root, max_context=256, progress=False, **kw)


def test_streaming_writes_whole_parts_and_matches_part_by_part(tmp_path, tokenizer):
    prompts, s = _prompts(8), _settings(in_flight=4)
    eng = _FakeEngine(s)
    summary = _run(tmp_path / "stream", tokenizer, prompts, eng, s)
    assert summary.merged and summary.n_generated == 8 and eng.max_live == 4
    plain = _settings(in_flight=0)
    _run(tmp_path / "plain", tokenizer, prompts, _FakeEngine(plain), plain)
    a = load_generations(tmp_path / "stream").to_pandas().drop(columns="token_ids")
    b = load_generations(tmp_path / "plain").to_pandas().drop(columns="token_ids")
    assert a.equals(b)


def test_parts_are_committed_and_a_fresh_clone_resumes_from_them(tmp_path, tokenizer):
    prompts, s = _prompts(8), _settings(in_flight=3)
    folder = tmp_path / "reference" / "bench.parts"
    meta = {"model": "tiny", "settings": s.hashed()}

    def on_part(rows):
        reference_parts.write_part(rows, folder, meta)

    with pytest.raises(RuntimeError, match="killed"):
        _run(tmp_path / "gen1", tokenizer, prompts, _FakeEngine(s, die_after=5), s, on_part=on_part)
    done = reference_parts.done_ids(folder, s.hashed())
    assert 0 < len(done) < 8 and len(done) % 3 == 0  # whole parts only
    # a fresh clone: no generation folder, only the committed parts
    eng = _FakeEngine(s)
    summary = _run(tmp_path / "gen2", tokenizer, prompts, eng, s, skip=done, on_part=on_part)
    assert summary.n_generated == 8 - len(done) and eng.calls == 8 - len(done)
    out = reference_parts.merge_parts(folder, prompts["id"], s.hashed(), tmp_path / "bench.jsonl", meta)
    rows, m = read_reference(out)
    assert m["n_prompts"] == 8 and len(rows) == 16 and not rows.duplicated(["id", "sample"]).any()
    assert not m["partial"] and sum(p["n_prompts"] for p in m["parts"]) == 8


def _rows(ids, n=2):
    return [dict(id=i, sample=j, length=5 + j, finish_reason="eos", prompt_tokens=9) for i in ids for j in range(n)]


def test_truncated_part_is_detected_and_not_counted(tmp_path):
    s = _settings().hashed()
    p = reference_parts.write_part(_rows(["a" * 16, "b" * 16]), tmp_path, {"settings": s})
    p.write_text("\n".join(p.read_text().splitlines()[:-1]) + "\n")  # lose the last row
    with pytest.raises(DataError, match="truncated"):
        reference_parts.read_part(p, s)
    assert reference_parts.done_ids(tmp_path, s) == set()


def test_part_with_other_settings_is_refused_naming_the_setting(tmp_path):
    p = reference_parts.write_part(_rows(["a" * 16]), tmp_path, {"settings": _settings().hashed()})
    with pytest.raises(ConfigError, match="temperature"):
        reference_parts.read_part(p, _settings(temperature=0.9).hashed())
    # the backend that produced a trace does not change what it means
    reference_parts.read_part(p, _settings(backend="cb").hashed())


def test_merge_refuses_gaps_and_duplicates(tmp_path):
    s = _settings().hashed()
    reference_parts.write_part(_rows(["a" * 16, "b" * 16]), tmp_path / "p", {"settings": s})
    with pytest.raises(DataError, match="no part yet"):
        reference_parts.merge_parts(tmp_path / "p", ["a" * 16, "b" * 16, "c" * 16], s, tmp_path / "t.jsonl", {})
    reference_parts.write_part(_rows(["b" * 16, "c" * 16]), tmp_path / "p", {"settings": s})
    with pytest.raises(DataError, match="more than one part"):
        reference_parts.merge_parts(tmp_path / "p", ["a" * 16, "b" * 16, "c" * 16], s, tmp_path / "t.jsonl", {})
    assert not (tmp_path / "t.jsonl").exists()


def test_part_missing_a_sample_is_refused(tmp_path):
    s = _settings().hashed()
    rows = _rows(["a" * 16])[:1]
    p = reference_parts.write_part(rows, tmp_path, {"settings": s})
    with pytest.raises(DataError, match="samples 0..1"):
        reference_parts.read_part(p, s)
