"""Near-duplicate grouping (word n-gram Jaccard) and the split that keeps each group in one part."""

from __future__ import annotations

import pytest

from lengthpred.crossmodel.split import grouped_split_ids, stratified_split
from lengthpred.data.near_duplicates import (
    NearDuplicates,
    cross_split_twins,
    jaccard_pairs,
    near_duplicate_groups,
)
from lengthpred.data.splits import split_ids
from lengthpred.errors import ConfigError

BASE = "write a python function that returns the sum of the squares of a list of integers"


def test_jaccard_is_exact_on_word_ngrams_and_ignores_punctuation_and_case():
    texts = [BASE, BASE.upper() + "!!", BASE + " and then print it", "something else entirely, nothing shared here"]
    i, j, sim = jaccard_pairs(texts, ngram=5, min_similarity=0.0)
    got = {(a, b): s for a, b, s in zip(i.tolist(), j.tolist(), sim.tolist(), strict=True)}
    assert got[(0, 1)] == pytest.approx(1.0)
    # BASE has 16 words → 12 five-grams; the longer one adds 4 more grams, all new
    assert got[(0, 2)] == pytest.approx(12 / 16)
    assert (0, 3) not in got and (2, 3) not in got


def test_short_prompts_are_one_gram_and_empty_ones_match_nothing():
    i, j, sim = jaccard_pairs(["hi there", "Hi, there.", "", "hello"], ngram=5, min_similarity=0.5)
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == [(0, 1)] and sim.tolist() == [1.0]
    assert jaccard_pairs(["", ""], 5, 0.5)[0].size == 0 and jaccard_pairs(["x"], 5, 0.5)[0].size == 0


def test_groups_are_connected_components_keyed_by_the_smallest_id():
    a = "one two three four five six seven eight"
    b = a + " nine ten"        # 4 of 6 grams shared with a (0.67)
    c = b + " eleven twelve"   # 6 of 8 with b (0.75), 4 of 8 with a (0.5)
    ids = ["z", "y", "x", "w"]
    groups = near_duplicate_groups(ids, [a, b, c, "unrelated words only in this prompt here"], NearDuplicates(5, 0.6))
    assert groups == {"z": "x", "y": "x", "x": "x", "w": "w"}  # a~b~c chain is one group though a, c are 0.5


def test_bad_settings_are_one_line():
    with pytest.raises(ConfigError, match="ngram"):
        NearDuplicates(0, 0.5)
    with pytest.raises(ConfigError, match="threshold"):
        NearDuplicates(5, 0.0)
    with pytest.raises(ConfigError, match="valid keys"):
        NearDuplicates.from_cfg({"ngram": 5, "thresh": 0.5})
    assert NearDuplicates.from_cfg(None) is None


def test_singleton_groups_reproduce_the_ungrouped_split():
    ids = [f"p{i:03d}" for i in range(57)]
    fr = {"train": 0.5, "val": 0.2, "test": 0.3}
    assert grouped_split_ids({i: [i] for i in ids}, fr, seed=4) == split_ids(ids, fr, 4)


def test_a_group_never_straddles_two_parts_and_the_audit_finds_no_twin():
    ids = [f"p{i:03d}" for i in range(60)]
    dataset_of = {i: ("A" if k % 2 else "B") for k, i in enumerate(ids)}
    text_of = {i: f"prompt number {i} has its own words {k} here" for k, i in enumerate(ids)}
    twins = ids[:12:2]  # six prompts of dataset B: near-identical texts
    for i in twins:
        text_of[i] = BASE + f" {i}"
    fr = {"train": 0.5, "val": 0.2, "test": 0.3}
    plain = stratified_split(ids, dataset_of, fr, seed=0)
    groups = near_duplicate_groups(ids, [text_of[i] for i in ids], NearDuplicates(5, 0.5))
    grouped = stratified_split(ids, dataset_of, fr, seed=0, group_of=groups)
    home = [k for k, v in grouped.items() if twins[0] in v][0]
    assert set(twins) <= set(grouped[home])
    assert sorted(sum(grouped.values(), [])) == ids
    assert cross_split_twins(grouped, text_of, 5, 0.5) == []
    assert len({k for k, v in plain.items() if set(twins) & set(v)}) > 1  # ungrouped, the twins were spread
    # stratified: each dataset still near its fractions (B may overshoot by the group's size − 1)
    for ds in ("A", "B"):
        n = [sum(dataset_of[i] == ds for i in grouped[k]) for k in ("train", "val", "test")]
        assert sum(n) == 30 and abs(n[0] - 15) <= 5 and abs(n[2] - 9) <= 5
