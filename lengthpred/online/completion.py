"""When does each streamed request's true length become known? Models of arrival and completion times.

Every model maps the stream's served lengths (tokens, arrival order) to `(arrival_s, done_s)`; the runner
reveals length i only at `done_s[i]`. A scheduler plugs in through `CallableCompletion` with any function
of that signature.

Load, not a rate: the server models take the offered `load` as a fraction of their capacity for the
stream's own length mix (as `lengthpred.sched` does), so a stream is never silently overloaded. An
overloaded server reveals almost no labels while the stream lasts (AUDIT.md "Overloaded or idle
servers"): the old default offered 2 req/s against ≈0.6 req/s of capacity, and on average a prediction
had seen ≈4 labels. After `schedule`, `info_` holds the load, arrival rate and capacity (req/s) used.
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload, arrival_times, capacity


def _arrival_rate(load: float | None, arrival_rate: float | None, capacity: float) -> tuple[float, float]:
    """(arrival rate, offered load): exactly one of `load` (fraction of capacity) or `arrival_rate` (req/s)."""
    if (load is None) == (arrival_rate is None):
        raise ConfigError(
            f"completion model: set exactly one of load (fraction of capacity) or arrival_rate (req/s); "
            f"got load={load!r}, arrival_rate={arrival_rate!r}"
        )
    if load is not None:
        if not float(load) > 0:
            raise ConfigError(f"completion model: load={load!r} must be > 0")
        return float(load) * capacity, float(load)
    if not float(arrival_rate) > 0:
        raise ConfigError(f"completion model: arrival_rate={arrival_rate!r} must be > 0")
    return float(arrival_rate), float(arrival_rate) / capacity


class InstantCompletion:
    """Request i arrives at t = i·interval_s and its length is known at once (the optimistic bound)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        arrival = np.arange(len(lengths), dtype=np.float64) * float(self.interval_s)
        self.info_: dict[str, Any] = {"model": "instant", "load": 0.0}
        return arrival, arrival.copy()


class ServingCompletion:
    """An abstract FCFS server: Poisson arrivals, `max_concurrency` decode slots, each at `tokens_per_s`.

    A request admitted at time s finishes at s + prefill_s + length / tokens_per_s. It names no hardware:
    its capacity is its own, `max_concurrency / mean(prefill_s + length / tokens_per_s)` req/s. For the
    serving model's real server use `SchedulerCompletion` (a calibrated hardware profile).
    """

    def __init__(
        self,
        load: float | None = 0.7,
        tokens_per_s: float = 20.0,
        max_concurrency: int = 8,
        prefill_s: float = 0.2,
        arrival_rate: float | None = None,
        seed: int = 0,
    ) -> None:
        self.load = load
        self.tokens_per_s = tokens_per_s
        self.max_concurrency = max_concurrency
        self.prefill_s = prefill_s
        self.arrival_rate = arrival_rate
        self.seed = seed

    def _validate(self) -> None:
        if self.tokens_per_s <= 0 or self.max_concurrency < 1 or self.prefill_s < 0:
            raise ConfigError("completion model: tokens_per_s > 0, max_concurrency >= 1, prefill_s >= 0")

    def capacity(self, lengths: np.ndarray) -> float:
        """Requests/s the slots sustain for this length mix (all slots busy)."""
        self._validate()
        service = float(self.prefill_s) + float(np.mean(lengths)) / float(self.tokens_per_s)
        return int(self.max_concurrency) / service

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cap = self.capacity(lengths)
        rate, load = _arrival_rate(self.load, self.arrival_rate, cap)
        rng = np.random.default_rng(self.seed)
        arrival = np.cumsum(rng.exponential(1.0 / rate, size=len(lengths)))
        service = float(self.prefill_s) + np.asarray(lengths, dtype=np.float64) / float(self.tokens_per_s)
        free: list[float] = [0.0] * int(self.max_concurrency)  # heap of slot-free times
        done = np.empty(len(lengths))
        for i, (a, s) in enumerate(zip(arrival, service, strict=True)):
            start = max(a, heapq.heappop(free))
            done[i] = start + s
            heapq.heappush(free, done[i])
        self.info_ = {"model": "serving", "load": load, "arrival_rate": rate, "capacity_req_s": cap}
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
        self.info_ = {"model": "callable"}
        return arrival, done


class SchedulerCompletion:
    """Completion times from the scheduling simulator (`lengthpred.sched.simulate`): continuous batching on
    the named hardware profile under a policy, Poisson arrivals at `load` × the profile's capacity for the
    stream's lengths (`lengthpred.sched.core.workload.capacity`), `prompt_tokens` per prompt.

    A request the simulator never finishes (rejected, or past its horizon) is never revealed.
    """

    def __init__(
        self,
        hardware: str = "cpu-smollm2-135m",
        policy: str = "fcfs",
        load: float | None = 0.7,
        prompt_tokens: int = 256,
        arrival_rate: float | None = None,
        seed: int = 0,
    ) -> None:
        self.hardware = hardware
        self.policy = policy
        self.load = load
        self.prompt_tokens = prompt_tokens
        self.arrival_rate = arrival_rate
        self.seed = seed

    def _workload_arrays(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(lengths)
        out = np.maximum(np.rint(np.asarray(lengths, dtype=np.float64)), 1).astype(np.int64)
        return np.full(n, int(self.prompt_tokens)), out

    def capacity(self, lengths: np.ndarray) -> float:
        """Requests/s the profile sustains for this length mix (`lengthpred.sched.core.workload.capacity`)."""
        prompt, out = self._workload_arrays(lengths)
        return float(capacity(get_profile(self.hardware), prompt, out))

    def schedule(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cap = self.capacity(lengths)
        rate, load = _arrival_rate(self.load, self.arrival_rate, cap)
        rng = np.random.default_rng(self.seed)
        prompt, out = self._workload_arrays(lengths)
        wl = Workload(arrival_times(len(out), rate, rng=rng), prompt, out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an overloaded server is a legitimate (late-completion) stream
            res = simulate(wl, get_profile(self.hardware), make_policy(self.policy), seed=self.seed)
        done = np.where(np.isfinite(res.finish), res.finish, np.inf)
        self.info_ = {
            "model": f"sched:{self.hardware}:{self.policy}",
            "load": load,
            "arrival_rate": rate,
            "capacity_req_s": cap,
        }
        return res.arrival, done
