"""Which requests run in the next step, decided in place: a pure function over what the scheduler knows.

LEAP predicts from the request's own prefill, so a new request is prefilled first (it has no prediction before);
then every prefilled request competes for the batch's slots by its key. New requests take only the slots the step's
token budget lets vLLM fill (`TokenBudget`): a slot kept for a request vLLM then does not admit would stay empty.
A decode that loses its slot *parks*: it leaves vLLM's running list but keeps its KV blocks, and resumes later with
nothing recomputed (vLLM's model runner keeps the state of a running request it did not schedule). Only when KV
memory runs short does a parked request give its blocks back (`kv_victims`), and then vLLM recomputes it on
resumption, as with its own preemption.

Keys (lower runs first): `sjf` the predicted length p; `srpt` the predicted remaining length max(p − generated, 1);
with aging, key − weight · (now − arrival) / max(key, 1) (`AgingSJF`'s form). A request the readout could not
predict, or one that has yielded `max_yields` times, never yields again (FCFS-style). With a deadline, a request
that arrived `deadline_s` or more seconds ago is *overdue*: it is no longer passed over, and overdue requests take
the batch's slots oldest first, before new prefills that arrived after them (a hard bound on how long shorter
arrivals can keep jumping it). No vLLM import here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

# where a request is when the step is planned
PREFILL, DECODE, PARKED, NEW, PREEMPTED = "prefill", "decode", "parked", "new", "preempted"


@dataclass(frozen=True)
class RequestView:
    rid: str
    arrival: float
    state: str  # PREFILL / DECODE (in vLLM's running list), PARKED (ours, KV kept), NEW / PREEMPTED (vLLM's waiting)
    predicted: float | None = None  # tokens; None: no prediction (not prefilled yet, or unpredictable)
    generated: int = 0
    yields: int = 0
    to_compute: int = 0  # tokens this request still has to put through the model (its prompt, for a new one)


@dataclass(frozen=True)
class TokenBudget:
    """vLLM's per-step token budget as its scheduler spends it: the running list first (a prefill its next chunk,
    a decode one token), then admissions from the waiting queue in order while tokens are left; with chunked
    prefill any tokens left admit a request's first chunk, without it vLLM stops at the first prompt that does not
    fit whole."""

    tokens: int  # the step's budget: max_num_batched_tokens
    chunk_cap: int = 0  # long_prefill_token_threshold; 0: none
    chunked: bool = True  # enable_chunked_prefill

    def chunk(self, to_compute: int) -> int:
        n = max(int(to_compute), 1)
        return min(n, self.chunk_cap) if self.chunk_cap > 0 else n


@dataclass(frozen=True)
class PolicyOptions:
    policy: str = "sjf"  # sjf | srpt (fcfs never plans: vLLM's own order)
    aging_weight: float = 0.0
    max_yields: int | None = None
    max_prefill_slots: int | None = None
    deadline_s: float | None = None


@dataclass
class Plan:
    run: list[str]  # vLLM's running list after the plan: decodes by key, then prefills (vLLM gives each request
    # in this order its tokens from the step's budget: a decode's one token comes before a prefill's chunk, and
    # vLLM's own preemption, which takes the list's last request, takes a prefill)
    park: list[str]  # prefilled requests that wait with their KV kept
    waiting: list[str]  # vLLM's waiting queue, head first: the ones to admit this step lead
    yielded: list[str] = field(default_factory=list)  # ran last step, parked now (each counts toward max_yields)


def overdue(v: RequestView, opts: PolicyOptions, now: float) -> bool:
    """Whether a request has waited past the deadline since its arrival (never, without one)."""
    return opts.deadline_s is not None and now - v.arrival >= opts.deadline_s


def key(v: RequestView, opts: PolicyOptions, now: float) -> float:
    """A prefilled request's key; −inf for one that must not yield (no prediction, its yields spent, overdue)."""
    if v.predicted is None or not math.isfinite(v.predicted) or overdue(v, opts, now):
        return -math.inf
    if opts.max_yields is not None and v.yields >= opts.max_yields and v.state == DECODE:
        return -math.inf
    base = max(v.predicted - v.generated, 1.0) if opts.policy == "srpt" else max(float(v.predicted), 0.0)
    if opts.aging_weight:
        base -= opts.aging_weight * max(now - v.arrival, 0.0) / max(base, 1.0)
    return base


def new_prefills(new: Sequence[RequestView], due: Sequence[RequestView], free: int, opts: PolicyOptions) -> int:
    """How many of the new requests (oldest first) are prefilled this step: they take the free slots in arrival
    order, up to `max_prefill_slots`, except that each overdue request (`due`, oldest first) takes its slot before
    every new request that arrived after it."""
    cap = free if opts.max_prefill_slots is None else min(opts.max_prefill_slots, free)
    n_new = before = 0
    for v in new:
        while before < len(due) and due[before].arrival <= v.arrival:
            before += 1  # overdue and no younger than this new request: its slot comes first
        if n_new >= cap or n_new + before >= free:
            break
        n_new += 1
    return n_new


def admitted(order: Sequence[RequestView], left: int, budget: TokenBudget) -> int:
    """How many of `order` (vLLM's waiting queue, head first) vLLM admits with `left` tokens of the step."""
    n = 0
    for v in order:
        need = budget.chunk(v.to_compute)
        if left <= 0 or (not budget.chunked and need > left):
            break
        left -= need
        n += 1
    return n


def fit_budget(prefills: Sequence[RequestView], ranked: Sequence[RequestView], chosen: list[RequestView],
               new: Sequence[RequestView], n_new: int, late: set[str], free: int,
               budget: TokenBudget) -> tuple[list[RequestView], int]:
    """The plan's admissions cut to what vLLM admits with the step's tokens, and each slot an admission gives up
    handed to the next decode by key (so no slot stays empty while a parked decode waits). vLLM spends the tokens
    on the running list first (a decode one, a prefill its next chunk), then on the waiting queue from its head:
    overdue preempted requests, the new ones, the other preempted ones (recomputed in full)."""
    while True:
        decodes = [v for v in chosen if v.state in (DECODE, PARKED)]
        admit = [v for v in chosen if v.state == PREEMPTED]
        order = [v for v in admit if v.rid in late] + list(new[:n_new]) + [v for v in admit if v.rid not in late]
        left = budget.tokens - sum(budget.chunk(v.to_compute) for v in prefills) - len(decodes)
        k = admitted(order, left, budget)
        if k == len(order):
            return chosen, n_new
        dropped = {v.rid for v in order[k:]}
        n_new = sum(v.state == NEW for v in order[:k])
        kept = {v.rid for v in chosen if v.rid not in dropped}
        spare = [v for v in ranked if v.state in (DECODE, PARKED) and v.rid not in kept]
        kept |= {v.rid for v in spare[: max(free - n_new - len(kept), 0)]}
        chosen = [v for v in ranked if v.rid in kept]  # each pass admits fewer: the loop ends


def plan_step(views: Sequence[RequestView], slots: int, opts: PolicyOptions, now: float,
              budget: TokenBudget | None = None) -> Plan:
    """The step's running list, parked set and waiting order for `slots` batch slots (vLLM's max_num_seqs); with
    `budget`, new requests get only the slots vLLM's token budget lets it fill."""
    prefills = [v for v in views if v.state == PREFILL]
    new = sorted((v for v in views if v.state == NEW), key=lambda v: v.arrival)
    free = max(slots - len(prefills), 0)
    late = {v.rid for v in views if overdue(v, opts, now)}
    ranked = sorted((v for v in views if v.state in (DECODE, PARKED, PREEMPTED)),
                    key=lambda v: (v.rid not in late, key(v, opts, now), v.arrival))  # overdue lead, oldest first
    n_new = new_prefills(new, [v for v in ranked if v.rid in late], free, opts)
    chosen = ranked[: free - n_new]
    if budget is not None:
        chosen, n_new = fit_budget(prefills, ranked, chosen, new, n_new, late, free, budget)
    keep = {v.rid for v in chosen}
    run = [v.rid for v in chosen if v.state in (DECODE, PARKED)] + [v.rid for v in prefills]
    park = [v.rid for v in ranked if v.state in (DECODE, PARKED) and v.rid not in keep]
    admit = [v.rid for v in chosen if v.state == PREEMPTED]  # vLLM admits from the queue's head: overdue ones lead
    waiting = ([r for r in admit if r in late] + [v.rid for v in new[:n_new]] + [r for r in admit if r not in late]
               + [v.rid for v in new[n_new:]] + [v.rid for v in ranked if v.state == PREEMPTED and v.rid not in keep])
    yielded = [v.rid for v in ranked if v.state == DECODE and v.rid not in keep]
    return Plan(run, park, waiting, yielded)


def kv_victims(parked: Sequence[tuple[RequestView, int]], shortfall: int, opts: PolicyOptions, now: float) -> list[str]:
    """Parked requests (with the KV blocks each holds) to give their blocks back, largest key first, until
    `shortfall` blocks are freed (or none is left)."""
    out, freed = [], 0
    for v, blocks in sorted(parked, key=lambda vb: (key(vb[0], opts, now), vb[0].arrival), reverse=True):
        if freed >= shortfall:
            break
        out.append(v.rid)
        freed += blocks
    return out
