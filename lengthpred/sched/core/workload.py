"""Workloads: requests (arrival time, prompt tokens, output tokens, acceptance rate) and their arrivals."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile


@dataclass
class Workload:
    """Requests sorted by arrival; lengths in tokens. `accept` is each request's speculative acceptance rate;
    `accept_seq`, where acceptance was measured, each request's draft tokens accepted per step (step 0: its
    prefill step), which LAPS-SD reads for its early estimate (`lengthpred.sched.spec.acceptance`)."""

    arrival: np.ndarray  # [n] float seconds, nondecreasing
    prompt: np.ndarray  # [n] int tokens
    output: np.ndarray  # [n] int tokens >= 1
    accept: np.ndarray | None = None  # [n] float in [0, 1]
    accept_seq: list[np.ndarray] | None = None  # [n] ragged int: accepted draft tokens per step

    def __post_init__(self) -> None:
        self.arrival = np.asarray(self.arrival, dtype=float)
        self.prompt = np.asarray(self.prompt, dtype=np.int64)
        self.output = np.asarray(self.output, dtype=np.int64)
        n = len(self.output)
        if len(self.arrival) != n or len(self.prompt) != n:
            raise DataError(f"workload arrays differ in length: {len(self.arrival)}, {len(self.prompt)}, {n}")
        if n and (np.any(np.diff(self.arrival) < 0) or not np.all(np.isfinite(self.arrival))):
            raise DataError("workload arrival times must be finite and nondecreasing")
        if n and (self.output.min() < 1 or self.prompt.min() < 0):
            raise DataError("workload output lengths must be >= 1 token and prompt lengths >= 0")
        if self.accept is not None:
            self.accept = np.asarray(self.accept, dtype=float)
            if len(self.accept) != n or np.any((self.accept < 0) | (self.accept > 1)):
                raise DataError("workload acceptance rates must be one per request, in [0, 1]")
        if self.accept_seq is not None:
            if self.accept is None or len(self.accept_seq) != n:
                raise DataError("workload acceptance sequences need acceptance rates, one sequence per request")
            self.accept_seq = [np.asarray(x, dtype=np.int64) for x in self.accept_seq]
            if any(len(x) == 0 or x.min() < 0 for x in self.accept_seq):
                raise DataError("workload acceptance sequences must be non-empty counts >= 0")

    def __len__(self) -> int:
        return len(self.output)


def arrival_times(
    n: int, rate: float, *, process: str = "poisson", cv: float = 1.0, rng: np.random.Generator
) -> np.ndarray:
    """`n` arrival times at `rate` per second: Poisson, or bursty gamma inter-arrivals with coefficient of
    variation `cv` (> 1 is burstier than Poisson)."""
    if rate <= 0 or not math.isfinite(rate):
        raise ConfigError(f"arrival rate {rate} must be positive and finite")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    elif process == "gamma":
        if cv <= 0:
            raise ConfigError(f"gamma arrivals need cv > 0, got {cv}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    else:
        raise ConfigError(f"unknown arrival process {process!r}; valid: gamma, poisson")
    return np.cumsum(gaps)


def capacity(profile: HardwareProfile, prompt: np.ndarray, output: np.ndarray,
             accept: np.ndarray | None = None, speculative: bool = False, *, mean_steps: bool = False) -> float:
    """Requests/s the server sustains with its batch as full as batch size and KV memory allow.

    Full-batch steady state: B sequences each hold on average prompt + E[L²]/(2E[L]) tokens (the
    length-biased mean progress); every step makes B·r tokens (r tokens per step per request); a request
    costs L̄/(B·r) steps plus its prefill, with r the mean rate. `mean_steps` costs it E[L/r] steps instead
    (each request at its own rate): the same when rates are equal, and the right figure when they differ
    (measured acceptance: E[L]/E[r] understates the steps when slow requests are long).
    """
    p = float(np.mean(prompt))
    L = np.asarray(output, dtype=float)
    spec = speculative and accept is not None
    r = float(np.mean(profile.n_draft * accept + 1)) if spec else 1.0
    held = p + float(np.mean(L**2) / (2 * np.mean(L)))
    b_mem = profile.kv_blocks / (held / profile.block_size + 1)
    b = max(1.0, min(float(profile.max_batch), b_mem))
    step = profile.step_time(b, b * held, speculative)
    steps = float(np.mean(L / (profile.n_draft * accept + 1))) if spec and mean_steps else float(np.mean(L)) / r
    per_request = steps * step / b + p * profile.t_prefill_token
    return 1.0 / per_request


def synthetic_lengths(
    n: int, *, median: float = 200.0, sigma: float = 1.0, max_len: int = 4096, rng: np.random.Generator
) -> np.ndarray:
    """Lognormal output lengths in tokens, clipped to [1, max_len]."""
    x = np.exp(math.log(median) + sigma * rng.standard_normal(n))
    return np.clip(np.rint(x), 1, max_len).astype(np.int64)


def scale_to_rate(arrival: np.ndarray, rate: float) -> np.ndarray:
    """Arrival times (from 0) scaled by one constant so their mean rate, (n − 1)/span, is `rate` per second."""
    a = np.asarray(arrival, dtype=float)
    return a * (len(a) - 1) / max(a[-1], 1e-12) / rate


def noisy_prediction(y: np.ndarray, spearman: float, *, rng: np.random.Generator) -> np.ndarray:
    """Predictions whose Spearman with `y` is `spearman` in expectation (a Gaussian copula on log y).

    For a bivariate normal, Spearman ρs = (6/π)·asin(r/2), so the log-scale Pearson is r = 2·sin(π·ρs/6);
    the prediction keeps y's log mean and spread.
    """
    if not -1 <= spearman <= 1:
        raise ConfigError(f"spearman {spearman} must lie in [-1, 1]")
    r = 2 * math.sin(math.pi * spearman / 6)
    ly = np.log(np.asarray(y, dtype=float))
    mu, sd = float(ly.mean()), float(ly.std()) or 1.0
    z = (ly - mu) / sd
    zp = r * z + math.sqrt(max(0.0, 1 - r * r)) * rng.standard_normal(len(ly))
    return np.exp(mu + sd * zp)
