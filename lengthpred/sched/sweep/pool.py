"""A pool of prompts that simulated requests are drawn from, each request with its own sampled length.

A served request reveals one sampled length, not its prompt's mean (docs/AUDIT: "mean of k samples vs one
sample"). So a pool entry holds its prompt's sampled lengths when the source has them, and every simulated
request draws one of them uniformly: the scheduler, the oracles and every head face the same noisy truth.
Two oracles follow: the *clairvoyant* one knows the request's own sampled length (the oracle policies), the
*mean-oracle* knows only its prompt's expected length, estimated by the leave-one-out mean of the prompt's
*other* samples (a request that drew sample j is keyed on the mean of the others): the full mean would
contain the request's own length (with 3 samples a third of it), a leak no predictor reading the prompt has.
With a single sample there are no others; the key falls back to that sample (a warning says the mean-oracle
then equals the clairvoyant one). A third reference, ``random`` (`random_keys`), keys each prompt on a random
length: the zero anchor for shares of the oracle's gain.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lengthpred.errors import DataError

log = logging.getLogger("lengthpred.sched")

CLAIRVOYANT = "clairvoyant"  # predictor label of the oracle policies: each request's own sampled length
MEAN_ORACLE = "mean-oracle"  # predictor: leave-one-out mean of the prompt's other sampled lengths
RANDOM = "random"  # predictor: a random length per prompt (fixed per seed), the zero anchor of shares
NO_PREDICTOR = "none"  # predictor label of policies that use no prediction (FCFS, MLFQ)


@dataclass
class Requests:
    """`n` requests drawn from a pool; arrays aligned, lengths in tokens."""

    idx: np.ndarray  # [n] pool entries
    output: np.ndarray  # [n] int, each request's own sampled length (>= 1)
    prompt: np.ndarray  # [n] int, its prompt's token count
    expected: np.ndarray | None  # [n] float, the leave-one-out mean of its prompt's other samples (its own
    # sample when the prompt has one); the mean-oracle's key. None when the pool has no samples


@dataclass
class LengthSource:
    """Pool entries (prompts) with one prediction array per predictor, aligned.

    `samples` (one sequence of sampled lengths per entry, capped samples as the cap) makes each drawn request
    take one of its prompt's samples; without it a request's length is the entry's `output` (a trace's
    observed length, or a smoothed target when nothing better is known), and there is no mean-oracle.
    """

    name: str
    output: np.ndarray  # [m] true output tokens (>= 1): the prompt's mean when `samples` is given
    prompt: np.ndarray  # [m] prompt tokens
    preds: dict[str, np.ndarray] = field(default_factory=dict)  # predictor → [m] predicted tokens
    arrival: np.ndarray | None = None  # [m] trace timestamps (s), when the source is a trace
    samples: Sequence[Sequence[int]] | None = None  # [m] ragged: each prompt's sampled lengths
    tails: dict[str, np.ndarray] = field(default_factory=dict)  # predictor → [m] CVaR_0.9: `preds` holds its E,
    # and the request's key is TIE's E + β·CVaR with β from the queue when it is predicted (QueueTIEPredictor)
    expected: np.ndarray | None = field(init=False, default=None)  # [m] float: mean of all of an entry's samples
    # (the prompt's expected length, T1's target); the mean-oracle's key is `loo_mean`, without the own sample
    _flat: np.ndarray | None = field(init=False, default=None, repr=False)  # [sum count] samples, entry-major
    _start: np.ndarray | None = field(init=False, default=None, repr=False)  # [m] first sample of each entry
    _count: np.ndarray | None = field(init=False, default=None, repr=False)  # [m] samples per entry
    _sum: np.ndarray | None = field(init=False, default=None, repr=False)  # [m] sum of each entry's samples

    def __post_init__(self) -> None:
        m = len(self.output)
        if m == 0:
            raise DataError(f"length source {self.name}: no requests")
        if len(self.prompt) != m:
            raise DataError(f"length source {self.name}: {len(self.prompt)} prompt lengths for {m} requests")
        for k, v in self.preds.items():
            if len(v) != m or not np.all(np.isfinite(v)):
                raise DataError(f"length source {self.name}: predictor {k} has {len(v)} finite values, need {m}")
        for k, v in self.tails.items():
            if k not in self.preds or len(v) != m or not np.all(np.isfinite(v)):
                raise DataError(f"length source {self.name}: tail {k} needs a predictor of that name and {m} finite values")
        if self.samples is not None:
            if len(self.samples) != m:
                raise DataError(f"length source {self.name}: samples for {len(self.samples)} of {m} requests")
            count = np.array([len(s) for s in self.samples], dtype=np.int64)
            if count.min() < 1:
                raise DataError(f"length source {self.name}: a prompt with no sampled length")
            flat = np.concatenate([np.asarray(s, dtype=float) for s in self.samples])
            if not np.all(np.isfinite(flat)) or flat.min() < 0:
                raise DataError(f"length source {self.name}: sampled lengths must be finite and >= 0")
            self._flat = np.maximum(np.rint(flat), 1).astype(np.int64)
            self._start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
            self._count = count
            self._sum = np.add.reduceat(self._flat, self._start).astype(float)
            self.expected = self._sum / count
            if count.min() < 2:
                log.warning("length source %s: %d of %d prompts have a single sampled length; for their requests "
                            "the mean-oracle (leave-one-out mean) falls back to that sample and equals the "
                            "clairvoyant oracle", self.name, int((count < 2).sum()), m)

    @property
    def has_samples(self) -> bool:
        return self._flat is not None

    def draw(self, n: int, rng: np.random.Generator) -> Requests:
        """`n` requests: entries uniformly with replacement (a trace: its first `n` in order), then one
        sampled length each when the pool has samples. Without samples the random stream is the one the
        simulator used before samples existed (entries only)."""
        m = len(self.output)
        idx = rng.integers(0, m, n) if self.arrival is None else np.arange(min(n, m))
        if not self.has_samples:
            return Requests(idx, self.output[idx], self.prompt[idx], None)
        k = (rng.random(len(idx)) * self._count[idx]).astype(np.int64)  # [n] which sample, uniform
        own = self._flat[self._start[idx] + k]
        return Requests(idx, own, self.prompt[idx], self.loo_mean(idx, own))

    def loo_mean(self, idx: np.ndarray, own: np.ndarray) -> np.ndarray:
        """[n] the mean of entry idx[i]'s samples other than the one drawn (`own[i]`, as stored: rounded,
        >= 1); `own[i]` itself for an entry with a single sample. The mean-oracle's key."""
        count = self._count[idx]
        own = np.asarray(own, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            loo = (self._sum[idx] - own) / (count - 1)
        return np.where(count > 1, loo, own)


def random_keys(m: int, idx: np.ndarray, output: np.ndarray, seed: int) -> np.ndarray:
    """[n] the `random` predictor: each of the `m` pool entries gets a random quantile (fixed by `seed`, its
    own stream), read off the drawn requests' length distribution `output`; request i takes its entry's.
    Same scale as the lengths, no information about which request is long."""
    u = np.random.default_rng([int(seed), 23]).random(m)  # [m]
    return np.quantile(np.asarray(output, dtype=float), u[np.asarray(idx)])
