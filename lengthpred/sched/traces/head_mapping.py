"""Our heads' predictions for trace requests, by matching each request to a test prompt of the same
length quantile, so the head's real error profile (in ranks) is carried over to the trace.

Trace requests have no prompt texts, so no head can read them. Instead:

1. The head pool is the heads' test prompts (`lengthpred.sched.sweep.sources.from_predictions`) with each prompt's
   sampled lengths: a pool entry is one (prompt, sample), because a served request reveals one sampled
   length, not its prompt's mean (docs: AUDIT "mean of k samples vs one sample").
2. Trace request i with output quantile u_i (its rank among the window's requests, ties at random) is
   matched to the pool entry k(i) of the same quantile of the sampled lengths.
3. A head's prediction for that entry's prompt has a quantile p among the head's predictions over all pool
   entries (average ranks: a constant head gives everyone ½); the trace request is predicted the window's
   own length at quantile p. So predictions are on the trace's scale, and their rank error is the head's.

Nothing of request i's own length reaches the prediction except through the match: requests matched to
the same entry get the same prediction (a constant head predicts the median for all, and SJF on it
admits in arrival order). The pool's censoring comes along: the reference trace's capped samples tie at the cap, so the
longest trace requests are matched at random among the capped entries, and no head can rank those.
``prompt-mean`` maps each entry's leave-one-out prompt mean the same way (the mean of its prompt's *other*
samples, so the matched entry's own sample is not in its key; one sample: that sample): T5's mean-oracle,
carried over.

**Pool bootstrap** (`resample_pool`, `seed_pool`). The head's error profile comes from a finite pool of test
prompts (72 at demo scale, 480 at bench): a different draw of prompts would give another profile. With the
switch on (`sched.traces.pool_bootstrap`, the default), each seed maps the heads from its own resample of the
pool: as many prompts as it has, drawn with replacement, each with its sampled lengths and every head's
prediction (the (true, predicted) pairs stay together). One resample per seed, from the seed's own stream
(`pool_rng`), shared by every trace and every policy of that seed: the policies' paired differences stay
paired, and the interval over seeds covers window and prompt-pool variability together (one bootstrap
replicate per seed, not a nested bootstrap).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import numpy as np
import pandas as pd
from scipy import stats

from lengthpred.metrics import spearman_or_nan
from lengthpred.sched.sweep.pool import LengthSource

__all__ = ["POOL_STREAM", "PROMPT_MEAN", "map_heads", "pool_entries", "pool_rng", "resample_pool", "seed_pool"]

PROMPT_MEAN = "prompt-mean"  # predictor label: the matched entry's leave-one-out prompt mean (mean-oracle)
POOL_STREAM = 17  # the pool resample's random stream per seed: default_rng([seed, POOL_STREAM])


def pool_rng(seed: int) -> np.random.Generator:
    """The stream seed `seed`'s pool resample is drawn from: its own, so switching the bootstrap on or off
    leaves the noisy oracles' and the mapping's draws (stream [seed, 16]) as they were."""
    return np.random.default_rng([int(seed), POOL_STREAM])


@contextmanager
def _quiet_pool_log():
    """The pool's single-sample warning was given when the pool was loaded; not again for every resample."""
    logger = logging.getLogger("lengthpred.sched")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def resample_pool(pool: LengthSource, rng: np.random.Generator) -> LengthSource:
    """One bootstrap replicate of the pool: its m prompts drawn m times with replacement, each keeping its
    sampled lengths, prompt tokens and every head's prediction (the (true, predicted) pairs resampled
    together)."""
    m = len(pool.output)
    idx = rng.integers(0, m, m)  # [m] prompts, with replacement
    with _quiet_pool_log():
        return LengthSource(pool.name, np.asarray(pool.output)[idx], np.asarray(pool.prompt)[idx],
                            {h: np.asarray(v)[idx] for h, v in pool.preds.items()},
                            arrival=None if pool.arrival is None else np.asarray(pool.arrival)[idx],
                            samples=None if pool.samples is None else [pool.samples[i] for i in idx])


def seed_pool(pool: LengthSource, seed: int, bootstrap: bool) -> LengthSource:
    """The pool seed `seed` maps its heads from: its own resample (`resample_pool` on `pool_rng(seed)`) when
    `bootstrap`, else the pool itself. Deterministic in the seed, so every trace and every batching
    workload of a seed uses the same resample."""
    return resample_pool(pool, pool_rng(seed)) if bootstrap else pool


def pool_entries(pool: LengthSource) -> tuple[np.ndarray, np.ndarray]:
    """(prompt index, sampled length) of every pool entry: one per (prompt, sample), or one per prompt
    (its `output`) when the pool has no samples."""
    if pool.samples is None:
        return np.arange(len(pool.output)), np.asarray(pool.output, dtype=float)
    count = np.array([len(s) for s in pool.samples])
    prompt = np.repeat(np.arange(len(count)), count)
    length = np.concatenate([np.maximum(np.rint(np.asarray(s, dtype=float)), 1) for s in pool.samples])
    return prompt, length


def _mid_quantile(x: np.ndarray) -> np.ndarray:
    """(average rank − ½)/n in (0, 1): ties share one quantile."""
    return (stats.rankdata(x, method="average") - 0.5) / len(x)


def map_heads(pool: LengthSource, output: np.ndarray, rng: np.random.Generator,
              heads: list[str] | None = None) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Predictions (tokens, aligned with `output`) for every head of `pool` (or `heads`) and PROMPT_MEAN,
    and one row per predictor with its Spearman on the pool against single samples (`pool_spearman`) and
    against the prompts' mean (`pool_spearman_mean`, T1's target)."""
    out = np.asarray(output, dtype=float)
    n = len(out)
    entry_prompt, entry_len = pool_entries(pool)  # [K], [K]
    K = len(entry_len)
    by_len = np.lexsort((rng.random(K), entry_len))  # pool entries from shortest, ties at random
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((rng.random(n), out))] = np.arange(n)
    matched = by_len[np.minimum(((rank + 0.5) / n * K).astype(np.int64), K - 1)]  # [n] pool entry per request
    sorted_out = np.sort(out)
    names = list(pool.preds) if heads is None else list(heads)
    mean_len = pool.expected if pool.expected is not None else np.asarray(pool.output, dtype=float)
    values = {h: np.asarray(pool.preds[h], dtype=float)[entry_prompt] for h in names}  # [K] per entry
    if pool.expected is not None:  # the entry's own sample left out (LengthSource.loo_mean)
        values[PROMPT_MEAN] = pool.loo_mean(entry_prompt, entry_len)
    preds, rows = {}, []
    for h, v in values.items():
        p = _mid_quantile(v)  # [K] quantile of the head's prediction for each entry
        preds[h] = sorted_out[np.minimum((p[matched] * n).astype(np.int64), n - 1)]
        rows.append(dict(predictor=h, pool_spearman=spearman_or_nan(entry_len, v),
                         pool_spearman_mean=spearman_or_nan(mean_len, pool.preds[h]) if h in pool.preds and h != PROMPT_MEAN
                         else spearman_or_nan(mean_len[entry_prompt], v), pool_entries=K,
                         pool_prompts=len(mean_len)))
    return preds, pd.DataFrame(rows)
