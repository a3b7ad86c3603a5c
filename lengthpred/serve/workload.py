"""The replayed work: prompts with their sampled lengths, drawn into requests with arrival times.

A request replays one sampled answer length of its prompt from the reference trace (docs/AUDIT: a served
request reveals one sample, not the prompt's mean). Within a repeat, every load and policy replays the
same requests, lengths and arrival pattern (scaled to the load), so paired runs differ only in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.workload import arrival_times


@dataclass(frozen=True)
class ServeRequest:
    rid: str
    prompt_id: str
    prompt_ids: list[int]
    length: int  # tokens to generate: the replayed sample (max_tokens with ignore_eos)
    arrival: float  # s after the run starts
    expected: float  # the prompt's mean sampled length (what the best prompt-level predictor can know)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)


@dataclass
class PromptPool:
    """Prompts (ids, token ids) with their sampled lengths, aligned; capped samples count as the cap."""

    ids: list[str]
    token_ids: list[list[int]]
    samples: list[list[int]]

    def __post_init__(self) -> None:
        if not self.ids:
            raise DataError("the serve workload has no prompts")
        if not (len(self.ids) == len(self.token_ids) == len(self.samples)):
            raise DataError("prompt pool arrays differ in length")
        if any(len(s) == 0 for s in self.samples):
            raise DataError("a prompt in the serve workload has no sampled length")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        """Every sampled length, flattened (the capacity estimate's length distribution)."""
        return np.array([max(int(x), 1) for s in self.samples for x in s], dtype=np.int64)

    @property
    def prompt_lengths(self) -> np.ndarray:
        return np.array([len(t) for t in self.token_ids], dtype=np.int64)


def build_pool(ids: Sequence[str], token_ids: Mapping[str, list[int]], samples: Mapping[str, Sequence[int]]) -> PromptPool:
    """The prompts of `ids` that have both token ids and sampled lengths; missing ones are a DataError
    naming how many (the split and the trace come from different data)."""
    missing = [i for i in ids if i not in samples or i not in token_ids]
    if missing:
        raise DataError(f"{len(missing)} of {len(ids)} serve prompts have no sampled lengths or tokens "
                        f"(e.g. {missing[0]}): the split and the reference trace come from different data")
    ids = sorted(ids)
    return PromptPool(list(ids), [list(token_ids[i]) for i in ids], [[int(x) for x in samples[i]] for i in ids])


def draw_requests(pool: PromptPool, n: int, seed: int) -> list[tuple[int, int]]:
    """`n` (prompt, sample) pairs: distinct prompts while the pool lasts (then with replacement), one
    sampled length each, uniformly."""
    if n < 1:
        raise ConfigError(f"serve.n_requests={n} must be >= 1")
    rng = np.random.default_rng(seed)
    m = len(pool)
    entries = rng.permutation(m)[:n] if n <= m else rng.integers(0, m, n)
    return [(int(e), int(rng.integers(0, len(pool.samples[e])))) for e in entries]


def unit_arrivals(n: int, seed: int, process: str = "poisson", cv: float = 1.0,
                  trace: Sequence[float] | None = None) -> np.ndarray:
    """Arrival times from 0 whose own rate, (n − 1) / span, is exactly 1 request/s (divide by a rate to get
    that load): Poisson or gamma inter-arrivals, or window `seed` of a trace (its times [seed·n, (seed + 1)·n),
    so repeats replay disjoint stretches of real traffic), rescaled. Without the rescale a 40-request Poisson
    sample's rate is off by ±16%, so one repeat's "load 0.95" could sit above capacity."""
    if process == "trace":
        lo = int(seed) * n
        if lo < 0:
            raise ConfigError(f"serve.seeds: repeat {seed} has no trace window (repeats are >= 0)")
        if trace is None or len(trace) < lo + n:
            raise DataError(f"serve arrival trace has {0 if trace is None else len(trace)} times, repeat {seed} "
                            f"needs times {lo} to {lo + n - 1}: use fewer or smaller repeats")
        a = np.sort(np.asarray(trace, dtype=float))[lo:lo + n]  # windows of time, however the file is ordered
    else:
        rng = np.random.default_rng([seed, 1])  # a stream apart from the request draw
        a = arrival_times(n, 1.0, process=process, cv=cv, rng=rng)
    a = a - a[0]
    return a * (n - 1) / a[-1] if n > 1 and a[-1] > 0 else a


def make_requests(pool: PromptPool, picks: Sequence[tuple[int, int]], arrivals: np.ndarray,
                  tag: str, cap: int | None = None) -> list[ServeRequest]:
    """Requests in arrival order; ids `<tag>-<k>` (k = draw order). `cap`: natural answers (the engine stops at
    the end of sequence), every request's `length` is this cap instead of its replayed sample."""
    out = []
    for k, ((e, s), t) in enumerate(zip(picks, arrivals, strict=True)):
        sam = pool.samples[e]
        n = int(cap) if cap is not None else max(int(sam[s]), 1)
        out.append(ServeRequest(f"{tag}-{k}", pool.ids[e], pool.token_ids[e], n, float(t), float(np.mean(sam))))
    return sorted(out, key=lambda r: (r.arrival, r.rid))
