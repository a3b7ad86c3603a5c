"""`--scheduler-cls lengthpred.vllm_plugin.scheduler.LengthAwareScheduler`: vLLM's scheduler, ordered by the
output length LEAP's readout predicts from each request's own prefill, and adapting that readout as requests finish.

Per step, before vLLM's own `schedule()` (`policy.plan_step`): new requests are prefilled first (their prediction
comes from that prefill), as many as the step's token budget lets vLLM admit, so that no slot kept for one stays
empty (`idle_slots` counts those that still do); then the prefilled requests hold the batch's `max_num_seqs`
slots in order of their key; a decode that loses its slot parks with its KV blocks kept and resumes with nothing
recomputed. When KV memory is short, parked requests with the largest keys give their blocks back (vLLM recomputes
them on resumption).
`policy: fcfs` plans nothing: vLLM's own order, with prediction and updates running (the control).

After each step (`update_from_output`): the rows the model sent for prompts whose prefill just completed become
predictions; each finished request's (row, output length) updates the readout (`live_readout`). Aborted requests
teach nothing. A request whose row never came (a prompt prefilled one token at a time) is served FCFS-style,
never dropped, and counted.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import OrderedDict, deque
from typing import Any

import numpy as np
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from lengthpred.errors import ConfigError
from lengthpred.online.readout_file import ModelIdentity, check_identity, read_readout, weights_fingerprint
from lengthpred.vllm_plugin import _vllm_private as private
from lengthpred.vllm_plugin.channel import RowReceiver, StepRows, address
from lengthpred.vllm_plugin.live_readout import LiveReadout
from lengthpred.vllm_plugin.policy import (
    DECODE,
    NEW,
    PARKED,
    PREEMPTED,
    PREFILL,
    PolicyOptions,
    RequestView,
    TokenBudget,
    kv_victims,
    plan_step,
)
from lengthpred.vllm_plugin.request_log import RequestLog, prompt_hash
from lengthpred.vllm_plugin.settings import PluginSettings

log = logging.getLogger("vllm.lengthpred")  # under vLLM's logger: its handlers and format


def served_identity(model_config: Any) -> ModelIdentity:
    hf = model_config.hf_config
    archs = list(getattr(hf, "architectures", None) or [""])
    path = str(model_config.model)
    name = getattr(model_config, "served_model_name", None) or path
    name = name[0] if isinstance(name, (list, tuple)) and name else name
    return ModelIdentity(str(name), archs[0],
                         int(hf.hidden_size), int(hf.num_hidden_layers),
                         weights_fingerprint(path) if os.path.isdir(path) else "")


class LengthAwareScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.vllm_config
        self.lp = PluginSettings.from_sources(os.environ, cfg.additional_config)
        self.lp.check_engine(cfg.scheduler_config)
        resume = self.lp.checkpoint.is_file()
        readout = read_readout(self.lp.checkpoint if resume else self.lp.readout)
        served = served_identity(cfg.model_config)
        for w in check_identity(readout, served, path=self.lp.checkpoint if resume else self.lp.readout):
            log.warning("lengthpred: %s", w)
        if resume:
            base = read_readout(self.lp.readout)
            if (base.identity, base.layer) != (readout.identity, readout.layer):
                raise ConfigError(f"the checkpoint {self.lp.checkpoint} belongs to another readout than "
                                  f"{self.lp.readout}: move it away or set checkpoint_path")
        self.live = LiveReadout(readout, updates=self.lp.updates, checkpoint=self.lp.checkpoint,
                                checkpoint_every=self.lp.checkpoint_every)
        self.rows_in = RowReceiver(address(private.instance_id(cfg)))
        stale = self.rows_in.drain()
        self.opts = PolicyOptions(self.lp.policy, aging_weight=self.lp.aging_weight, max_yields=self.lp.max_yields,
                                  max_prefill_slots=self.lp.max_prefill_slots, deadline_s=self.lp.deadline_s)
        self.slots = int(min(self.max_num_running_reqs, self.max_num_active_reqs))
        self.budget = TokenBudget(*private.token_budget(self))
        self.parked: list[Request] = []
        self.predicted: dict[str, float] = {}
        self.rows: dict[str, np.ndarray] = {}
        self.yields: dict[str, int] = {}
        self.row_cache: OrderedDict[str, np.ndarray] = OrderedDict()  # prompt hash -> its row (repeated prompts)
        self.counts = {"yields": 0, "resumes": 0, "kv_preempted": 0, "unpredictable": 0, "finished": 0,
                       "rows_missing": 0, "rows_unreadable": 0, "messages_missing": 0, "plan_s": 0.0, "rows_s": 0.0,
                       "capture_s": 0.0, "messages": 0, "steps": 0,
                       "row_cache_hits": 0, "idle_slots": 0}
        self.prefill_steps: deque[float] = deque(maxlen=4096)  # seconds of the latest steps that prefilled
        self._scheduled_at = time.perf_counter()
        self._last_log = time.monotonic()
        self._dirty = False
        self._log = RequestLog(self.lp.request_log) if self.lp.request_log is not None else None
        log.info("lengthpred: policy %s (aging %g, max_yields %s, deadline %s s) on %d slots; readout %s, layer %d, "
                 "%d updates so far%s; %d warm-up messages dropped", self.lp.policy, self.lp.aging_weight,
                 self.lp.max_yields, self.lp.deadline_s, self.slots,
                 self.lp.checkpoint if resume else self.lp.readout, readout.layer, readout.estimator.n_updates_,
                 " (resumed from its checkpoint)" if resume else "", stale)

    # -- planning, before vLLM's own schedule() --------------------------------------------------------------------
    def schedule(self, throttle_prefills: bool = False) -> Any:
        if self.opts.policy != "fcfs":
            t = time.perf_counter()
            self._plan(time.time())
            self.counts["plan_s"] += time.perf_counter() - t
        out = super().schedule(throttle_prefills)
        if self.parked:  # slots this step left empty while a parked request could have used them
            self.counts["idle_slots"] += max(self.slots - len(out.num_scheduled_tokens), 0)
        self._scheduled_at = time.perf_counter()
        self.counts["steps"] += 1
        return out

    def _view(self, r: Request, state: str) -> RequestView:
        return RequestView(r.request_id, float(r.arrival_time), state, self.predicted.get(r.request_id),
                           int(r.num_output_tokens), self.yields.get(r.request_id, 0),
                           int(r.num_tokens - r.num_computed_tokens))

    def _plan(self, now: float) -> None:
        if not (self.parked or self.waiting or len(self.running) > 1):
            return
        views = [self._view(r, PREFILL if r.num_computed_tokens < r.num_tokens - 1 else DECODE) for r in self.running]
        views += [self._view(r, PARKED) for r in self.parked]
        views += [self._view(r, PREEMPTED if r.status == RequestStatus.PREEMPTED else NEW) for r in self.waiting]
        plan = plan_step(views, self.slots, self.opts, now, self.budget)
        by_id = {r.request_id: r for r in (*self.running, *self.parked, *self.waiting)}
        was_parked = {r.request_id for r in self.parked}
        running = [by_id[i] for i in plan.run]
        parked = [by_id[i] for i in plan.park]
        self.counts["resumes"] += sum(i in was_parked for i in plan.run)
        for rid in plan.yielded:
            self.yields[rid] = self.yields.get(rid, 0) + 1
        self.counts["yields"] += len(plan.yielded)
        victims = self._kv_shortfall(running, parked, plan.waiting[: max(self.slots - len(running), 0)], by_id, now)
        for r in victims:
            parked.remove(r)
            private.preempt(self, r, time.monotonic())  # RUNNING → PREEMPTED, blocks freed, into vLLM's waiting queue
        self.counts["kv_preempted"] += len(victims)
        self.running, self.parked = running, parked
        order = [by_id[i] for i in plan.waiting] + victims
        if len(order) == len(self.waiting):
            private.reorder_waiting(self, order)

    def _kv_shortfall(self, running: list[Request], parked: list[Request], admit: list[str],
                      by_id: dict[str, Request], now: float) -> list[Request]:
        """Parked requests whose blocks this step needs: one block per decode at a block boundary, each admitted
        prompt's blocks, and vLLM's watermark."""
        if not parked:
            return []
        bs = int(self.block_size)
        need = sum(1 for r in running if r.num_computed_tokens % bs == 0)
        need += sum(math.ceil(max(by_id[i].num_tokens - by_id[i].num_computed_tokens, 1) / bs) + 1 for i in admit)
        need += int(getattr(self.scheduler_config, "watermark", 0.0) * self.kv_cache_config.num_blocks)
        short = need - private.free_blocks(self)
        if short <= 0:
            return []
        held = [(self._view(r, PARKED), private.request_blocks(self, r.request_id)) for r in parked]
        ids = set(kv_victims(held, short, self.opts, now))
        return [r for r in parked if r.request_id in ids]

    # -- after each step -----------------------------------------------------------------------------------------
    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        sched = scheduler_output.num_scheduled_tokens
        reqs = {rid: self.requests.get(rid) for rid in sched}
        self._predict_step(sched, reqs, model_runner_output)
        out = super().update_from_output(scheduler_output, model_runner_output)
        for r in reqs.values():
            if r is not None and r.is_finished():
                self._finished(r)
        if self._dirty and not self.requests:
            self._flush()
        if self.lp.stats_every_s and time.monotonic() - self._last_log >= self.lp.stats_every_s:
            self._last_log = time.monotonic()
            log.info("%s", self.stats_line())
        return out

    def _predict_step(self, sched: dict[str, int], reqs: dict[str, Request | None], mro: Any) -> None:
        """Predict for the requests whose prompt was completed in this step (their first prefill). The model sends
        the state at the end of every chunk longer than one token; a prompt whose last chunk was one token (vLLM
        recomputes only the last token of a prompt its prefix cache holds whole) takes the row its identical prompt
        had before (`row_cache`), or is served unpredicted."""
        expect = [r for r in reqs.values() if r is not None and r.request_id not in self.predicted
                  and r.num_output_tokens == 0 and r.num_computed_tokens >= r.num_prompt_tokens]
        msg = None
        if sched and max(sched.values()) > 1:
            t = time.perf_counter()
            self.prefill_steps.append(t - self._scheduled_at)  # the step's forward, seen from the scheduler
            want = (tuple(int(sched[r]) for r in mro.req_ids),
                    tuple(int(reqs[r].num_computed_tokens) if reqs.get(r) is not None else -1 for r in mro.req_ids))
            msg = self._receive(want)
            self.counts["rows_s"] += time.perf_counter() - t
            if msg is not None:
                self.counts["capture_s"] += msg.capture_s
                self.counts["messages"] += 1
        for r in expect:
            rid, key = r.request_id, prompt_hash(r.prompt_token_ids or ())
            k = mro.req_id_to_index.get(rid)
            # a copy: a view would keep the whole step's message alive in the row cache
            row = np.array(msg.rows[msg.chunks.index(k)]) if msg is not None and k in msg.chunks else None
            if row is None:
                row = self.row_cache.get(key)
                if row is None:
                    self.counts["rows_missing"] += 1
                    continue
                self.counts["row_cache_hits"] += 1
            y = self.live.predict(row)
            if y is None:
                self.counts["rows_unreadable"] += 1
                continue
            self.predicted[rid], self.rows[rid] = y, row
            self.row_cache[key] = row
            self.row_cache.move_to_end(key)
            while len(self.row_cache) > self.lp.row_cache:
                self.row_cache.popitem(last=False)

    def _receive(self, want: tuple[tuple[int, ...], tuple[int, ...]]) -> StepRows | None:
        """The worker's message for this step (its layout must be this step's); None after a timeout."""
        deadline = time.monotonic() + self.lp.rows_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            msg = self.rows_in.receive(left)
            if msg is None:
                break
            if (msg.qlens, msg.seq_lens) == want:
                return msg
            log.warning("lengthpred: dropped a prefill-state message for another step (tokens %s, wanted %s)",
                        msg.qlens[:8], want[0][:8])
        self.counts["messages_missing"] += 1
        log.error("lengthpred: no prefill states from the model within %.0f s; this step's prompts are served "
                  "FCFS-style", self.lp.rows_timeout_s)
        return None

    def _flush(self) -> None:
        """Checkpoint and stats while idle: vLLM's shutdown may stop this process before `shutdown()` runs (its API
        server sends SIGTERM while the workers exit), so what a restart resumes from is written when the last
        request leaves, on the checkpoint thread (a request arriving meanwhile does not wait for the write; the
        stats, written after it, count every update)."""
        self._dirty = False
        self.live.checkpoint_soon(then=self._write_stats)

    def _write_stats(self) -> None:
        path = self.lp.checkpoint.with_suffix(".stats.json")
        try:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(self.stats(), indent=2, default=float) + "\n")
            os.replace(tmp, path)
        except OSError as e:
            log.error("lengthpred: cannot write %s: %s", path, e.strerror)

    def _finished(self, r: Request) -> None:
        rid = r.request_id
        self._dirty = True
        row = self.rows.pop(rid, None)
        predicted = self.predicted.pop(rid, None)
        yields = self.yields.pop(rid, 0)
        self.counts["finished"] += 1
        if predicted is None and r.num_output_tokens > 0:
            self.counts["unpredictable"] += 1  # served without a prediction: FCFS-style, never yielding
        if self._log is not None:
            self._log.write({"request_id": rid, "prompt_hash": prompt_hash(r.prompt_token_ids or ()),
                             "arrival": r.arrival_time, "finished_at": time.time(), "prompt_tokens": r.num_prompt_tokens,
                             "predicted": predicted, "output_tokens": r.num_output_tokens, "finish": r.status.name,
                             "yields": yields})
        if r.status == RequestStatus.FINISHED_ABORTED:
            self.live.stats.aborted += 1
        elif row is not None:
            self.live.learn(row, int(r.num_output_tokens), capped=r.status == RequestStatus.FINISHED_LENGTH_CAPPED)

    # -- vLLM's bookkeeping, with parked requests counted ------------------------------------------------------------
    def finish_requests(self, request_ids: Any, finished_status: RequestStatus) -> list[Request]:
        done = super().finish_requests(request_ids, finished_status)
        if done:
            gone = {r.request_id for r in done}
            self.parked = [r for r in self.parked if r.request_id not in gone]
            for r in done:
                self._finished(r)
        return done

    def get_request_counts(self) -> tuple[int, int]:
        running, waiting = super().get_request_counts()
        return running + len(self.parked), waiting

    # -- what it reports ---------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        s = self.live.stats
        return {"policy": self.lp.policy, "predicted": s.predicted, "unpredictable": self.counts["unpredictable"],
                "updates": self.live.n_updates, "update_ms_mean": self.live.update_ms(),
                "predict_ms_mean": 1e3 * s.predict_s / s.predicted if s.predicted else math.nan,
                "censored_updates": s.censored, "aborted": s.aborted, "checkpoints": s.checkpoints,
                "yields": self.counts["yields"], "resumes": self.counts["resumes"],
                "kv_preempted": self.counts["kv_preempted"], "idle_slots": self.counts["idle_slots"],
                "rows_missing": self.counts["rows_missing"],
                "messages_missing": self.counts["messages_missing"], "row_cache_hits": self.counts["row_cache_hits"],
                "steps": self.counts["steps"], "plan_ms_per_step": (1e3 * self.counts["plan_s"] / self.counts["steps"]
                                                                     if self.counts["steps"] else math.nan),
                "plan_ms_total": 1e3 * self.counts["plan_s"], "rows_wait_ms_total": 1e3 * self.counts["rows_s"],
                "capture_ms_per_prefill_step": (1e3 * self.counts["capture_s"] / self.counts["messages"]
                                                if self.counts["messages"] else math.nan),
                "prefill_step_ms_median": (1e3 * float(np.median(list(self.prefill_steps)))  # a copy: off-thread reads
                                           if self.prefill_steps else math.nan),
                "prefill_steps": len(self.prefill_steps),
                "finished": self.counts["finished"], "parked_now": len(self.parked)}

    def stats_line(self) -> str:
        s = self.stats()
        return (f"lengthpred: {s['predicted']} predicted ({s['unpredictable']} unpredictable), {s['updates']} updates "
                f"({s['update_ms_mean']:.3f} ms each, {self.lp.updates}), {s['yields']} yields / {s['resumes']} resumes, "
                f"{s['kv_preempted']} KV preemptions, {s['idle_slots']} idle slot-steps, {s['parked_now']} parked, "
                f"predict {s['predict_ms_mean']:.3f} ms, plan {s['plan_ms_total']:.1f} ms total, "
                f"{s['checkpoints']} checkpoints")

    def shutdown(self) -> None:
        try:
            self.live.close()
            self._write_stats()
            log.info("%s (final)", self.stats_line())
            self.rows_in.close()
            if self._log is not None:
                self._log.close()
        finally:
            super().shutdown()
