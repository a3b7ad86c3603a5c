"""The replay loop: requests enter when the clock passes their arrival (after their prediction returns),
the engine steps, and every request and step is timed.

One thread drives it: add what has arrived and been predicted, run one engine step, record. When the
engine is idle the loop sleeps until the next arrival or until a prediction in flight returns. Times are
seconds after the run's start on the loop's clock (`time.perf_counter` for a real run), taken at step
boundaries: a token exists for the caller when the step that made it returns.

Per request (`RunLog.requests`): arrival, ready (its prediction existed; = arrival when none was needed or
it was looked up), added (entered the engine: at the first step boundary after ready), first
token, finish, prompt and output tokens, priority, prediction, status (finished | rejected | unfinished)
and why. Per step (`RunLog.steps`): start, end, whether the loop idled before it, the work scheduled
(batch, prefill tokens, context tokens), the engine's waiting and running counts after it, requests still
waiting for a prediction, and preemptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError
from lengthpred.serve.engine import Engine, RequestRejected
from lengthpred.serve.priority import ServePolicy
from lengthpred.serve.workload import ServeRequest

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
    reqs = sorted(requests, key=lambda r: (r.arrival, r.rid))
    n = len(reqs)
    by_id = {r.rid: r for r in reqs}
    nan = math.nan
    rec = {r.rid: {"ready": nan, "added": nan, "first_token": nan, "finish": nan, "output_tokens": 0,
                   "priority": nan, "prediction": nan, "status": "unfinished", "reason": ""} for r in reqs}
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
        if horizon is not None and now >= horizon:
            hit = True
            break
        if engine.has_unfinished():
            if policy.ages:  # priorities that fall as requests wait: re-set before the engine schedules
                _age(engine, policy, rec, by_id, clock.now() - t0)
            ts = clock.now()
            info = engine.step()
            te = clock.now()
            steps.append((ts - t0, te - t0, idle, info.batch, info.prefill_tokens, info.ctx_tokens, info.n_waiting,
                          info.n_running, arrived_unready, info.n_preempted))
            idle = False
            for rid, k in info.new_tokens.items():
                r = rec.get(rid)
                if r is None:
                    continue
                if math.isnan(r["first_token"]):
                    r["first_token"] = te - t0
                r["output_tokens"] += int(k)
            for rid in info.finished:
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
        engine.abort([rid for rid, r in rec.items() if r["status"] == "unfinished" and not math.isnan(r["added"])])
    stats = predictor.stats()
    rows = [{"rid": q.rid, "prompt_id": q.prompt_id, "arrival": q.arrival, "prompt_tokens": q.prompt_tokens,
             "target_tokens": q.length, "expected_tokens": q.expected, **rec[q.rid]} for q in reqs]
    return RunLog(pd.DataFrame(rows), pd.DataFrame(steps, columns=STEP_COLUMNS), stats, hit, end)


def _age(engine: Engine, policy: ServePolicy, rec: dict[str, dict], by_id: dict[str, ServeRequest], now: float) -> None:
    """Re-set the priorities of the requests waiting in the engine to the aging policy's key at `now`."""
    if not hasattr(engine, "reprioritize"):
        raise ConfigError(f"policy {policy.name}: engine {engine.name} cannot change a waiting request's priority")

    def key(rid: str) -> int:
        q = by_id[rid]
        return policy.aged_priority(rec[rid]["prediction"], q.length, now - q.arrival)

    engine.reprioritize(key)


def queue_series(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(time, requests waiting) after each step: the engine's waiting queue plus those awaiting a prediction."""
    if steps.empty:
        return np.zeros(0), np.zeros(0)
    return steps["t_end"].to_numpy(float), (steps["n_waiting"] + steps["n_predicting"]).to_numpy(float)
