"""What a completed stream request reveals, and how far a pair's served lengths shift.

A served request produces **one** sampled length, so that is all its completion reveals: the stream's
label of request i is one of prompt i's samples, drawn at random (seeded), never the mean of its k
samples (AUDIT.md "Mean of k samples vs one sample"). The mean is kept beside it for the mean-label
oracle head only. A capped sample reveals the cap (a lower bound), as the server would see it.

The shift of a pair is measured on served lengths: Wasserstein-1 distance between log1p of every served
sample of the source's train prompts and of the target's stream prompts. The target's test prompts are
never read (their lengths are what the table scores).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import wasserstein_distance

from lengthpred.errors import DataError

log = logging.getLogger(__name__)


@dataclass
class RevealedLabels:
    """Per stream request: the revealed sample (tokens), the mean of all samples, whether it was capped."""

    y: np.ndarray  # [n] the one sampled length a completion reveals
    y_mean: np.ndarray  # [n] mean of the prompt's samples (the mean-label oracle's label)
    capped: np.ndarray  # [n] bool: the revealed sample hit the cap
    sample: np.ndarray  # [n] int: which sample was revealed (-1: no per-sample lengths, the mean)


def _samples(targets: pd.DataFrame, i: str) -> list[float]:
    v = targets.at[i, "lengths"]
    return [float(x) for x in v] if v is not None and len(v) else []


def reveal_samples(targets: pd.DataFrame, ids: Sequence[str], rng: np.random.Generator) -> RevealedLabels:
    """One uniformly drawn sample per id; without a `lengths` column, the target itself (logged)."""
    n = len(ids)
    y_mean = targets.loc[list(ids), "y"].to_numpy(dtype=np.float64)
    if "lengths" not in targets.columns:
        log.warning("targets carry no per-sample lengths: the stream reveals the target statistic instead")
        return RevealedLabels(y_mean.copy(), y_mean, np.zeros(n, dtype=bool), np.full(n, -1))
    y, capped, sample = np.empty(n), np.zeros(n, dtype=bool), np.empty(n, dtype=np.int64)
    has_reasons = "finish_reasons" in targets.columns
    for k, i in enumerate(ids):
        s = _samples(targets, i)
        if not s:
            raise DataError(f"prompt {i} has no sampled lengths to reveal")
        j = int(rng.integers(len(s)))
        y[k], sample[k] = s[j], j
        if has_reasons:
            capped[k] = list(targets.at[i, "finish_reasons"])[j] == "length"
    return RevealedLabels(y, y_mean, capped, sample)


def served_lengths(targets: pd.DataFrame, ids: Sequence[str]) -> np.ndarray:
    """Every served sample of these prompts (the target statistic where no samples are recorded)."""
    if "lengths" not in targets.columns:
        return targets.loc[list(ids), "y"].to_numpy(dtype=np.float64)
    return np.array([x for i in ids for x in _samples(targets, i)], dtype=np.float64)


def served_shift(targets: pd.DataFrame, source_ids: Sequence[str], stream_ids: Sequence[str]) -> float:
    """Wasserstein-1 distance of log1p served lengths: source train prompts vs target stream prompts."""
    a, b = served_lengths(targets, source_ids), served_lengths(targets, stream_ids)
    if a.size == 0 or b.size == 0:
        raise DataError("served-length shift needs lengths on both sides of the pair")
    return float(wasserstein_distance(np.log1p(a), np.log1p(b)))
