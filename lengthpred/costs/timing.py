"""Timing primitives behind T6 (lengthpred/costs): capture overhead against a plain prefill, and
per-request predict/update latency, on one request at a time.

The extraction is timed by the clock of the device it runs on (`stopwatch`): on the CPU process CPU time
(`costs.clock=cpu`, least disturbed on a shared machine) or wall time; on a GPU, whose kernels run
asynchronously to the host, CUDA events around the work (`costs.clock=device`): a host clock there would time
the kernel launches, so `cpu` and `wall` are refused on a GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError, DataError
from lengthpred.features.capture import PrefillCapture
from lengthpred.features.extract import Plan, extract_batch
from lengthpred.models.device import input_device
from lengthpred.online.rls import RLSRegressor

PREFILL = "prefill"


def clock_name(kind: str, device: Any) -> str:
    """The clock `kind` stands for on `device` (`auto` resolved): what a costs file records."""
    if kind != "auto":
        return kind
    return "device" if getattr(device, "type", str(device)) == "cuda" else "cpu"


def stopwatch(kind: str, device: Any) -> Callable[[Callable[[], Any]], float]:
    """`time(work) -> seconds` by the clock of `device`: CUDA events on a GPU (`kind` `device` or `auto` there),
    process CPU time (`cpu`, `device` or `auto`) or wall time (`wall`) on the CPU (module docstring)."""
    on_gpu = getattr(device, "type", str(device)) == "cuda"
    kind = clock_name(kind, device)
    if on_gpu:
        if kind != "device":
            raise ConfigError(f"costs.clock={kind} times the host, but the model runs on {device}, whose kernels "
                              "run asynchronously: use costs.clock=device (CUDA events)")

        def cuda_time(work: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3  # ms → s

        return cuda_time
    now = time.perf_counter if kind == "wall" else time.process_time

    def host_time(work: Callable[[], Any]) -> float:
        t0 = now()
        work()
        return now() - t0

    return host_time


def extraction_times(
    model: Any,
    seqs: Sequence[Sequence[int]],
    variants: Mapping[str, Any],
    *,
    repeats: int,
    clock: str = "cpu",
    progress: bool = True,
) -> dict[str, list[float]]:
    """Seconds per repetition (summed over the prompts, one at a time) of a plain prefill (`prefill`: the
    decoder forward, no LM head, no KV cache) and of each variant (FeatureSettings) captured from that same
    forward; variants interleaved per repetition."""
    plans = {k: Plan(s, model) for k, s in variants.items()}
    device = input_device(model)
    batches = [  # on the model's device before any timing: the copy is not the work timed
        (torch.tensor([list(s)], dtype=torch.long, device=device), torch.ones((1, len(s)), dtype=torch.long,
                                                                                device=device))
        for s in seqs
    ]
    time_it = stopwatch(clock, device)

    def prefill_pass(todo: Sequence[tuple[Any, Any]] = batches) -> float:
        # the decoder forward extract_batch runs, without capture hooks: the difference is the capture alone
        def work() -> None:
            for ids, mask in todo:
                pos = torch.arange(ids.shape[1], device=ids.device)[None]
                decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)

        return time_it(work)

    def capture_pass(plan: Any, todo: Sequence[tuple[Any, Any]] = batches) -> float:
        with PrefillCapture(model, plan.hs_layers, plan.attn_layers, plan.settings.attn_chunk) as cap:
            return time_it(lambda: [extract_batch(model, plan, cap, ids, mask) for ids, mask in todo])

    decoder = model.get_decoder()
    out: dict[str, list[float]] = {PREFILL: [], **{k: [] for k in plans}}
    steps = [(PREFILL, None), *plans.items()]
    shortest = [min(batches, key=lambda b: b[0].shape[1])]
    with torch.no_grad():
        for _, plan in steps:  # warm-up on the shortest prompt: first calls allocate and pick kernels
            prefill_pass(shortest) if plan is None else capture_pass(plan, shortest)
        bar = tqdm(total=repeats * len(steps), desc="extraction overhead", unit="pass", disable=not progress)
        for _ in range(repeats):
            for name, plan in steps:
                out[name].append(prefill_pass() if plan is None else capture_pass(plan))
                bar.update(1)
        bar.close()
    return out


def overhead_pct(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """100·(median(variant) / median(prefill) − 1) for every variant."""
    base = statistics.median(times[PREFILL])
    return {k: 100.0 * (statistics.median(v) / base - 1.0) for k, v in times.items() if k != PREFILL}


def request_latencies(predict: Callable[[Any], Any], requests: Sequence[Any], repeats: int) -> list[float]:
    """Wall seconds of `predict(request)` for every request, `repeats` passes, after one warm-up call."""
    if not requests:
        raise DataError("no requests to time")
    predict(requests[0])
    times = []
    for _ in range(repeats):
        for x in requests:
            t0 = time.perf_counter()
            predict(x)
            times.append(time.perf_counter() - t0)
    return times


def per_request(x: Any) -> list[Any]:
    """Batch-size-1 inputs: rows of a 2-D array, one-item lists of a list of texts."""
    if isinstance(x, np.ndarray):
        return [x[i : i + 1] for i in range(len(x))]
    return [[v] for v in x]


def _ms(times: Sequence[float]) -> tuple[float, float]:
    return 1e3 * float(np.median(times)), 1e3 * float(np.percentile(times, 90))


def rls_latencies(
    X: np.ndarray, forgetting: float, repeats: int, *, alpha: float = 1.0, trace_cap: float | None = 10.0
) -> tuple[list[float], list[float]]:
    """(predict, update) wall seconds of an RLS readout on rows of X, one row per call. The readout is
    fitted on X itself with placeholder lengths: neither cost depends on the values, only on d."""
    X = np.asarray(X, dtype=np.float64)
    y = 50.0 + np.arange(len(X), dtype=np.float64)
    est = RLSRegressor(alpha, forgetting=forgetting, trace_cap=trace_cap).fit(X, y)
    rows = per_request(X)
    pred = request_latencies(est.predict, rows, repeats)
    upd = request_latencies(lambda x: est.partial_fit(x, y[:1]), rows, repeats)
    return pred, upd
