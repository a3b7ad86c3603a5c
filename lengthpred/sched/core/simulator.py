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
not hold (P + 1 − block_size·⌊P / block_size⌋ tokens). Such a decode yielded its slot: its next token comes
at the end of its first step back (`SimResult.resumed`, the end of its stall; the real run's `resumed`).

Reading the code: `simulate` checks its options and builds three objects: `_Server` (what never changes: the
requests' inputs, the profile's constants, the policy's hooks), `_Requests` (per-request progress) and
`SimState` (clock, global step, the batch's context sums, the queues). Each event then runs, in order,
`_complete` (finishes at this boundary), `_arrive`, `_free_memory` (memory preemption), `_admit` (admission
and priority preemption) and `_jump` (as many steps as fit before the next event).
"""

from __future__ import annotations

import heapq
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.policies import Policy, SchedContext
from lengthpred.sched.core.predictors import ArrayPredictor, OraclePredictor, Predictor
from lengthpred.sched.core.runset import HeapRunSet, SlotRunSet, make_runset
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
    resumed: np.ndarray  # prefill_first: the token after a yielded decode's stall (its first step back); else NaN
    end_time: float
    n_events: int
    n_steps: int
    recompute_tokens: int = 0  # prompt + generated tokens prefilled again after recompute preemptions
    preempt_seconds: float = 0.0  # server time spent re-prefilling (recompute) or swapping KV (swap)

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.finish)


@dataclass(frozen=True, slots=True)
class _Server:
    """What a run reads and never changes: the requests' inputs (plain lists, fast in the hot loop), the
    server's constants and the policy's and predictor's hooks."""

    n: int
    arrival: list[float]
    prompt: list[int]
    output: list[int]
    work: list[int]  # decode steps a request needs: ⌈L / rate⌉
    rate: list[float]  # tokens per step (1, or n·A + 1 with speculative decoding)
    pred: np.ndarray  # policies read ctx.pred; online predictions are written into it
    block_size: int
    kv_blocks: int
    kv_cap: float  # kv_blocks less the watermark: what admission may fill
    t_base: float  # step time with an empty batch (plus the draft model's steps)
    t_seq: float
    t_ctx: float
    t_prefill: float  # s per prefilled token
    t_swap: float  # s per swapped token
    max_batch: int
    decode_tokens: int  # tokens a running request adds to a step's token budget
    token_budget: int
    swap: bool
    preemptive: bool
    tick: int
    waiting_key: Callable[[int, int, float], float]
    ages: bool
    waiting_key_at: Callable[[int, float], float]
    aging: float
    limit: float  # priority preemptions per request (inf: no cap)
    prefill_first: bool
    predictor_cost: float
    predictor_sync: bool
    predict: Callable[[int, float], float] | None  # online predictors, asked at arrival (or prefill's end)
    on_complete: Callable[[int, int, float], None] | None
    horizon: float
    slowdown: list[tuple[float, float, float]]


@dataclass(slots=True)
class _Requests:
    """Per-request progress, one entry per request. A request admitted at global step admit_step with
    steps_done steps done has steps_done + (G − admit_step) done at global step G."""

    admit_step: list[int]
    steps_done: list[int]  # at its last admission
    tokens_done: list[float]  # at its last admission
    version: list[int]  # bumped at each preemption: its older completion entries are stale
    n_preempt: list[int]
    staged: list[bool]  # still to run its prefill-only first phase (prefill_first)
    resumed: list[int]  # the boundary its prefill phase ended at while its decode phase waits, else -1
    second_token: list[float]  # the end of a yielded decode's first step back (SimResult.resumed)
    first_admit: list[float]
    first_token: list[float]
    finish: list[float]
    rejected: list[bool]


@dataclass(slots=True)
class SimState:
    """The server between two events. The running batch's KV context at global step G is
    ctx_base + rate_sum·G, so the step time and the memory limit are closed forms in G."""

    running: HeapRunSet | SlotRunSet  # the running batch and its worst key (`runset`)
    now: float = 0.0  # s
    step: int = 0  # global step G
    ctx_base: float = 0.0  # Σ over running requests of prompt + tokens_done − rate·admit_step
    rate_sum: float = 0.0  # Σ over running requests of rate
    batch: int = 0  # running requests
    extra: float = 0.0  # s the next jump adds to its steps: prefill, swaps, predictor cost
    recompute_tokens: int = 0
    preempt_seconds: float = 0.0
    next_arrival: int = 0  # the first request not yet arrived
    seq: int = 0  # the waiting queue's tie-break: first queued, first served
    n_events: int = 0
    n_steps: int = 0
    slow_index: int = 0  # the first slowdown interval not yet over
    waiting: list[tuple[float, int, int]] = field(default_factory=list)  # heap of (key, seq, request)
    completions: list[tuple[int, int, int]] = field(default_factory=list)  # heap of (step, request, version)
    new_admits: list[int] = field(default_factory=list)  # first admitted at this boundary (first token: its end)
    new_resumes: list[int] = field(default_factory=list)  # yielded decodes back at this boundary (their next token)


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
    slow = _check_options(policy, preemption, predictor_mode, watermark, slowdown, prefill_first, speculative)
    n = len(workload)
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

    sv = _Server(
        n=n, arrival=workload.arrival.tolist(), prompt=workload.prompt.tolist(), output=workload.output.tolist(),
        work=work_a.tolist(), rate=rate_a.tolist(), pred=pred_a,
        block_size=profile.block_size, kv_blocks=profile.kv_blocks, kv_cap=profile.kv_blocks * (1.0 - watermark),
        t_base=profile.t_base + (profile.n_draft * profile.t_draft if speculative else 0.0),
        t_seq=profile.t_seq, t_ctx=profile.t_ctx, t_prefill=profile.t_prefill_token, t_swap=profile.t_swap_token,
        max_batch=profile.max_batch, decode_tokens=profile.n_draft + 1 if speculative else 1,
        token_budget=profile.token_budget, swap=preemption == "swap", preemptive=policy.preemptive,
        tick=policy.tick, waiting_key=policy.waiting_key, ages=policy.ages, waiting_key_at=policy.waiting_key_at,
        aging=aging, limit=math.inf if max_preemptions is None else max_preemptions, prefill_first=prefill_first,
        predictor_cost=predictor_cost, predictor_sync=predictor_mode == "sync",
        predict=None if static else predictor.predict, on_complete=None if static else predictor.on_complete,
        horizon=horizon, slowdown=slow,
    )
    nan = math.nan
    rq = _Requests(admit_step=[0] * n, steps_done=[0] * n, tokens_done=[0.0] * n, version=[0] * n,
                   n_preempt=[0] * n, staged=[prefill_first] * n, resumed=[-1] * n, second_token=[nan] * n,
                   first_admit=[nan] * n,
                   first_token=[nan] * n, finish=[nan] * n, rejected=[False] * n)
    running = make_runset(policy, (rq.admit_step, rq.steps_done, rq.tokens_done, sv.rate, rq.n_preempt),
                          sv.arrival, aging, sv.limit, sv.max_batch)
    st = SimState(running)
    if getattr(predictor, "reads_queue", False):  # a key set from the waiting queue when predicted (TIE's β)
        predictor.bind_queue(lambda: len(st.waiting), profile.max_batch)

    while True:
        st.n_events += 1
        _complete(st, rq, sv)
        _arrive(st, rq, sv)
        if st.now >= sv.horizon:
            break
        _free_memory(st, rq, sv)
        _admit(st, rq, sv)
        if st.batch == 0:
            if st.next_arrival >= n or sv.arrival[st.next_arrival] > sv.horizon:
                break
            st.now = max(st.now, sv.arrival[st.next_arrival])  # idle until the next arrival
            continue
        _jump(st, rq, sv)

    return SimResult(
        arrival=workload.arrival.copy(),
        output=workload.output.copy(),
        first_admit=np.array(rq.first_admit),
        first_token=np.array(rq.first_token),
        finish=np.array(rq.finish),
        n_preempt=np.array(rq.n_preempt),
        rejected=np.array(rq.rejected, dtype=bool),
        resumed=np.array(rq.second_token),
        end_time=st.now,
        n_events=st.n_events,
        n_steps=st.n_steps,
        recompute_tokens=st.recompute_tokens,
        preempt_seconds=st.preempt_seconds,
    )


def _check_options(policy: Policy, preemption: str, predictor_mode: str, watermark: float,
                   slowdown: Sequence[tuple[float, float, float]], prefill_first: bool,
                   speculative: bool) -> list[tuple[float, float, float]]:
    """A one-line ConfigError for an option out of range; the slowdown intervals as floats."""
    if preemption not in ("recompute", "swap"):
        raise ConfigError(f"preemption={preemption!r}; valid: recompute, swap")
    if predictor_mode not in ("sync", "async"):
        raise ConfigError(f"predictor_mode={predictor_mode!r}; valid: sync, async")
    if not 0 <= watermark < 1:
        raise ConfigError(f"watermark={watermark} must lie in [0, 1)")
    slow = [(float(a), float(b), float(f)) for a, b, f in slowdown]
    if any(b < a or f <= 0 for a, b, f in slow) or any(slow[i][1] > slow[i + 1][0] for i in range(len(slow) - 1)):
        raise ConfigError("slowdown intervals must be sorted, disjoint (t0 <= t1) and have a factor > 0")
    if prefill_first and (policy.preemptive or speculative):
        raise ConfigError(f"prefill_first models a non-preemptive engine without speculative decoding; policy "
                          f"{policy.name!r}{' with speculative decoding' if speculative else ''} is not one")
    return slow


def _enqueue(st: SimState, key: float, i: int) -> None:
    heapq.heappush(st.waiting, (key, st.seq, i))
    st.seq += 1


def _complete(st: SimState, rq: _Requests, sv: _Server) -> None:
    """Requests whose last step ended at this boundary finish; a staged one (prefill_first) ends its prefill
    phase instead."""
    comp, G, rate = st.completions, st.step, sv.rate
    while comp and comp[0][0] <= G:
        _, i, v = heapq.heappop(comp)
        if v != rq.version[i]:
            continue
        if rq.staged[i] and sv.work[i] > 1:
            _end_prefill_phase(st, rq, sv, i)
            continue
        rq.finish[i] = st.now
        st.running.remove(i)
        st.batch -= 1
        st.rate_sum -= rate[i]
        st.ctx_base -= sv.prompt[i] + rq.tokens_done[i] - rate[i] * rq.admit_step[i]
        if sv.on_complete is not None:
            sv.on_complete(i, sv.output[i], st.now)
    if st.batch == 0:
        st.ctx_base = st.rate_sum = 0.0  # no float drift across idle periods


def _end_prefill_phase(st: SimState, rq: _Requests, sv: _Server, i: int) -> None:
    """Its prefill step ended (prefill_first): predict, then queue its decode at the policy's key."""
    G, rate = st.step, sv.rate
    rq.staged[i], rq.resumed[i] = False, G
    st.ctx_base -= sv.prompt[i] + rq.tokens_done[i] - rate[i] * rq.admit_step[i]
    rq.steps_done[i] += G - rq.admit_step[i]
    rq.tokens_done[i] += rate[i] * (G - rq.admit_step[i])
    st.running.remove(i)
    st.batch -= 1
    st.rate_sum -= rate[i]
    if sv.predict is not None:
        sv.pred[i] = sv.predict(i, st.now)
    _enqueue(st, sv.waiting_key(i, rq.steps_done[i], rq.tokens_done[i]) + sv.aging * sv.arrival[i], i)


def _arrive(st: SimState, rq: _Requests, sv: _Server) -> None:
    """Requests arrived by now join the waiting queue (one that cannot fit in KV memory even alone: rejected)."""
    arr = sv.arrival
    while st.next_arrival < sv.n and arr[st.next_arrival] <= st.now:
        i = st.next_arrival
        st.next_arrival += 1
        if (sv.prompt[i] + sv.output[i] + sv.rate[i]) / sv.block_size + 1 > sv.kv_cap:
            rq.rejected[i] = True
            continue
        if sv.prefill_first:  # no prediction yet: prefills go first, by arrival
            _enqueue(st, -math.inf, i)
            continue
        if sv.predict is not None:
            sv.pred[i] = sv.predict(i, st.now)
        _enqueue(st, sv.waiting_key(i, 0, 0.0) + sv.aging * arr[i], i)


def _free_memory(st: SimState, rq: _Requests, sv: _Server) -> None:
    """KV memory for the next step: preempt the worst running requests until it fits."""
    while st.batch > 1 and (st.ctx_base + st.rate_sum * (st.step + 1)) / sv.block_size + st.batch > sv.kv_blocks:
        _preempt(st, rq, sv, st.running.worst(st.step, st.now)[1])


def _preempt(st: SimState, rq: _Requests, sv: _Server, j: int) -> None:
    """Move running request j back to the waiting queue (recompute: its KV is dropped; swap: moved out)."""
    G, rate, P = st.step, sv.rate, sv.prompt
    d = G - rq.admit_step[j]
    rq.steps_done[j] += d
    rq.tokens_done[j] += rate[j] * d
    st.running.remove(j)
    st.batch -= 1
    st.rate_sum -= rate[j]
    st.ctx_base -= P[j] + rq.tokens_done[j] - rate[j] * G
    rq.version[j] += 1
    rq.n_preempt[j] += 1
    if sv.swap:
        st.extra += sv.t_swap * (P[j] + rq.tokens_done[j])
        st.preempt_seconds += sv.t_swap * (P[j] + rq.tokens_done[j])
    k = -math.inf if rq.staged[j] else sv.waiting_key(j, rq.steps_done[j], rq.tokens_done[j]) + sv.aging * sv.arrival[j]
    _enqueue(st, k, j)


def _rekey_waiting(st: SimState, rq: _Requests, sv: _Server) -> None:
    """Keys that age at rates of their own (`policy.ages`) are renewed before each admission; a request still to
    run its prefill phase (prefill_first) keeps its place ahead of every decode."""
    if sv.ages and len(st.waiting) > 1:
        st.waiting[:] = [(-math.inf if rq.staged[j] else sv.waiting_key_at(j, st.now) + sv.aging * sv.arrival[j], s, j)
                         for _, s, j in st.waiting]
        heapq.heapify(st.waiting)


def _admit(st: SimState, rq: _Requests, sv: _Server) -> None:
    """Admit from the top of the waiting queue (strict priority) while memory, batch and token budget allow;
    a preemptive policy may evict its worst running request for a better waiting one. The prefill's time
    goes into the next jump."""
    _rekey_waiting(st, rq, sv)
    prefill = 0
    while st.waiting:
        k, _, i = st.waiting[0]
        if st.batch < sv.max_batch and _fits(st, rq, sv, i):
            pf = _prefill_tokens(st, rq, sv, i)
            if prefill and prefill + pf > sv.token_budget - st.batch * sv.decode_tokens:
                break  # this step's token budget is spent
            heapq.heappop(st.waiting)
            prefill += pf
            _start(st, rq, sv, i, pf)
            continue
        if not sv.preemptive or st.batch == 0:
            break
        ka = k - sv.aging * st.now
        # only the policy's own victim (the worst running key) may go; if it is at its cap the waiting
        # request waits. Evicting the next-worst uncapped request instead would run a worse key ahead
        # of a better one, and under MLFQ each evictee cascades into evicting another (#9 follow-up)
        wk, j = st.running.worst(st.step, st.now, False, ka)
        if ka < wk and rq.n_preempt[j] < sv.limit:
            _preempt(st, rq, sv, j)
        else:
            break
    st.extra += sv.t_prefill * prefill


def _fits(st: SimState, rq: _Requests, sv: _Server, i: int) -> bool:
    """Request i's KV (its context and its first step) fits beside the batch's next step."""
    need = st.ctx_base + st.rate_sum * (st.step + 1) + sv.prompt[i] + rq.tokens_done[i] + sv.rate[i]
    return need / sv.block_size + st.batch + 1 <= sv.kv_cap


def _prefill_tokens(st: SimState, rq: _Requests, sv: _Server, i: int) -> int:
    """Tokens request i's admission prefills: none when swapped back in; its whole context otherwise, less
    what its own prefill phase left (prefill_first: the slot itself at once, else the prompt's full blocks)."""
    pf = 0 if (sv.swap and rq.n_preempt[i]) else sv.prompt[i] + int(rq.tokens_done[i])
    if rq.resumed[i] >= 0:
        pf = 0 if rq.resumed[i] == st.step else pf - sv.block_size * (sv.prompt[i] // sv.block_size)
    return pf


def _start(st: SimState, rq: _Requests, sv: _Server, i: int, pf: int) -> None:
    """Request i joins the running batch at this boundary: its costs, its first admission, its completion."""
    if rq.resumed[i] >= 0:
        if rq.resumed[i] != st.step:  # it yielded its slot at its prefill's end: its stall ends with this step
            st.new_resumes.append(i)
        rq.resumed[i] = -1
    elif rq.n_preempt[i]:
        if sv.swap:
            st.extra += sv.t_swap * (sv.prompt[i] + rq.tokens_done[i])
            st.preempt_seconds += sv.t_swap * (sv.prompt[i] + rq.tokens_done[i])
        else:
            st.recompute_tokens += pf
            st.preempt_seconds += sv.t_prefill * pf
    else:
        rq.first_admit[i] = st.now
        st.new_admits.append(i)
        if sv.predictor_cost:
            st.extra += sv.predictor_cost if sv.predictor_sync else max(
                0.0, sv.predictor_cost - sv.t_prefill * sv.prompt[i])
    G = st.step
    rq.admit_step[i] = G
    st.running.add(i, G)
    st.batch += 1
    st.rate_sum += sv.rate[i]
    st.ctx_base += sv.prompt[i] + rq.tokens_done[i] - sv.rate[i] * G
    heapq.heappush(st.completions, (G + (1 if rq.staged[i] else sv.work[i] - rq.steps_done[i]), i, rq.version[i]))


def _jump(st: SimState, rq: _Requests, sv: _Server) -> None:
    """Run as many steps as possible before the next event, at once."""
    alpha, beta, edge = _step_cost(st, sv)
    for i in st.new_admits:
        rq.first_token[i] = st.now + st.extra + alpha
    for i in st.new_resumes:
        rq.second_token[i] = st.now + st.extra + alpha
    st.new_admits.clear()
    st.new_resumes.clear()
    K = _steps_to_event(st, rq, sv)
    target = min(sv.horizon, edge)
    nxt = st.next_arrival
    if nxt < sv.n and (sv.preemptive or st.batch < sv.max_batch) and sv.arrival[nxt] < target:
        target = sv.arrival[nxt]
    T = st.extra + K * alpha + beta * K * (K - 1) / 2
    if st.now + T > target:
        K = max(1, min(K, _steps_within(target - st.now - st.extra, alpha, beta)))
        T = st.extra + K * alpha + beta * K * (K - 1) / 2
    st.now += T
    st.step += K
    st.n_steps += K
    st.extra = 0.0


def _step_cost(st: SimState, sv: _Server) -> tuple[float, float, float]:
    """(alpha, beta, edge): the next step takes alpha s and each later one beta s more (the context grows);
    inside a slowdown interval both, and the pending extra, are scaled by its factor; edge is the next
    interval boundary, where a jump must stop."""
    alpha = sv.t_base + sv.t_seq * st.batch + sv.t_ctx * (st.ctx_base + st.rate_sum * st.step)
    beta = sv.t_ctx * st.rate_sum
    edge = math.inf
    slow = sv.slowdown
    if slow:
        while st.slow_index < len(slow) and slow[st.slow_index][1] <= st.now:
            st.slow_index += 1
        if st.slow_index < len(slow):
            t0, t1, f = slow[st.slow_index]
            if t0 <= st.now:
                alpha, beta, st.extra, edge = alpha * f, beta * f, st.extra * f, t1
            else:
                edge = t0
    return alpha, beta, edge


def _steps_to_event(st: SimState, rq: _Requests, sv: _Server) -> int:
    """Steps until the next completion, KV-memory limit or policy tick."""
    comp = st.completions
    while comp[0][2] != rq.version[comp[0][1]]:
        heapq.heappop(comp)
    K = comp[0][0] - st.step
    if st.rate_sum > 0:
        K = min(K, max(1, int(((sv.kv_blocks - st.batch) * sv.block_size - st.ctx_base) / st.rate_sum) - st.step))
    if sv.tick and st.waiting:
        K = min(K, sv.tick - st.step % sv.tick)
    return K


def _steps_within(d: float, alpha: float, beta: float) -> int:
    """The fewest steps (at least 1) whose time alpha·k + beta·k(k − 1)/2 reaches d."""
    if d <= alpha:
        return 1
    if beta == 0:
        return math.ceil(d / alpha - 1e-12)
    b2 = alpha - beta / 2
    # (-b2 + sqrt(b2² + 2βd)) / β without its cancellation when β is tiny
    return math.ceil(2 * d / (b2 + math.sqrt(b2 * b2 + 2 * beta * d)) - 1e-12)


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
