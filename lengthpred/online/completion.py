"""When does each streamed request's true length become known? Models of arrival and completion times.

Every model maps the stream's true lengths (tokens, arrival order) to `(arrival_s, done_s)`; the runner
reveals length i only at `done_s[i]`. A scheduler (e.g. `lengthpred.sched`) plugs in through
`CallableCompletion` with any function of that signature.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from lengthpred.errors import ConfigError


class InstantCompletion:
    """Request i arrives at t = i·interval_s and its length is known at once (the optimistic bound)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        arrival = np.arange(len(lengths), dtype=np.float64) * float(self.interval_s)
        return arrival, arrival.copy()


class ServingCompletion:
    """Poisson arrivals served first-come-first-served by `max_concurrency` decode slots.

    A request admitted at time s finishes at s + prefill_s + length / tokens_per_s (per-request decode
    rate of a batched server). Completions come back out of arrival order and late, as in serving.
    """

    def __init__(
        self,
        arrival_rate: float = 2.0,
        tokens_per_s: float = 20.0,
        max_concurrency: int = 8,
        prefill_s: float = 0.2,
        seed: int = 0,
    ) -> None:
        self.arrival_rate = arrival_rate
        self.tokens_per_s = tokens_per_s
        self.max_concurrency = max_concurrency
        self.prefill_s = prefill_s
        self.seed = seed

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.arrival_rate <= 0 or self.tokens_per_s <= 0 or self.max_concurrency < 1 or self.prefill_s < 0:
            raise ConfigError(
                "completion model: arrival_rate > 0, tokens_per_s > 0, max_concurrency >= 1, prefill_s >= 0"
            )
        rng = np.random.default_rng(self.seed)
        arrival = np.cumsum(rng.exponential(1.0 / float(self.arrival_rate), size=len(lengths)))
        service = float(self.prefill_s) + np.asarray(lengths, dtype=np.float64) / float(self.tokens_per_s)
        free: list[float] = [0.0] * int(self.max_concurrency)  # heap of slot-free times
        done = np.empty(len(lengths))
        for i, (a, s) in enumerate(zip(arrival, service, strict=True)):
            start = max(a, heapq.heappop(free))
            done[i] = start + s
            heapq.heappush(free, done[i])
        return arrival, done


class CallableCompletion:
    """Any `fn(lengths) -> (arrival_s, done_s)`, e.g. a wrapper around the scheduling simulator."""

    def __init__(self, fn: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> None:
        self.fn = fn

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        arrival, done = (np.asarray(a, dtype=np.float64) for a in self.fn(lengths))
        if arrival.shape != (len(lengths),) or done.shape != arrival.shape or (done < arrival).any():
            raise ConfigError(
                "completion function must return arrival/done arrays, one per request, done >= arrival"
            )
        return arrival, done


class SchedulerCompletion:
    """Completion times from the scheduling simulator (`lengthpred.sched.simulate`): continuous batching on
    a hardware profile under a policy, Poisson arrivals at `arrival_rate`, `prompt_tokens` per prompt.

    A request the simulator never finishes (rejected, or past its horizon) is never revealed.
    """

    def __init__(
        self,
        hardware: str = "cpu-smollm2-135m",
        policy: str = "fcfs",
        arrival_rate: float = 0.5,
        prompt_tokens: int = 256,
        seed: int = 0,
    ) -> None:
        self.hardware = hardware
        self.policy = policy
        self.arrival_rate = arrival_rate
        self.prompt_tokens = prompt_tokens
        self.seed = seed

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import warnings

        from lengthpred.sched.hardware import get_profile
        from lengthpred.sched.policies import make_policy
        from lengthpred.sched.simulator import simulate
        from lengthpred.sched.workload import Workload, arrival_times

        rng = np.random.default_rng(self.seed)
        n = len(lengths)
        out = np.maximum(np.rint(np.asarray(lengths, dtype=np.float64)), 1).astype(np.int64)
        wl = Workload(
            arrival_times(n, float(self.arrival_rate), rng=rng), np.full(n, int(self.prompt_tokens)), out
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an overloaded server is a legitimate (late-completion) stream
            res = simulate(wl, get_profile(self.hardware), make_policy(self.policy), seed=self.seed)
        done = np.where(np.isfinite(res.finish), res.finish, np.inf)
        return res.arrival, done
