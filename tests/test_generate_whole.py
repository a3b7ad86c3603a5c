"""Generations stay whole under concurrency: one shard layout per run folder (another refused in one line, with
the repair command), a resumed layout never repeats a prompt, a part without its digest is regenerated, merged
generations carry digests (an edit there is caught), and a merge written before digests is re-verified against
its parts once. A fake backend: no model runs."""

from __future__ import annotations

import os

import datasets
import pytest

from lengthpred.errors import ConfigError, DataError
from lengthpred.generate import GenerationSettings, load_generations, store
from lengthpred.generate.backends import Sample
from lengthpred.generate.runner import run_generation
from lengthpred.integrity import checksum_path


class Echo:
    """A backend whose answer to a prompt is its last 3 token ids, `num_samples` times."""

    name = "static"

    def generate(self, prompts, keys, seed):
        return [[Sample(list(p[-3:]), "eos")] * 2 for p in prompts]


def prompts(n: int = 6) -> datasets.Dataset:
    ids = [f"{i:04d}" for i in range(n)]
    return datasets.Dataset.from_dict({"id": ids, "messages": [[{"role": "user", "content": f"q {i}"}] for i in ids]})


def run(root, tokenizer, shard=(0, 1)):
    s = GenerationSettings(backend="static", num_samples=2, max_new_tokens=8, batch_size=2)
    return run_generation(prompts(), Echo(), tokenizer, s, root, max_context=256, shard=shard, progress=False)


def test_a_second_shard_layout_is_refused_and_a_repaired_one_resumes(tmp_path, tokenizer):
    run(tmp_path, tokenizer, shard=(0, 2))
    with pytest.raises(ConfigError, match=r"started in 2 shard\(s\).*lengthpred store repair"):
        run(tmp_path, tokenizer, shard=(0, 1))
    assert store.repair(tmp_path) == (len(store.part_files(tmp_path)), 0)
    summary = run(tmp_path, tokenizer, shard=(0, 1))  # resumes: shard 0/2's prompts are not generated again
    assert summary.n_generated == 3 and summary.merged
    assert len(load_generations(tmp_path)) == 12


def test_a_part_without_its_digest_is_generated_again(tmp_path, tokenizer):
    run(tmp_path, tokenizer)
    part = store.part_files(tmp_path)[0]
    checksum_path(part).unlink()
    assert run(tmp_path, tokenizer).n_generated == 2  # the part's two prompts, nothing else
    assert part.with_name(part.name + ".bad").is_file()


def test_merged_generations_carry_digests_and_an_edit_is_caught(tmp_path, tokenizer):
    run(tmp_path, tokenizer)
    data = next((tmp_path / "merged").glob("data-*.arrow"))
    assert checksum_path(data).is_file()
    assert len(load_generations(tmp_path)) == 12
    raw = bytearray(data.read_bytes())
    raw[-20] ^= 0x01
    data.write_bytes(bytes(raw))
    os.utime(data, ns=(0, 10**9))
    with pytest.raises(DataError, match=r"merged generations .*checksum mismatch.*rerun scripts/generate.py"):
        load_generations(tmp_path)


def test_a_merge_from_before_digests_is_checked_against_its_parts_once(tmp_path, tokenizer):
    run(tmp_path, tokenizer)
    for f in (tmp_path / "merged").glob("*.sha256"):
        f.unlink()
    assert len(load_generations(tmp_path)) == 12  # equal to its parts: given digests
    assert all(checksum_path(f).is_file() for f in (tmp_path / "merged").iterdir() if f.suffix != ".sha256")
    for f in (tmp_path / "merged").glob("*.sha256"):
        f.unlink()
    store.quarantine(store.part_files(tmp_path)[0], "test")  # its parts no longer vouch for it
    with pytest.raises(DataError, match="carry no digests and do not match parts"):
        load_generations(tmp_path)
