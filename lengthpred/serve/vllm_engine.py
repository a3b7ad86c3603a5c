"""vLLM's engine driven in-process, one `step()` at a time, with priority scheduling.

`VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps the engine core in this process (vLLM's `InprocClient`): each
`LLMEngine.step()` schedules, runs the model and returns, so the replay loop times every step exactly
and nothing runs behind its back. A thin wrapper on the scheduler's `schedule()` reads what each step
runs (requests, prompt tokens prefilled, context held), the inputs of the step-time fit. Every request
replays a known length: `ignore_eos` with `max_tokens` set to it, as serving benchmarks do, so runs
under different policies do identical work. With `natural_eos` (serve.answers=natural) an answer ends at the
model's own end of sequence and `max_tokens` is only its cap; each request then samples with a seed drawn
from its token ids, so every policy's run of a repeat samples the same answers as far as the batch's
arithmetic allows. Prefix caching is off: the simulator does not model it and
a cached prompt would make a repeat run cheaper than the first.

With `capture_layer` (the predictor reads the engine's own prefill, `serve.predictor.source=engine`) a
forward hook on that decoder layer of the in-process model (`EngineCore.model_executor.driver_worker.worker.
model_runner`, the CPU build's V1 model runner) copies the last-prompt-token state of requests added with
`capture=True` (`lengthpred.serve.engine_readout`); the step layout comes from the runner's input batch.
It needs eager mode (a compiled or graph-captured forward would not run a Python hook) and pairs with
prefix caching, which is then on, every request salted with its own id (`cache_salt`) so that only the two
phases of one request share KV: nothing is shared across requests or runs, as with caching off.
"""

from __future__ import annotations

import heapq
import logging
import os
import sys
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError, ModelError
from lengthpred.serve.engine import EngineLimits, RequestRejected, StepInfo
from lengthpred.serve.engine_readout import StateCapture, StepLayout, decoder_layer

log = logging.getLogger(__name__)

SETUP_HINT = "create it with `make serve-setup` (the vLLM venv .venv-vllm) and run `.venv-vllm/bin/python scripts/serve.py`"


def engine_error(what: str) -> ModelError:
    """One line naming the interpreter's venv and the command that creates a working one."""
    return ModelError(f"{what} in the venv {sys.prefix}; {SETUP_HINT}")


class VLLMEngine:
    name = "vllm"

    def __init__(self, checkpoint: str, *, dtype: str = "bfloat16", max_model_len: int = 2048,
                 max_num_seqs: int = 8, max_num_batched_tokens: int = 2048, seed: int = 0,
                 temperature: float = 0.7, top_p: float = 0.9, engine_args: dict[str, Any] | None = None,
                 capture_layer: int | None = None, prefix_caching: bool = False, natural_eos: bool = False) -> None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # must be set before vllm reads its envs
        try:
            from vllm import EngineArgs
            from vllm.sampling_params import RequestOutputKind, SamplingParams
            from vllm.v1.engine.llm_engine import LLMEngine
        except ImportError as e:
            raise engine_error(f"vLLM cannot be imported ({e})") from None
        self._SamplingParams, self._kind = SamplingParams, RequestOutputKind.DELTA
        try:  # vLLM's own validation errors (prompt too long, ...) are not all ValueErrors
            from vllm.exceptions import VLLMClientError

            self._rejectable: tuple[type[BaseException], ...] = (ValueError, TypeError, VLLMClientError)
        except ImportError:
            self._rejectable = (ValueError, TypeError)
        self.temperature, self.top_p = temperature, top_p
        self.natural_eos, self.seed = bool(natural_eos), int(seed)
        kw: dict[str, Any] = dict(model=checkpoint, dtype=dtype, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                                  max_num_batched_tokens=max_num_batched_tokens, scheduling_policy="priority",
                                  enable_prefix_caching=prefix_caching, enforce_eager=True, seed=seed,
                                  disable_log_stats=True)
        kw.update(engine_args or {})
        if capture_layer is not None and not kw["enforce_eager"]:
            raise ConfigError("the engine's own prefill is read by a forward hook, which a compiled forward does not "
                              "run: keep enforce_eager true with serve.predictor.source=engine")
        self.prefix_caching = bool(kw["enable_prefix_caching"])
        try:
            self.llm = LLMEngine.from_engine_args(EngineArgs(**kw))
        except Exception as e:  # vLLM raises many kinds at start-up; the user needs one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise engine_error(f"the vLLM engine failed to start ({type(e).__name__}: {first[:200]})") from None
        core = getattr(self.llm.engine_core, "engine_core", None)
        if core is None:
            raise engine_error("vLLM started its engine in another process (VLLM_ENABLE_V1_MULTIPROCESSING=0 was "
                               "ignored); per-step timing needs it in-process")
        self.scheduler = core.scheduler
        self._wrap_schedule()
        cache = self.llm.vllm_config.cache_config
        sched_cfg = self.llm.vllm_config.scheduler_config
        self.limits = EngineLimits(max_batch=int(sched_cfg.max_num_seqs),
                                   token_budget=int(sched_cfg.max_num_batched_tokens),
                                   kv_blocks=int(cache.num_gpu_blocks or 1), block_size=int(cache.block_size),
                                   max_model_len=int(self.llm.model_config.max_model_len))
        self._step: StepInfo | None = None
        self.capture: StateCapture | None = None
        self._engine_ids: dict[str, str] = {}  # request → the id vLLM schedules it under
        self._seeds: dict[str, int] = {}  # natural answers: salt (or request id) → its sampling seed
        if capture_layer is not None:
            runner = self._model_runner(core)
            layers = runner.get_model().model.layers
            self.capture = StateCapture(decoder_layer(layers, int(capture_layer)), lambda: _layout(runner))

    @staticmethod
    def _model_runner(core: Any) -> Any:
        """The in-process model runner (vLLM V1: UniProcExecutor → WorkerWrapperBase → worker → runner)."""
        try:
            runner = core.model_executor.driver_worker.worker.model_runner
            runner.input_batch, runner.query_start_loc  # noqa: B018 (the step layout the hook reads)
            return runner
        except AttributeError as e:
            raise engine_error(f"this vLLM build does not expose its model runner in-process ({e}); the engine's "
                               "own prefill cannot be read: use serve.predictor.source=worker") from None

    def _wrap_schedule(self) -> None:
        """Record each step's work right after scheduling, while finished requests still exist."""
        sched = self.scheduler
        original = sched.schedule

        def schedule(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            info = StepInfo(batch=len(out.num_scheduled_tokens), n_preempted=len(out.preempted_req_ids or ()))
            for rid, k in out.num_scheduled_tokens.items():
                req = sched.requests[rid]
                after = int(req.num_computed_tokens)  # advanced by `k` inside schedule()
                if after - k < int(req.num_tokens) - 1:  # a prompt (or a recomputed context) chunk
                    info.prefill_tokens += int(k)
                info.ctx_tokens += after
            self._step = info
            return out

        sched.schedule = schedule

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, priority: int, arrival_time: float, *,
            capture: bool = False, cache_salt: str | None = None) -> None:
        from vllm.inputs import TokensPrompt

        if capture and self.capture is None:
            raise ConfigError("capture=True needs an engine started with capture_layer")
        prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        if self.prefix_caching:  # only requests with one salt (the two phases of one request) share KV
            prompt["cache_salt"] = cache_salt or rid
        try:
            # one seed per answer: a decode phase re-added under its request's salt keeps its prefill's seed
            # (its continuation is still sampled afresh from the first token)
            key = cache_salt or rid
            if self.natural_eos and key not in self._seeds:
                self._seeds[key] = answer_seed(prompt_ids, self.seed)
            natural = {"seed": self._seeds[key]} if self.natural_eos else {}
            params = self._SamplingParams(max_tokens=int(max_tokens), ignore_eos=not self.natural_eos,
                                          temperature=self.temperature, top_p=self.top_p, detokenize=False,
                                          output_kind=self._kind, **natural)
            engine_id = self.llm.add_request(rid, prompt, params, arrival_time=arrival_time, priority=int(priority))
        except self._rejectable as e:  # vLLM's validation: prompt too long, bad sampling settings
            raise RequestRejected(f"request {rid}: {str(e).strip().splitlines()[0][:300]}") from None
        self._engine_ids[rid] = str(engine_id or rid)  # vLLM adds a suffix to the id it schedules
        if capture and self.capture is not None:
            self.capture.want(self._engine_ids[rid], rid)

    def step(self) -> StepInfo:
        self._step = None
        outs = self.llm.step()
        info = self._step or StepInfo()
        for o in outs:
            n = sum(len(c.token_ids) for c in o.outputs)
            if n:
                info.new_tokens[o.request_id] = n
                info.token_ids[o.request_id] = [int(x) for c in o.outputs for x in c.token_ids]
            if o.finished:
                info.finished.append(o.request_id)
                self._engine_ids.pop(o.request_id, None)
        info.n_waiting = len(self.scheduler.waiting) + len(getattr(self.scheduler, "kv_holding_waiting", ()) or ())
        info.n_running = len(self.scheduler.running)
        if self.capture is not None:
            info.captured = self.capture.take()
        return info

    def waiting_keys(self) -> list[tuple[int, float]]:
        return [(int(r.priority), float(r.arrival_time)) for r in self.scheduler.waiting]

    def n_running(self) -> int:
        return len(self.scheduler.running)

    def set_priority(self, rid: str, priority: int) -> None:
        req = self.scheduler.requests.get(self._engine_ids.get(rid, rid))
        if req is not None:  # vLLM's preemption victim is the running request with the largest (priority, arrival)
            req.priority = int(priority)

    def reprioritize(self, key: Callable[[str], int]) -> None:
        """Give every request waiting in the engine the priority `key(request id)` (an aging policy's key,
        re-set before each step). vLLM fixes a priority at `add`; in-process its priority scheduler keeps the
        waiting requests (and those waiting with KV held) in heaps ordered by (priority, arrival), so they are
        re-keyed there and re-heaped; re-keying moves no KV and recomputes nothing."""
        ext = {e: r for r, e in self._engine_ids.items()}
        for name in ("waiting", "kv_holding_waiting"):
            queue = getattr(self.scheduler, name, None)
            if queue is None or not len(queue):
                continue
            heap = getattr(queue, "_heap", None)
            if heap is None:
                raise ConfigError(f"this vLLM build's {name} queue is not a priority heap; an aging policy needs "
                                  "scheduling_policy=priority")
            for req in heap:
                rid = ext.get(req.request_id)
                if rid is not None:
                    req.priority = int(key(rid))
            heapq.heapify(heap)

    def has_unfinished(self) -> bool:
        return bool(self.llm.has_unfinished_requests())

    def abort(self, rids: list[str]) -> None:
        if rids:
            self.llm.abort_request(list(rids))
        for r in rids:
            self._engine_ids.pop(r, None)
        if self.capture is not None:
            gone = set(rids)
            self.capture.forget([e for e, r in self.capture.wanted.items() if r in gone])


def answer_seed(prompt_ids: list[int], seed: int) -> int:
    """A request's sampling seed from its tokens (natural answers): the same prompt samples alike under every
    policy, whichever position or id it has in the run."""
    return zlib.crc32(np.asarray(prompt_ids, dtype=np.int64).tobytes(), seed & 0xFFFFFFFF)


def _layout(runner: Any) -> StepLayout:
    """The running step's layout, from the V1 model runner's persistent batch (set before the forward)."""
    ib = runner.input_batch
    n = int(ib.num_reqs)
    return StepLayout(ib.req_ids[:n], runner.query_start_loc.np[: n + 1], ib.num_computed_tokens_cpu[:n],
                      ib.num_prompt_tokens[:n])
