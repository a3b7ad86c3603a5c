"""Split construction: in-domain train/val/test, cross-domain pairs with a measured shift, ForeLen subsets."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import wasserstein_distance

from lengthpred.data.records import content_key, make_record, prompt_chars
from lengthpred.data.settings import Forelen
from lengthpred.errors import ConfigError
from lengthpred.names import pair_name

Record = dict[str, Any]
# Hook for later stages (e.g. a feature-space distance): (train_ids, test_ids) -> {name: value}
ShiftFn = Callable[[Sequence[str], Sequence[str]], Mapping[str, float]]


def _counts(n: int, sizes: Mapping[str, float]) -> tuple[int, int, int]:
    """Split sizes as counts (ints) or fractions (floats summing to ≤ 1)."""
    tr, va, te = (sizes.get(k, 0) for k in ("train", "val", "test"))
    if all(isinstance(x, int) for x in (tr, va, te)):
        if tr + va + te > n:
            raise ConfigError(f"split sizes {tr}+{va}+{te} exceed the {n} prompts available")
        return tr, va, te
    va_n, te_n = round(n * float(va)), round(n * float(te))
    return n - va_n - te_n, va_n, te_n


def split_ids(ids: Sequence[str], sizes: Mapping[str, float], seed: int) -> dict[str, list[str]]:
    """Seeded shuffle of the sorted ids, cut into train/val/test (each list sorted)."""
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    tr, va, te = _counts(len(order), sizes)
    parts = {"train": order[:tr], "val": order[tr:tr + va], "test": order[tr + va:tr + va + te]}
    return {k: sorted(v) for k, v in parts.items()}


def _log_lengths(recs: Sequence[Record], stat: Callable[[list[int]], float]) -> np.ndarray:
    return np.log1p([stat(r["lengths"]) for r in recs if r["lengths"]])


def knows_lengths(recs: Sequence[Record], min_known: int = 5) -> bool:
    return sum(1 for r in recs if r["lengths"]) >= min_known


def shift(train: Sequence[Record], test: Sequence[Record], use_lengths: bool | None = None) -> dict[str, Any]:
    """Wasserstein-1 distance between log known-length distributions (else log prompt characters).

    `use_lengths` fixes the basis for a whole set of pairs so their shifts are comparable.
    """
    lp = wasserstein_distance(np.log1p([prompt_chars(r) for r in train]),
                              np.log1p([prompt_chars(r) for r in test]))
    a, b = _log_lengths(train, np.mean), _log_lengths(test, np.mean)
    if use_lengths is None:
        use_lengths = knows_lengths(train) and knows_lengths(test)
    if use_lengths:
        return {"length_wasserstein": float(wasserstein_distance(a, b)), "length_basis": "known_lengths",
                "prompt_wasserstein": float(lp)}
    return {"length_wasserstein": float(lp), "length_basis": "prompt_chars", "prompt_wasserstein": float(lp)}


def dedup_train(train: list[str], test: list[str], by_id: Mapping[str, Record]) -> tuple[list[str], int]:
    """Drop train prompts whose text also appears in test (any source); return kept ids and count."""
    test_keys = {content_key(by_id[i]["messages"]) for i in test}
    kept = [i for i in train if content_key(by_id[i]["messages"]) not in test_keys]
    return kept, len(train) - len(kept)


def cross_pairs(
    indomain: Mapping[str, Mapping[str, list[str]]],
    by_id: Mapping[str, Record],
    mix: bool = True,
    extra_shift: ShiftFn | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Every (single source → target) pair, plus (mix of all others → target) when mix."""
    pairs, removed = [], 0
    domains = list(indomain)
    use_lengths = all(knows_lengths([by_id[i] for i in parts[k]]) for parts in indomain.values()
                      for k in ("train", "test"))
    for tgt in domains:
        sources: list[tuple[str, list[str]]] = [(s, [s]) for s in domains if s != tgt]
        if mix and len(domains) > 2:
            sources.append(("mix", [s for s in domains if s != tgt]))
        for name, members in sources:
            train = sorted(i for s in members for i in indomain[s]["train"])
            val = sorted(i for s in members for i in indomain[s]["val"])
            test = list(indomain[tgt]["test"])
            train, n_rm = dedup_train(train, test, by_id)
            val, n_rm2 = dedup_train(val, test, by_id)
            removed += n_rm + n_rm2
            sh = shift([by_id[i] for i in train], [by_id[i] for i in test], use_lengths)
            if extra_shift is not None:
                sh.update(extra_shift(train, test))
            pairs.append({"name": pair_name(name, tgt), "source": name, "target": tgt,
                          "train": train, "val": val, "test": test, "shift": sh})
    return pairs, removed


def cot_variants(math_recs: Sequence[Record], k: int, seed: int, instruction: str) -> list[Record]:
    """Reasoning subset: k math prompts with an explicit chain-of-thought instruction appended (new ids)."""
    pick = sorted(math_recs, key=lambda r: r["id"])
    random.Random(seed).shuffle(pick)
    out = []
    for r in sorted(pick[:k], key=lambda r: r["id"]):
        msgs = [dict(m) for m in r["messages"]]
        msgs[-1]["content"] = f"{msgs[-1]['content']}\n\n{instruction}"
        out.append(make_record(r["source"], r["domain"], msgs, category=f"{r['category']}+cot",
                               reference=r["reference"]))
    return out


def forelen(
    selected: Sequence[Record], cot: Sequence[Record], cfg: Forelen, seed: int,
    exclude: set[str] = frozenset(),
) -> dict[str, list[str]]:
    """LongSeq (longest inputs), Reasoning (CoT variants), RL (math+code prompts for many samples).

    `exclude`: ids (the train splits) no subset may contain, so a subset scores unseen prompts."""
    selected = [r for r in selected if r["id"] not in exclude]
    longest = sorted(selected, key=lambda r: (-prompt_chars(r), r["id"]))
    n_long = cfg.longseq
    longseq = sorted(r["id"] for r in (longest if n_long is None else longest[:n_long]))
    rl_pool = sorted(r["id"] for r in selected if r["domain"] in ("math", "code"))
    random.Random(seed + 1).shuffle(rl_pool)
    n_rl = cfg.rl
    rl = sorted(rl_pool if n_rl is None else rl_pool[:n_rl])
    return {"longseq": longseq, "reasoning": sorted(r["id"] for r in cot), "rl": rl}


def update_shifts(splits: dict[str, Any], fn: ShiftFn) -> dict[str, Any]:
    """Add later-stage distances (e.g. feature space, or the serving model's own lengths) to every pair."""
    for pair in splits["cross"]:
        pair["shift"].update(fn(pair["train"], pair["test"]))
    return splits


def served_length_shift(served: Mapping[str, Sequence[int]], min_known: int = 5) -> ShiftFn:
    """A ShiftFn over the serving model's own (reference-trace) lengths: log-mean Wasserstein-1."""

    def fn(train: Sequence[str], test: Sequence[str]) -> dict[str, float]:
        a = np.log1p([np.mean(served[i]) for i in train if i in served])
        b = np.log1p([np.mean(served[i]) for i in test if i in served])
        if len(a) < min_known or len(b) < min_known:
            return {}
        return {"served_length_wasserstein": float(wasserstein_distance(a, b))}

    return fn
