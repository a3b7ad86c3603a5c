"""Seeded, order-independent prompt selection: pool per domain, cap, dedup, round-robin over sources."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lengthpred.data.records import content_key, is_empty, prompt_chars

Record = dict[str, Any]


def rank_key(seed: int, rid: str) -> str:
    """A record's place in its source's seeded order; independent of file order and of other records."""
    return hashlib.sha1(f"{seed}:{rid}".encode()).hexdigest()


def select_domain(
    pools: Mapping[str, Sequence[Record]],
    n: int | None,
    seed: int,
    accept: Callable[[Record], bool] | None = None,
) -> tuple[list[Record], int]:
    """Round-robin over sources (config order), each in seeded order, until n records (None = all).

    `accept` (e.g. a token-count check, too slow to run on whole pools) is asked only about the
    candidates reached; returns the selection and how many candidates it rejected.
    """
    ranked = [sorted(recs, key=lambda r: rank_key(seed, r["id"])) for recs in pools.values()]
    ok = accept or (lambda r: True)
    if n is None:
        flat = [r for recs in ranked for r in recs]
        kept = [r for r in flat if ok(r)]
        return kept, len(flat) - len(kept)
    out: list[Record] = []
    rejected = 0
    pos = [0] * len(ranked)
    while len(out) < n and any(p < len(recs) for p, recs in zip(pos, ranked, strict=True)):
        for i, recs in enumerate(ranked):
            while pos[i] < len(recs) and len(out) < n:
                r = recs[pos[i]]
                pos[i] += 1
                if ok(r):
                    out.append(r)
                    break
                rejected += 1
    return out, rejected


def build_pools(
    records_by_source: Mapping[str, Sequence[Record]],
    domains: Mapping[str, Sequence[str]],
    max_prompt_chars: int | None,
) -> tuple[dict[str, dict[str, list[Record]]], dict[str, Counter]]:
    """domain → source → eligible records, plus per-domain counts of what was left out and why."""
    pools: dict[str, dict[str, list[Record]]] = {}
    dropped: dict[str, Counter] = defaultdict(Counter)
    seen: set[str] = set()
    for domain, srcs in domains.items():
        pools[domain] = {}
        for src in srcs:
            keep = []
            for r in records_by_source[src]:
                if r["domain"] != domain:
                    continue
                ck = content_key(r["messages"])
                if is_empty(r):
                    dropped[domain]["empty_prompt"] += 1
                elif ck in seen:
                    dropped[domain]["duplicate"] += 1
                elif max_prompt_chars is not None and prompt_chars(r) > max_prompt_chars:
                    dropped[domain]["too_long"] += 1
                else:
                    seen.add(ck)
                    keep.append(r)
            pools[domain][src] = keep
    return pools, dropped
