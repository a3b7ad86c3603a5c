"""Discrete-event simulator of an LLM server with continuous batching, advancing in event jumps.

Between events (an arrival it must react to, a completion, a KV-memory limit, a policy tick, the
horizon) the running batch is fixed and every running request gains one decode step per step, so the
simulator jumps straight to the next event: the step time grows linearly with the KV context
(t_base + t_seq·B + t_ctx·C, C rising by the batch's tokens per step), so the time of k steps and the
number of steps before a given time are closed forms. Requests progress in "global steps": a request
admitted at global step G0 with s0 steps done has s0 + (G − G0) done at G, so completion order is a heap.

Conventions: a request admitted at a step boundary is prefilled in the next step, which also makes its
first token (TTFT = end of that step); it needs ⌈L / r⌉ steps in all (r = 1 token per step, or n·A + 1
with speculative decoding). KV use of a request is counted as context/block_size + 1 blocks (its last
block partly full), which keeps the memory event a closed form. Admission is strict priority (the top
of the queue blocks the rest), keeps `watermark` of memory free (vLLM's watermark), and fills at most the
token budget with prefill (one prompt always fits). When memory runs out, the running request with the
worst key is preempted (recompute: its context is prefilled again on re-admission; swap: moved out and
back at t_swap_token per token). A request that could not fit in KV memory even alone is rejected at
arrival and counted, never retried. The running batch and its worst key live in `runset` (lazy heaps).

`prefill_first` models a predictor that reads the engine's own prefill (LEAP; `lengthpred.serve`, predictor
source `engine`): before its prediction exists a request can only be ordered by arrival, so it first runs as
a one-token prefill request ahead of every decode waiting for a slot (FCFS among prefills); its prediction
exists when that step ends, and its decode then waits at the policy's key for a slot of its own. A decode
admitted at that same boundary keeps the slot and the KV it has (no cost); one admitted later re-uses the
prompt's KV through prefix caching, its admission prefilling only what the full KV blocks of the prompt do
not hold (P + 1 − block_size·⌊P / block_size⌋ tokens).
"""

from __future__ import annotations

import heapq
import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import Policy, SchedContext
from lengthpred.sched.core.predictors import ArrayPredictor, OraclePredictor, Predictor
from lengthpred.sched.core.runset import make_runset
from lengthpred.sched.core.workload import Workload, capacity

log = logging.getLogger("lengthpred.sched")


class OverloadWarning(UserWarning):
    """Offered load at or above the server's capacity: queues grow without bound."""


@dataclass
class SimResult:
    """Per-request outcomes (NaN where a request never got that far) and run-level counters."""

    arrival: np.ndarray
    output: np.ndarray
    first_admit: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    n_preempt: np.ndarray
    rejected: np.ndarray  # bool
    end_time: float
    n_events: int
    n_steps: int
    recompute_tokens: int = 0  # prompt + generated tokens prefilled again after recompute preemptions
    preempt_seconds: float = 0.0  # server time spent re-prefilling (recompute) or swapping KV (swap)

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.finish)


def simulate(
    workload: Workload,
    profile: HardwareProfile,
    policy: Policy,
    predictor: Predictor | np.ndarray | None = None,
    *,
    preemption: str = "recompute",
    speculative: bool = False,
    predictor_cost: float = 0.0,
    predictor_mode: str = "sync",
    aging: float = 0.0,
    max_preemptions: int | None = 2,
    horizon: float | None = None,
    watermark: float = 0.01,
    seed: int = 0,
    slowdown: Sequence[tuple[float, float, float]] = (),
    prefill_first: bool = False,
) -> SimResult:
    """Serve `workload` on `profile` under `policy`; `predictor` gives lengths (array aligned with requests,
    or a `Predictor`). `aging` (key units per second waited) lowers a waiting request's key as it waits,
    a guard against starvation. `max_preemptions` caps how often a preemptive policy may evict one request
    (TRAIL's limited preemption; None: no cap): a running request at its cap is not evicted for a better key,
    and nothing else is evicted in its place (the waiting request waits); memory pressure may still evict it. `predictor_cost` (s per request) adds to its prefill step (`sync`) or only
    what the prefill does not hide (`async`). `horizon` (s) stops the run; default: run until all finish,
    or stop at the last arrival when the offered load is at or above capacity. `slowdown`: sorted, disjoint
    intervals (t0, t1, factor) in which every step takes `factor` times as long (a CPU the server shares
    with other work, e.g. a predictor's prefill); a jump stops at each interval's edges. `prefill_first`:
    the prediction comes from the request's own prefill step (the module docstring); an online predictor is
    asked when that step ends, not at arrival."""
    if preemption not in ("recompute", "swap"):
        raise ConfigError(f"preemption={preemption!r}; valid: recompute, swap")
    if predictor_mode not in ("sync", "async"):
        raise ConfigError(f"predictor_mode={predictor_mode!r}; valid: sync, async")
    if not 0 <= watermark < 1:
        raise ConfigError(f"watermark={watermark} must lie in [0, 1)")
    slow = [(float(a), float(b), float(f)) for a, b, f in slowdown]
    if any(b < a or f <= 0 for a, b, f in slow) or any(slow[i][1] > slow[i + 1][0] for i in range(len(slow) - 1)):
        raise ConfigError("slowdown intervals must be sorted, disjoint (t0 <= t1) and have a factor > 0")
    n = len(workload)
    if prefill_first and (policy.preemptive or speculative or getattr(policy, "ages", False)):
        raise ConfigError(f"prefill_first models a non-preemptive engine without speculative decoding or aging "
                          f"keys; policy {policy.name!r}{' with speculative decoding' if speculative else ''} is not one")
    if speculative and workload.accept is None:
        raise DataError("speculative decoding needs per-request acceptance rates (workload.accept)")
    if predictor is None:
        predictor = OraclePredictor(workload.output) if not policy.needs_prediction else None
        if predictor is None:
            raise ConfigError(f"policy {policy.name!r} needs a predictor")
    elif not isinstance(predictor, Predictor):
        predictor = ArrayPredictor(np.asarray(predictor, dtype=float))
    static = isinstance(predictor, ArrayPredictor)
    if static and len(predictor.values) != n:
        raise DataError(f"{len(predictor.values)} predictions for {n} requests")

    horizon = _horizon(workload, profile, speculative, horizon)
    rng = np.random.default_rng(seed)
    rate_a = (profile.n_draft * workload.accept + 1.0) if speculative else np.ones(n)
    work_a = np.ceil(workload.output / rate_a - 1e-9).astype(np.int64) if speculative else workload.output
    pred_a = predictor.values.copy() if static else np.zeros(n)
    ctx = SchedContext(workload.arrival, workload.output, pred_a, predictor, rate_a, workload.accept,
                       profile, speculative, rng, workload.accept_seq if speculative else None)
    policy.bind(ctx)

    # hot-loop state in plain Python (faster than numpy scalars)
    arr, P, work, rate = workload.arrival.tolist(), workload.prompt.tolist(), work_a.tolist(), rate_a.tolist()
    Lout = workload.output.tolist()
    pred = pred_a  # policies read ctx.pred; online predictions are written into it at arrival
    bs, M = profile.block_size, profile.kv_blocks
    m_cap = M * (1.0 - watermark)
    t_base = profile.t_base + (profile.n_draft * profile.t_draft if speculative else 0.0)
    t_seq, t_ctx, t_pf, t_sw = profile.t_seq, profile.t_ctx, profile.t_prefill_token, profile.t_swap_token
    max_batch = profile.max_batch
    decode_tokens = profile.n_draft + 1 if speculative else 1
    budget = profile.token_budget
    swap = preemption == "swap"
    preemptive, tick = policy.preemptive, policy.tick
    wkey = policy.waiting_key
    ages, key_at = policy.ages, policy.waiting_key_at
    on_complete = None if static else predictor.on_complete
    predict = None if static else predictor.predict

    steps0, tok0, G0, ver, npre = [0] * n, [0.0] * n, [0] * n, [0] * n, [0] * n
    limit = math.inf if max_preemptions is None else max_preemptions
    staged = [prefill_first] * n  # still to run its prefill-only first phase (prefill_first)
    resumed = [-1] * n  # the boundary its prefill phase ended at while its decode phase waits, else -1
    running = make_runset(policy, (G0, steps0, tok0, rate, npre), arr, aging, limit, max_batch)
    add, remove, worst = running.add, running.remove, running.worst
    nan = math.nan
    first_admit, first_tok, finish = [nan] * n, [nan] * n, [nan] * n
    rejected = [False] * n
    waiting: list[tuple[float, int, int]] = []
    comp: list[tuple[int, int, int]] = []
    t, G, S, R, B, extra = 0.0, 0, 0.0, 0.0, 0, 0.0
    n_recompute, t_preempt = 0, 0.0
    ptr, seq, n_events, n_steps = 0, 0, 0, 0
    si = 0  # the first slowdown interval not yet over
    new_admits: list[int] = []

    def preempt(j: int) -> None:
        nonlocal S, R, B, extra, seq, t_preempt
        d = G - G0[j]
        steps0[j] += d
        tok0[j] += rate[j] * d
        remove(j)
        B -= 1
        R -= rate[j]
        S -= P[j] + tok0[j] - rate[j] * G
        ver[j] += 1
        npre[j] += 1
        if swap:
            extra += t_sw * (P[j] + tok0[j])
            t_preempt += t_sw * (P[j] + tok0[j])
        k = -math.inf if staged[j] else wkey(j, steps0[j], tok0[j]) + aging * arr[j]
        heapq.heappush(waiting, (k, seq, j))
        seq += 1

    while True:
        n_events += 1
        # completions at this boundary
        while comp and comp[0][0] <= G:
            _, i, v = heapq.heappop(comp)
            if v != ver[i]:
                continue
            if staged[i] and work[i] > 1:  # its prefill step ended: predict, then queue its decode at its key
                staged[i], resumed[i] = False, G
                S -= P[i] + tok0[i] - rate[i] * G0[i]
                steps0[i] += G - G0[i]
                tok0[i] += rate[i] * (G - G0[i])
                remove(i)
                B -= 1
                R -= rate[i]
                if predict is not None:
                    pred[i] = predict(i, t)
                heapq.heappush(waiting, (wkey(i, steps0[i], tok0[i]) + aging * arr[i], seq, i))
                seq += 1
                continue
            finish[i] = t
            remove(i)
            B -= 1
            R -= rate[i]
            S -= P[i] + tok0[i] - rate[i] * G0[i]
            if on_complete is not None:
                on_complete(i, Lout[i], t)
        if B == 0:
            S = R = 0.0  # no float drift across idle periods
        # arrivals up to now
        while ptr < n and arr[ptr] <= t:
            i = ptr
            ptr += 1
            if (P[i] + Lout[i] + rate[i]) / bs + 1 > m_cap:
                rejected[i] = True
                continue
            if prefill_first:  # no prediction yet: prefills go first, by arrival
                heapq.heappush(waiting, (-math.inf, seq, i))
                seq += 1
                continue
            if predict is not None:
                pred[i] = predict(i, t)
            heapq.heappush(waiting, (wkey(i, 0, 0.0) + aging * arr[i], seq, i))
            seq += 1
        if t >= horizon:
            break
        # KV memory for the next step: preempt the worst running requests until it fits
        while B > 1 and (S + R * (G + 1)) / bs + B > M:
            preempt(worst(G, t)[1])
        # admission (and preemption for preemptive policies); keys that age at rates of their own are renewed
        if ages and len(waiting) > 1:
            waiting[:] = [(key_at(j, t) + aging * arr[j], s_, j) for _, s_, j in waiting]
            heapq.heapify(waiting)
        prefill = 0
        while waiting:
            k, _, i = waiting[0]
            if B < max_batch and (S + R * (G + 1) + P[i] + tok0[i] + rate[i]) / bs + B + 1 <= m_cap:
                pf = 0 if (swap and npre[i]) else P[i] + int(tok0[i])
                if resumed[i] >= 0:  # the decode phase: its own slot at once, else the prompt's full blocks cached
                    pf = 0 if resumed[i] == G else pf - bs * (P[i] // bs)
                if prefill and prefill + pf > budget - B * decode_tokens:
                    break  # this step's token budget is spent
                heapq.heappop(waiting)
                prefill += pf
                if resumed[i] >= 0:
                    resumed[i] = -1
                elif npre[i]:
                    if swap:
                        extra += t_sw * (P[i] + tok0[i])
                        t_preempt += t_sw * (P[i] + tok0[i])
                    else:
                        n_recompute += pf
                        t_preempt += t_pf * pf
                else:
                    first_admit[i] = t
                    new_admits.append(i)
                    if predictor_cost:
                        extra += predictor_cost if predictor_mode == "sync" else max(
                            0.0, predictor_cost - t_pf * P[i])
                G0[i] = G
                add(i, G)
                B += 1
                R += rate[i]
                S += P[i] + tok0[i] - rate[i] * G
                heapq.heappush(comp, (G + (1 if staged[i] else work[i] - steps0[i]), i, ver[i]))
                continue
            if not preemptive or B == 0:
                break
            ka = k - aging * t
            # only the policy's own victim (the worst running key) may go; if it is at its cap the waiting
            # request waits. Evicting the next-worst uncapped request instead would run a worse key ahead
            # of a better one, and under MLFQ each evictee cascades into evicting another (#9 follow-up)
            wk, j = worst(G, t, False, ka)
            if ka < wk and npre[j] < limit:
                preempt(j)
            else:
                break
        extra += t_pf * prefill
        if B == 0:
            if ptr >= n or arr[ptr] > horizon:
                break
            t = max(t, arr[ptr])
            continue
        # jump: as many steps as possible before the next event
        alpha = t_base + t_seq * B + t_ctx * (S + R * G)
        beta = t_ctx * R
        edge = math.inf
        if slow:
            while si < len(slow) and slow[si][1] <= t:
                si += 1
            if si < len(slow):
                if slow[si][0] <= t:
                    f = slow[si][2]
                    alpha, beta, extra, edge = alpha * f, beta * f, extra * f, slow[si][1]
                else:
                    edge = slow[si][0]
        for i in new_admits:
            first_tok[i] = t + extra + alpha
        new_admits.clear()
        while comp[0][2] != ver[comp[0][1]]:
            heapq.heappop(comp)
        K = comp[0][0] - G
        if R > 0:
            K = min(K, max(1, int(((M - B) * bs - S) / R) - G))
        if tick and waiting:
            K = min(K, tick - G % tick)
        target = min(horizon, edge)
        if ptr < n and (preemptive or B < max_batch) and arr[ptr] < target:
            target = arr[ptr]
        T = extra + K * alpha + beta * K * (K - 1) / 2
        if t + T > target:
            d = target - t - extra
            if d <= alpha:
                k = 1
            elif beta == 0:
                k = math.ceil(d / alpha - 1e-12)
            else:
                b2 = alpha - beta / 2
                # (-b2 + sqrt(b2² + 2βd)) / β without its cancellation when β is tiny
                k = math.ceil(2 * d / (b2 + math.sqrt(b2 * b2 + 2 * beta * d)) - 1e-12)
            K = max(1, min(K, k))
            T = extra + K * alpha + beta * K * (K - 1) / 2
        t += T
        G += K
        n_steps += K
        extra = 0.0

    return SimResult(
        arrival=workload.arrival.copy(),
        output=workload.output.copy(),
        first_admit=np.array(first_admit),
        first_token=np.array(first_tok),
        finish=np.array(finish),
        n_preempt=np.array(npre),
        rejected=np.array(rejected, dtype=bool),
        end_time=t,
        n_events=n_events,
        n_steps=n_steps,
        recompute_tokens=n_recompute,
        preempt_seconds=t_preempt,
    )


def _horizon(workload: Workload, profile: HardwareProfile, speculative: bool, horizon: float | None) -> float:
    """Warn when the offered load reaches capacity; then a run without a horizon stops at the last arrival."""
    n = len(workload)
    if n < 2 or workload.arrival[-1] <= workload.arrival[0]:
        return math.inf if horizon is None else float(horizon)
    offered = (n - 1) / float(workload.arrival[-1] - workload.arrival[0])
    cap = capacity(profile, workload.prompt, workload.output, workload.accept, speculative)
    if offered >= cap:
        msg = (f"offered load {offered:.3g} req/s is {offered / cap:.2f}x the capacity of {profile.name} "
               f"({cap:.3g} req/s): queues grow without bound; the run stops at its horizon")
        warnings.warn(msg, OverloadWarning, stacklevel=3)
        if horizon is None:
            return float(workload.arrival[-1])
    return math.inf if horizon is None else float(horizon)
