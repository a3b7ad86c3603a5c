"""Scheduling policies: each gives every request a priority key (lower runs first).

The simulator keeps the waiting queue as a heap on ``waiting_key`` (fixed while a request waits) and,
for preemptive policies, preempts the running request with the largest ``running_key`` when a waiting
one has a strictly smaller key and cannot otherwise get in. Keys depend on the request's progress:
``steps`` (decode steps it has been served) and ``tokens`` (tokens it has generated). A policy whose
waiting keys change with time at rates of their own (``ages``, e.g. ``sjf-aging``) gives ``waiting_key_at``;
the simulator re-keys the waiting queue with it before each admission. Policies with keys
that change in steps other than through progress ask for re-checks every ``tick`` steps.

A policy whose running keys move by a fixed slope per global step within groups (or by at most that:
``bounds``) says so by setting ``slopes`` in ``bind`` and implementing ``segment``; the simulator then
keeps the running batch in lazy heaps (`lengthpred.sched.core.runset`). Otherwise (``slopes = None``) it
recomputes ``running_keys`` over the batch. ``running_key`` and ``running_keys`` must agree to the last
bit: both paths must pick the same request.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError
from lengthpred.registry import Registry
from lengthpred.sched.core.early import early_estimates
from lengthpred.sched.core.predictors import ArrayPredictor, OraclePredictor

POLICIES: Registry[Any] = Registry("policy")
_LEVEL = 1e9  # separates MLFQ levels in a float key (arrival times stay far below it)
AGING_WEIGHT = 300.0  # sjf-aging's weight, tokens² per second (conf/sched/default.yaml says how it was chosen)


@dataclass
class SchedContext:
    """What the simulator shares with its policy; `pred` is filled as requests arrive."""

    arrival: np.ndarray
    output: np.ndarray
    pred: np.ndarray
    predictor: Any
    rate: np.ndarray  # tokens per step per request (1, or n·A+1 with speculative decoding)
    accept: np.ndarray | None
    profile: Any
    speculative: bool
    rng: np.random.Generator
    accept_seq: list[np.ndarray] | None = None  # measured accepted draft tokens per step, per request (or None)


class Policy:
    preemptive: bool = False
    tick: int | None = None
    needs_prediction: bool = False
    name: str = "policy"
    slopes: tuple[float, ...] | None = None  # key change per global step in each group; set by `bind`
    bounds: tuple[bool, ...] | None = None  # per group: the slope only bounds the change from above
    ages: bool = False  # waiting keys change with time at rates of their own: re-keyed before each admission

    def bind(self, ctx: SchedContext) -> None:
        self.ctx = ctx

    def waiting_key_at(self, i: int, t: float) -> float:
        """A waiting request's key at time t (policies that `ages`)."""
        raise NotImplementedError

    def segment(self, i: int, steps: int, tokens: float) -> tuple[int, float, int]:
        """For a running request: its group, its `running_key` now, and in how many steps it next changes
        group (0: never). Within a group a key changes by exactly the group's slope per step, or by at most
        that where `bounds` says so. Only called when `slopes` is set; this default: one constant group."""
        return 0, self.running_key(i, steps, tokens), 0

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        raise NotImplementedError

    def running_key(self, i: int, steps: int, tokens: float) -> float:
        return self.waiting_key(i, steps, tokens)

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Keys of many running requests at once; must agree with `running_key` (override to vectorise)."""
        return np.array([self.running_key(int(i), int(s), float(t)) for i, s, t in zip(idx, steps, tokens, strict=True)])


@POLICIES.register("fcfs")
class FCFS(Policy):
    """First come, first served (vLLM's default); under memory pressure the latest arrival is preempted."""

    name = "fcfs"

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        self.slopes = (0.0,)
        self._arrival = ctx.arrival.tolist()

    def running_key(self, i: int, steps: int, tokens: float) -> float:
        return self._arrival[i]

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        return float(self.ctx.arrival[i])

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self.ctx.arrival[idx]


class _LengthPolicy(Policy):
    def __init__(self, *, oracle: bool = False) -> None:
        self.oracle = oracle
        self.needs_prediction = not oracle

    def _total(self, i: int) -> float:
        return float(self.ctx.output[i]) if self.oracle else float(self.ctx.pred[i])

    def _totals(self, idx: np.ndarray) -> np.ndarray:
        return (self.ctx.output if self.oracle else self.ctx.pred)[idx].astype(float)


@POLICIES.register("sjf")
class SJF(_LengthPolicy):
    """Shortest (predicted) job first, non-preemptive."""

    name = "sjf"

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        self.slopes = (0.0,)

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        return self._total(i)

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self._totals(idx)


@POLICIES.register("rank")
class Rank(SJF):
    """Order by a ranking score (LTR): lower score runs first; the score need not be in tokens."""

    name = "rank"


@POLICIES.register("srpt")
class SRPT(_LengthPolicy):
    """Shortest (predicted) remaining processing time first, preemptive.

    Remaining = predicted total − generated, or the predictor's own `remaining(i, generated)` where it has
    one (refinement, e.g. when a request outlives its prediction).
    """

    name = "srpt"
    preemptive = True

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        self._outlive = False  # keys fall with progress, then rise once a request outlives its prediction
        self.slopes = self.bounds = None
        pr = ctx.predictor
        rem = getattr(getattr(pr, "remaining", None), "__func__", getattr(pr, "remaining", None))
        many = getattr(getattr(pr, "remaining_many", None), "__func__", None)
        self._total = None  # totals as Python floats where they are fixed in advance (the fast running_key)
        if self.oracle:
            self.slopes, self._total = (-1.0,), ctx.output.astype(float).tolist()
        elif rem is None:
            self.slopes = (-1.0,)
        elif (rem, many) == (OraclePredictor.remaining, OraclePredictor.remaining_many):
            self.slopes, self._total = (-1.0,), pr.values.tolist()
        elif (rem, many) == (ArrayPredictor.remaining, ArrayPredictor.remaining_many):
            self.slopes, self._outlive, self._total = (-1.0, 1.0), True, pr.values.tolist()
        if ctx.speculative and self.slopes is not None:
            # tokens per step differ between requests: the slopes bound the change, (+1 where a request
            # outlives its prediction and its key jumps from p − tokens to tokens − p + 1)
            self._rate = ctx.rate.tolist()
            self.slopes = (-float(ctx.rate.min()), float(ctx.rate.max()) + 1.0)[: len(self.slopes)]
            self.bounds = (True,) * len(self.slopes)

    def segment(self, i: int, steps: int, tokens: float) -> tuple[int, float, int]:
        key = self.waiting_key(i, steps, tokens)
        if not self._outlive:
            return 0, key, 0
        p = self._total[i]
        if tokens >= p:
            return 1, key, 0
        if self.bounds:  # leave the falling group at least a step before tokens can reach p
            d = math.floor((p - tokens) / self._rate[i]) - 1
            return (0, key, d) if d >= 1 else (1, key, 0)
        d = max(1, math.ceil(p - tokens))  # one token per step: the first step with tokens >= p
        while tokens + d < p:
            d += 1
        while d > 1 and tokens + d - 1 >= p:
            d -= 1
        return 0, key, d

    _total: list[float] | None = None
    _outlive = False

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        if self._total is not None:  # the same float operations as below, without the lookups
            p = self._total[i]
            return tokens - p + 1.0 if self._outlive and tokens >= p else p - tokens
        if self.oracle:
            return float(self.ctx.output[i]) - tokens
        rem = getattr(self.ctx.predictor, "remaining", None)
        return float(rem(i, tokens)) if rem is not None else float(self.ctx.pred[i]) - tokens

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        if self.oracle:
            return self.ctx.output[idx] - tokens
        rem = getattr(self.ctx.predictor, "remaining_many", None)
        if rem is not None:
            return rem(idx, tokens)
        if getattr(self.ctx.predictor, "remaining", None) is not None:
            return super().running_keys(idx, steps, tokens)
        return self.ctx.pred[idx] - tokens


@POLICIES.register("sjf-aging")
class AgingSJF(SJF):
    """SJF with aging relative to the predicted length, against starvation (EWSJF-style; vLLM's scheduling
    RFCs): a waiting request's key is p − weight · waited / p (p its predicted length in tokens, at least 1;
    waited in seconds; weight in tokens² per second), so a request climbs the queue by the time it waited
    measured against how long it is expected to run: short requests age fast, and a long one's key falls
    without bound, so no request waits for ever. Non-preemptive; the waiting queue is re-keyed before every
    admission (`ages`), the order a priority queue re-sorted at each step would give."""

    name = "sjf-aging"
    ages = True

    def __init__(self, *, weight: float = AGING_WEIGHT, oracle: bool = False) -> None:
        if weight < 0:
            raise ConfigError(f"sjf-aging weight={weight} must be >= 0")
        super().__init__(oracle=oracle)
        self.weight = float(weight)

    def waiting_key_at(self, i: int, t: float) -> float:
        p = max(self._total(i), 1.0)
        return p - self.weight * (t - float(self.ctx.arrival[i])) / p


def _checkpointed(policy: Policy, ctx: SchedContext) -> None:
    """A refined policy reads a predictor with checkpoints (`core.refine.RefinedPredictor`) and re-checks its
    order at every checkpoint (`tick`), where keys may jump."""
    pr = ctx.predictor
    if not hasattr(pr, "remaining_many") or not hasattr(pr, "every"):
        raise ConfigError(f"policy {policy.name!r} needs a predictor with checkpoints "
                          "(lengthpred.sched.core.refine.RefinedPredictor)")
    policy.tick = int(pr.every)


@POLICIES.register("refined-srpt")
class RefinedSRPT(SRPT):
    """SRPT on a remaining-length prediction refreshed at checkpoints (TRAIL): the key is the latest
    checkpoint's prediction less the tokens generated since; with `max_preemptions` TRAIL's limited preemption."""

    name = "refined-srpt"

    def __init__(self) -> None:
        super().__init__(oracle=False)

    def bind(self, ctx: SchedContext) -> None:
        _checkpointed(self, ctx)
        super().bind(ctx)  # a predictor with its own `remaining`: keys over the whole batch (SlotRunSet)


@POLICIES.register("refined-sjf")
class RefinedSJF(_LengthPolicy):
    """SJF whose key, the predicted total length, is refreshed at every checkpoint (tokens generated + the
    predicted remaining length there). Preemptive at checkpoints: a running request whose refreshed key turns
    worse than a waiting one's may be evicted (`max_preemptions` caps it; 0: only memory pressure evicts,
    the victim chosen on refreshed keys)."""

    name = "refined-sjf"
    preemptive = True

    def __init__(self) -> None:
        super().__init__(oracle=False)

    def bind(self, ctx: SchedContext) -> None:
        _checkpointed(self, ctx)
        super().bind(ctx)

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        return self.ctx.predictor.total(i, tokens)

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self.ctx.predictor.total_many(idx, tokens)


POLICIES.register("oracle-sjf")(functools.partial(SJF, oracle=True))
POLICIES.register("oracle-sjf-aging")(functools.partial(AgingSJF, oracle=True))
POLICIES.register("oracle-srpt")(functools.partial(SRPT, oracle=True))


def _level(steps: float, quantum: int, n_levels: int) -> int:
    """Queue level after `steps` of service with quanta q, 2q, 4q, …: boundaries at q·(2^k − 1)."""
    return min(n_levels - 1, int(math.log2(steps / quantum + 1.0)))


def _level_start(level: int, quantum: int) -> int:
    """The fewest steps of service that reach `level` (below the last level): q·(2^level − 1)."""
    return quantum * ((1 << level) - 1)


@POLICIES.register("mlfq")
class MLFQ(Policy):
    """Multi-level feedback queue (least attained service with geometric quanta), FCFS within a level."""

    name = "mlfq"
    preemptive = True

    def __init__(self, *, quantum: int = 16, n_levels: int = 8) -> None:
        if quantum < 1 or n_levels < 1:
            raise ConfigError(f"mlfq needs quantum >= 1 and n_levels >= 1, got {quantum}, {n_levels}")
        self.quantum, self.n_levels = quantum, n_levels
        self.tick = quantum

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        self.slopes = (0.0,) * self.n_levels  # one group per level; steps, not tokens, set the level
        self._starts = [_level_start(k, self.quantum) for k in range(self.n_levels)]
        self._arrival = ctx.arrival.tolist()

    def segment(self, i: int, steps: int, tokens: float) -> tuple[int, float, int]:
        lvl = bisect.bisect_right(self._starts, steps) - 1
        nxt = 0 if lvl == self.n_levels - 1 else self._starts[lvl + 1] - steps
        return lvl, lvl * _LEVEL + self._arrival[i], nxt

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        # _level(steps, …) found from the level boundaries: the same level, without the log
        return (bisect.bisect_right(self._starts, steps) - 1) * _LEVEL + self._arrival[i]

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        lvl = np.minimum(self.n_levels - 1, np.floor(np.log2(steps / self.quantum + 1.0)))
        return lvl * _LEVEL + self.ctx.arrival[idx]


POLICIES.register("las")(MLFQ)


@POLICIES.register("laps-sd")
class LAPSSD(MLFQ):
    """LAPS-SD: least-attained-service queues until a request's acceptance rate is stable ("perceptible"),
    then shortest estimated remaining time T = (n·L·T_draft + L·T_target)/(n·Â + 1).

    Stability tests (the paper's is not public): ``stability="steps"`` — after `min_steps` steps;
    ``stability="stderr"`` — once the binomial standard error of Â, √(A(1−A)/(n·k)), is below `tol`.
    Â is the true rate plus that sampling error, drawn once per request; with measured acceptance sequences
    (`SchedContext.accept_seq`) Â is instead the acceptance of the request's own first decode steps and the
    stderr test runs on that running estimate (`core.early.early_estimates`). ``perceptible_first`` puts
    perceptible requests ahead of the LAS queues (default: young requests first, as LAS does).
    """

    name = "laps-sd"

    def __init__(self, *, quantum: int = 16, n_levels: int = 8, stability: str = "steps",
                 min_steps: int = 8, tol: float = 0.05, perceptible_first: bool = False,
                 oracle: bool = False) -> None:
        super().__init__(quantum=quantum, n_levels=n_levels)
        if stability not in ("steps", "stderr"):
            raise ConfigError(f"laps-sd stability {stability!r}; valid: steps, stderr")
        self.stability, self.min_steps, self.tol = stability, min_steps, tol
        self.perceptible_first, self.oracle = perceptible_first, oracle
        self.needs_prediction = not oracle

    def bind(self, ctx: SchedContext) -> None:
        super().bind(ctx)
        n = len(ctx.output)
        a = ctx.accept if ctx.accept is not None else np.full(n, 0.7)
        nd = ctx.profile.n_draft
        if ctx.accept_seq is not None:  # measured: Â from the request's own first steps, as the server sees them
            self.k_stable, self.a_hat = early_estimates(ctx.accept_seq, nd, stability=self.stability,
                                                        min_steps=self.min_steps, tol=self.tol)
        else:
            if self.stability == "steps":
                k = np.full(n, float(self.min_steps))
            else:
                k = np.ceil(a * (1 - a) / (nd * self.tol**2))
            self.k_stable = np.maximum(k, 1).astype(np.int64)
            se = np.sqrt(a * (1 - a) / (nd * self.k_stable))
            self.a_hat = np.clip(a + se * ctx.rng.standard_normal(n), 0.0, 1.0)
        prof = ctx.profile
        self.t_target = prof.step_time(1)
        self.t_draft = prof.t_draft
        # groups: the LAS levels (exact, constant keys) until perceptible; then keys fall by each request's
        # own rate·(n·T_draft + T_target)/(n·Â + 1) per step, which the least of them bounds; last, the
        # floor L = 1 (keys never rise)
        nd, nl = prof.n_draft, self.n_levels
        fall = ctx.rate * (nd * self.t_draft + self.t_target) / (nd * self.a_hat + 1)
        self.slopes = (0.0,) * nl + (-float(fall.min()) * (1 - 1e-9), 0.0)
        self.bounds = (False,) * nl + (True, True)
        self._rate, self._k_stable, self._a_hat = ctx.rate.tolist(), self.k_stable.tolist(), self.a_hat.tolist()
        self._out = ctx.output.astype(float).tolist()

    def segment(self, i: int, steps: int, tokens: float) -> tuple[int, float, int]:
        key, nl = self.waiting_key(i, steps, tokens), self.n_levels
        ks = self._k_stable[i]
        if steps < ks:
            lvl = bisect.bisect_right(self._starts, steps) - 1
            nxt = ks - steps if lvl == nl - 1 else min(ks, self._starts[lvl + 1]) - steps
            return lvl, key, nxt
        total = self._out[i] if self.oracle else float(self.ctx.pred[i])
        d = math.floor((total - tokens - 1.0) / self._rate[i]) - 1  # a step before L could reach its floor
        return (nl, key, d) if d >= 1 else (nl + 1, key, 0)

    def running_keys(self, idx: np.ndarray, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        # the same float operations, in the same order, as waiting_key
        lvl = np.minimum(self.n_levels - 1, np.floor(np.log2(steps / self.quantum + 1.0)))
        young = lvl * _LEVEL + self.ctx.arrival[idx]
        total = (self.ctx.output if self.oracle else self.ctx.pred)[idx].astype(float)
        L = np.maximum(total - tokens, 1.0)
        n = self.ctx.profile.n_draft
        t = (n * L * self.t_draft + L * self.t_target) / (n * self.a_hat[idx] + 1)
        if self.perceptible_first:
            young, t = young + 4 * _LEVEL * self.n_levels, t + 0.0
        else:
            young, t = young + 0.0, t + 2 * _LEVEL * self.n_levels
        return np.where(steps < self.k_stable[idx], young, t)

    def waiting_key(self, i: int, steps: int, tokens: float) -> float:
        if steps < self._k_stable[i]:
            lvl = (bisect.bisect_right(self._starts, steps) - 1) * _LEVEL + self._arrival[i]
            return lvl + (4 * _LEVEL * self.n_levels if self.perceptible_first else 0.0)
        total = self._out[i] if self.oracle else float(self.ctx.pred[i])
        L = max(total - tokens, 1.0)
        n = self.ctx.profile.n_draft
        t = (n * L * self.t_draft + L * self.t_target) / (n * self._a_hat[i] + 1)
        return t + (0.0 if self.perceptible_first else 2 * _LEVEL * self.n_levels)


def make_policy(name: str, **kwargs: Any) -> Policy:
    """A fresh policy from the registry; `kwargs` are its constructor keywords (the YAML keys)."""
    try:
        return POLICIES.get(name)(**kwargs)
    except TypeError as e:
        raise ConfigError(f"policy {name!r}: {e}") from None
