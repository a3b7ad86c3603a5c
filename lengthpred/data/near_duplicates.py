"""Near-duplicate prompts by word n-gram Jaccard similarity, grouped so that a split can keep each group whole.

Two prompts are near-duplicates when the Jaccard similarity of their sets of word `ngram`-grams (words are the
lower-cased runs of letters, digits and underscores, so punctuation and spacing do not count; a prompt shorter
than `ngram` words is one gram of all its words) reaches `threshold`.
Groups are the connected components of that relation (a chain a~b~c is one group even where a and c differ
more). The sets are a binary sparse matrix (sklearn's CountVectorizer), the pairwise intersections one sparse
product, the components scipy's: exact, no hashing, and fast for a few thousand prompts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix, triu
from scipy.sparse.csgraph import connected_components
from sklearn.feature_extraction.text import CountVectorizer

from lengthpred.errors import ConfigError


@dataclass(frozen=True)
class NearDuplicates:
    """Word `ngram`-gram Jaccard ≥ `threshold` puts two prompts in one group."""

    ngram: int = 5
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if int(self.ngram) < 1:
            raise ConfigError(f"near_duplicates.ngram={self.ngram}: use a word n-gram length >= 1")
        if not 0.0 < float(self.threshold) <= 1.0:
            raise ConfigError(f"near_duplicates.threshold={self.threshold}: use a Jaccard similarity in (0, 1]")

    @classmethod
    def from_cfg(cls, cfg: Mapping | None) -> NearDuplicates | None:
        """None (no grouping) for a null node; an unknown key is a ConfigError naming the valid ones."""
        if cfg is None:
            return None
        unknown = sorted(set(cfg) - {"ngram", "threshold"})
        if unknown:
            raise ConfigError(f"near_duplicates takes no {unknown}; valid keys: ngram, threshold")
        return cls(int(cfg.get("ngram", cls.ngram)), float(cfg.get("threshold", cls.threshold)))


_WORD = re.compile(r"\w+")


def _grams(text: str, n: int) -> list[str]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return [" ".join(words)] if words else []
    return [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]


def jaccard_pairs(texts: Sequence[str], ngram: int, min_similarity: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, similarity) for every pair i < j whose word n-gram Jaccard similarity is ≥ `min_similarity`."""
    if len(texts) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    vec = CountVectorizer(analyzer=lambda t: _grams(t, ngram), binary=True, lowercase=False)
    try:
        x = csr_matrix(vec.fit_transform(list(texts)), dtype=np.float64)  # [n, grams] 0/1
    except ValueError:  # every text empty: no grams at all
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    sizes = np.asarray(x.sum(axis=1)).ravel()
    inter = triu(x @ x.T, k=1).tocoo()  # shared grams of every pair that shares any
    union = sizes[inter.row] + sizes[inter.col] - inter.data
    sim = np.divide(inter.data, union, out=np.zeros_like(inter.data), where=union > 0)
    keep = sim >= min_similarity
    return inter.row[keep].astype(np.int64), inter.col[keep].astype(np.int64), sim[keep]


def near_duplicate_groups(ids: Sequence[str], texts: Sequence[str], settings: NearDuplicates) -> dict[str, str]:
    """id → its group's key (the smallest id of the group; a prompt without a twin is its own group)."""
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    n = len(ids)
    i, j, _ = jaccard_pairs(texts, settings.ngram, settings.threshold)
    graph = csr_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    first: dict[int, str] = {}
    for k, pid in sorted(enumerate(ids), key=lambda kv: kv[1]):
        first.setdefault(int(label[k]), pid)
    return {pid: first[int(label[k])] for k, pid in enumerate(ids)}


def cross_split_twins(split: Mapping[str, Sequence[str]], text_of: Mapping[str, str], ngram: int,
                      threshold: float, part: str = "test") -> list[str]:
    """The `part` ids with a near-duplicate (Jaccard ≥ threshold) in any other part of `split` (an audit:
    empty after a split that grouped near-duplicates at this threshold or a lower one)."""
    ids = [i for p in split for i in split[p]]
    where = {i: p for p in split for i in split[p]}
    a, b, _ = jaccard_pairs([text_of[i] for i in ids], ngram, threshold)
    out = set()
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        px, py = where[ids[x]], where[ids[y]]
        if px != py and part in (px, py):
            out.add(ids[x] if px == part else ids[y])
    return sorted(out)
