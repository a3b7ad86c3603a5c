"""Static batches (RL rollouts, padded serving): a batch of B requests runs until its longest member ends.

The end-to-end metric of ESTP and ForeLen. Requests are cut into consecutive batches of B after ordering
them by one of `FORMATIONS`:
- ``arrival``: the order they came in (a trace's order; a pool draw's order, which is random);
- ``random``: a fresh random permutation;
- ``predicted``: by a predictor's length, shortest first (ties at random);
- ``true``: by their own true length (the clairvoyant bound).

Each batch of b requests with longest output L_max and longest prompt P_max is padded to it: its prompts
are prefilled as b·P_max tokens, then it decodes L_max steps of b rows whose context grows from b·P_max,
each step costing the profile's ``t_base + t_seq·b + t_ctx·context`` (`lengthpred.sched.core.hardware`). KV memory
is not modelled (a static batch allocates it all up front).

- padding ratio = 1 − Σ lengths / Σ_batches (b × L_max): the share of decoded rows that are padding;
- useful-token throughput = Σ lengths / Σ batch times (tokens per second).

Workloads (`pool_draw`, `trace_draw`): the heads' test pool (each seed draws requests with replacement, one
sampled length each), and windows of a trace with the heads matched by length quantile
(`lengthpred.sched.traces.head_mapping`) and noisy oracles. With `pool_bootstrap` (`sched.batching.pool_bootstrap`,
the default) each seed first takes its own resample of the pool's prompts (`head_mapping.seed_pool`: the
same one the trace experiment uses for that seed), so the intervals over seeds cover the finite prompt pool
the heads' errors come from; every formation and predictor of a seed is cut from the same draw (paired).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError
from lengthpred.metrics import spearman_or_nan
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.metrics import bootstrap_mean_intervals
from lengthpred.sched.sweep.pool import LengthSource
from lengthpred.sched.traces.experiment import noisy_label
from lengthpred.sched.traces.head_mapping import PROMPT_MEAN, map_heads, seed_pool
from lengthpred.sched.traces.noisy_oracle import noisy_oracle
from lengthpred.sched.traces.windows import TraceWindow

__all__ = ["FORMATIONS", "POOL_DATA", "batch_order", "pool_draw", "run_batching", "static_batches",
           "summarize_batching", "trace_draw"]

FORMATIONS = ("arrival", "random", "predicted", "true")
TRUE, NONE = "true length", "none"  # predictor labels of the `true` and the order-only formations
POOL_DATA = "heads' test pool"  # the `data` label of the pool workload

Draw = Callable[[int], tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]


def pool_draw(pool: LengthSource, n: int, rho: list[tuple], pool_bootstrap: bool = True) -> Draw:
    """draw(seed) over the heads' pool: n requests with replacement, one sampled length each; the heads'
    predictions of their prompts and the prompt-mean (the mean-oracle: the leave-one-out mean of the
    prompt's other samples, without the request's own). With `pool_bootstrap` the requests come from the
    seed's own resample of the pool's prompts (`head_mapping.seed_pool`), a two-stage bootstrap: prompts,
    then requests. Appends (seed, predictor, Spearman) to `rho`."""

    def draw(seed: int):
        src = seed_pool(pool, seed, pool_bootstrap)
        req = src.draw(n, np.random.default_rng(seed))
        preds = {h: np.asarray(v)[req.idx] for h, v in src.preds.items()}
        if req.expected is not None:
            preds[PROMPT_MEAN] = req.expected
        rho.extend((seed, h, spearman_or_nan(req.output, p)) for h, p in preds.items())
        return req.output, req.prompt, preds

    return draw


def trace_draw(by_seed: dict[int, TraceWindow], pool: LengthSource | None, levels: Sequence[float],
               rho: list[tuple], pool_bootstrap: bool = True) -> Draw:
    """draw(seed) over a trace: the window `by_seed[seed]`, with noisy oracles at `levels` and the heads
    matched by length quantile (from the seed's own pool resample when `pool_bootstrap`); the streams are
    the trace experiment's (`trace_experiment.run_traces`). Appends (seed, predictor, Spearman) to `rho`."""

    def draw(seed: int):
        w = by_seed[seed]
        rng = np.random.default_rng([seed, 16])
        preds = {noisy_label(x): noisy_oracle(w.output, float(x), rng=rng) for x in levels}
        if pool is not None:
            preds.update(map_heads(seed_pool(pool, seed, pool_bootstrap), w.output, rng)[0])
        rho.extend((seed, h, spearman_or_nan(w.output, p)) for h, p in preds.items())
        return w.output, w.prompt, preds

    return draw


def batch_order(formation: str, output: np.ndarray, rng: np.random.Generator,
                pred: np.ndarray | None = None) -> np.ndarray:
    """The order requests are cut into batches in (indices into `output`)."""
    n = len(output)
    if formation == "arrival":
        return np.arange(n)
    if formation == "random":
        return rng.permutation(n)
    if formation == "true":
        return np.lexsort((rng.random(n), output))
    if formation == "predicted":
        if pred is None or len(pred) != n:
            raise ConfigError("batch formation 'predicted' needs one prediction per request")
        return np.lexsort((rng.random(n), pred))
    raise ConfigError(f"batch formation {formation!r}; valid: {', '.join(FORMATIONS)}")


def static_batches(output: np.ndarray, prompt: np.ndarray, order: np.ndarray, batch_size: int,
                   profile: HardwareProfile) -> dict[str, float]:
    """Padding ratio, useful tokens, time (s) and useful-token throughput of serving the requests in
    `order`, cut into consecutive batches of `batch_size` (the last one may be smaller)."""
    if batch_size < 1:
        raise ConfigError(f"batch size {batch_size} must be >= 1")
    L = np.asarray(output, dtype=float)[order]  # [n]
    P = np.asarray(prompt, dtype=float)[order]  # [n]
    starts = np.arange(0, len(L), batch_size)  # [batches]
    b = np.diff(np.append(starts, len(L))).astype(float)  # [batches] rows per batch
    lmax = np.maximum.reduceat(L, starts)  # [batches]
    pmax = np.maximum.reduceat(P, starts)  # [batches]
    decode = lmax * (profile.t_base + profile.t_seq * b + profile.t_ctx * b * pmax) \
        + profile.t_ctx * b * lmax * (lmax - 1) / 2  # Σ over steps k < L_max of t_ctx·b·k
    time = float(np.sum(b * pmax * profile.t_prefill_token + decode))
    useful = float(L.sum())
    return {"padding_ratio": 1.0 - useful / float(np.sum(b * lmax)), "useful_tokens": useful,
            "time_s": time, "throughput": useful / time if time > 0 else float("nan"),
            "batches": float(len(starts))}


def run_batching(draw: Draw, *, data: str,
                 profile: HardwareProfile, seeds: Sequence[int], batch_sizes: Sequence[int],
                 formations: Sequence[str] = FORMATIONS) -> pd.DataFrame:
    """Runs over seeds: `draw(seed)` gives (output, prompt, predictions by name) of that seed's requests;
    every formation (``predicted`` once per predictor) is cut at every batch size. One row per (batch size,
    formation, predictor, seed, metric): ``data, hardware, batch_size, formation, predictor, seed, metric,
    value``; ``throughput_gain`` is each run's throughput over the same seed's arrival-order throughput − 1."""
    rows: list[tuple[Any, ...]] = []
    for seed in seeds:
        output, prompt, preds = draw(int(seed))
        rng = np.random.default_rng([int(seed), 3])
        for B in batch_sizes:
            runs: list[tuple[str, str, dict[str, float]]] = []
            for f in formations:
                if f == "predicted":
                    for name, p in preds.items():
                        runs.append((f, name, static_batches(output, prompt, batch_order(f, output, rng, p), B, profile)))
                else:
                    label = TRUE if f == "true" else NONE
                    runs.append((f, label, static_batches(output, prompt, batch_order(f, output, rng), B, profile)))
            base = next((r[2]["throughput"] for r in runs if r[0] == "arrival"), float("nan"))
            for f, name, res in runs:
                res = {**res, "throughput_gain": res["throughput"] / base - 1.0}
                rows += [(data, profile.name, int(B), f, name, int(seed), k, v) for k, v in res.items()]
    return pd.DataFrame(rows, columns=["data", "hardware", "batch_size", "formation", "predictor", "seed", "metric",
                                       "value"])


def summarize_batching(runs: pd.DataFrame, level: float = 0.95, n_boot: int = 2000) -> pd.DataFrame:
    """Mean over seeds with a percentile-bootstrap interval (resampling seeds; it stays in the range of the
    seeds' values) per (data, hardware, batch size, formation, predictor, metric); n = seeds."""
    keys = ["data", "hardware", "batch_size", "formation", "predictor", "metric"]
    wide = runs.set_index([*keys, "seed"])["value"].unstack("seed")  # [groups, seeds]
    v = wide.to_numpy(float)
    mean, lo, hi = bootstrap_mean_intervals(v, level, n_boot)
    return wide.index.to_frame(index=False).assign(value=mean, ci_low=lo, ci_high=hi,
                                                   n=np.isfinite(v).sum(axis=1).astype(int))
