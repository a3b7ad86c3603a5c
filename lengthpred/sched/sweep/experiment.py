"""Policies × predictors × loads × seeds on one length source, and the files the tables read.

Each seed draws its requests from the source's pool, each request with one of its prompt's sampled lengths
(lengthpred.sched.sweep.pool), and its prompt's real token count; every load and policy of a seed serves the same
requests. Outputs (tidy; `load` is the offered load as a fraction of the server's capacity, see
`lengthpred.sched.core.workload.capacity`):

- ``sched_runs.csv``: one row per run and metric: ``experiment, hardware, data, policy, predictor, load,
  seed, metric, value``.
- ``sched_results.csv`` (read by T5): ``experiment, hardware, data, policy, predictor, load, metric,
  value, ci_low, ci_high, n``: mean over seeds with a percentile-bootstrap 95% interval of that mean
  (resampling seeds; it stays inside the range of the seeds' values), n = seeds.
- ``sched_gains.csv``: per (policy, predictor, load) the paired-over-seeds gain of mean per-token latency
  over FCFS (``gain_vs_fcfs``, a fraction: 1 − mean(x)/mean(FCFS)) and its share of the oracle's gain
  (``share_of_oracle``; oracle = the clairvoyant oracle policy with the lowest mean, as T5 takes it), means
  over seeds with paired-bootstrap CIs over seeds; ``undefined`` at a load where the oracle's own gain
  interval does not lie above 0 (lengthpred.sched.sweep.summary).
- ``sched_latencies.parquet``: ``policy, predictor, load, latency`` (per-token latency, s, one row per
  finished request of the first seed): the latency CDF data.
- ``latency_vs_load.png``.

Metrics (``lengthpred.sched.core.metrics.summarize``): ``per_token_latency_{mean,p50,p99}`` (s/token),
``jct_{mean,p99}``, ``ttft_{mean,p99}`` (s), ``throughput`` (output tokens/s), ``preemptions``,
``preempt_overhead`` (share of the run spent re-prefilling or swapping preempted requests),
``recompute_tokens``, ``max_wait`` (s before first admission), ``n_finished``, ``n_rejected``,
``n_unfinished``.
Predictor labels: a head's name, ``<head>+online`` (OnlineScaledPredictor over it), ``mean-oracle`` (the
leave-one-out mean of the prompt's other sampled lengths: its expected length without the request's own
sample), ``random`` (a random length per prompt, fixed per seed: the zero anchor for shares of the oracle's
gain), ``none`` for policies that use no prediction (FCFS, MLFQ), ``clairvoyant`` for oracle policies (each
request's own sampled length).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from lengthpred.errors import ConfigError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.metrics import latency_cdf, summarize, t_interval  # noqa: F401  (re-exported)
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.predictors import ArrayPredictor, OnlineScaledPredictor, QueueTIEPredictor
from lengthpred.sched.core.simulator import simulate
from lengthpred.sched.core.workload import Workload, capacity, scale_to_rate
from lengthpred.sched.sweep.pool import (
    CLAIRVOYANT,
    MEAN_ORACLE,
    NO_PREDICTOR,
    RANDOM,
    LengthSource,
    Requests,
    random_keys,
)
from lengthpred.sched.sweep.summary import KEY, format_table, gains, short_t5, summarize_runs  # noqa: F401  (re-exported)

log = logging.getLogger("lengthpred.sched")


@dataclass
class PolicySpec:
    name: str
    label: str
    kwargs: dict[str, Any]
    sim: dict[str, Any]  # simulate() keywords for this entry only (aging, max_preemptions, preemption)


def parse_policies(items: list[Any]) -> list[PolicySpec]:
    """Config entries: a registry name, or `{name: ..., label: ..., <constructor keywords>}`; the keys
    aging, max_preemptions and preemption go to the simulator for that entry."""
    out = []
    for it in items:
        if isinstance(it, str):
            out.append(PolicySpec(it, it, {}, {}))
        else:
            d = dict(it)
            if "name" not in d:
                raise ConfigError(f"policy entry {d} has no name")
            name = d.pop("name")
            sim = {k: d.pop(k) for k in ("aging", "max_preemptions", "preemption") if k in d}
            out.append(PolicySpec(name, d.pop("label", name), d, sim))
        make_policy(out[-1].name, **out[-1].kwargs)  # fail on a bad name or keyword before any work
    return out


def run_grid(
    source: LengthSource,
    profile: HardwareProfile,
    policies: list[PolicySpec],
    *,
    loads: list[float],
    seeds: list[int],
    n_requests: int,
    predictors: list[str] | None = None,
    online: bool = False,
    arrival: str = "poisson",
    cv: float = 1.0,
    accept_beta: tuple[float, float] = (7.0, 3.0),
    speculative: bool = False,
    warmup: float = 0.0,
    sim: dict[str, Any] | None = None,
    mean_oracle: bool = True,
    random_predictor: bool = False,
    progress: bool = True,
    acceptance: Callable[[Requests, int], tuple[np.ndarray, list[np.ndarray] | None]] | None = None,
    capacity_mean_steps: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the grid; returns (runs, latencies) frames (schemas in the module docstring). Within a seed every
    policy, predictor and load sees the same requests, sampled lengths and arrival pattern (common random
    numbers). `mean_oracle` adds the `mean-oracle` predictor (the leave-one-out mean of the prompt's other
    samples) to every policy that reads predictions, when the source has sampled lengths; `random_predictor`
    adds `random` (a random length per prompt, fixed per seed), the zero anchor for shares. `acceptance(requests,
    seed) -> (rates, sequences or None)` replaces the Beta(`accept_beta`) draw (measured acceptance,
    lengthpred.sched.spec.experiment) and draws nothing from the seed's stream; `capacity_mean_steps` sets
    loads from each request's own steps (`capacity(mean_steps=True)`)."""
    preds = list(source.preds) if predictors is None else list(predictors)
    unknown = sorted(set(preds) - set(source.preds))
    if unknown:
        raise ConfigError(f"predictors {unknown} not in {source.name}; present: {sorted(source.preds)}")
    if online:
        preds += [f"{p}+online" for p in preds]
    if mean_oracle and source.has_samples:
        preds.append(MEAN_ORACLE)
    if random_predictor:
        if RANDOM in source.preds:
            raise ConfigError(f"a predictor of {source.name} is named {RANDOM!r}, the random anchor's label; rename it")
        preds.append(RANDOM)
    sim = dict(sim or {})
    rows, lat = [], []
    warned: set[tuple[int, float]] = set()
    jobs = [(s, ld) for s in seeds for ld in loads]
    for seed, load in tqdm(jobs, desc="simulate", disable=not progress):
        rng = np.random.default_rng(seed)
        req = source.draw(n_requests, rng)  # the same requests (and sampled lengths) at every load of a seed
        out, prm = req.output, req.prompt
        if acceptance is None:
            acc, seq = rng.beta(*accept_beta, len(out)), None
        else:
            acc, seq = acceptance(req, seed)
        cap = capacity(profile, prm, out, acc, speculative, mean_steps=capacity_mean_steps)
        if source.arrival is None:
            gaps = rng.exponential(1.0, len(out)) if arrival == "poisson" else rng.gamma(1 / cv**2, cv**2, len(out))
            arr = np.cumsum(gaps) / (load * cap)
        else:
            arr = scale_to_rate(source.arrival[req.idx], load * cap)  # rescale the trace to this load
        wl = Workload(arr, prm, out, acc, seq)
        for ps in policies:
            policy = make_policy(ps.name, **ps.kwargs)
            names = preds if policy.needs_prediction else [
                CLAIRVOYANT if "oracle" in ps.name or ps.kwargs.get("oracle") else NO_PREDICTOR]
            for pname in names:
                policy = make_policy(ps.name, **ps.kwargs)
                predictor = _predictor(source, pname, req, seed)
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    res = simulate(wl, profile, policy, predictor, speculative=speculative, seed=seed,
                                   **{**sim, **ps.sim})
                if w and (seed, load) not in warned:
                    warned.add((seed, load))
                    log.warning("load %s, seed %s: %s", load, seed, w[0].message)
                for k, v in summarize(res, warmup).items():
                    rows.append((profile.name, source.name, ps.label, pname, float(load), seed, k, v))
                if seed == seeds[0]:
                    done = res.finished
                    ptl = ((res.finish - res.arrival) / res.output)[done]
                    lat.append(pd.DataFrame({"policy": ps.label, "predictor": pname, "load": float(load),
                                             "latency": ptl}))
    runs = pd.DataFrame(rows, columns=["hardware", "data", "policy", "predictor", "load", "seed", "metric", "value"])
    return runs, (pd.concat(lat, ignore_index=True) if lat else pd.DataFrame())


def _predictor(source: LengthSource, name: str, req: Requests, seed: int = 0) -> Any:
    """The predictor a label names; None for the oracle policies and those without one (they read the
    workload's own lengths, or nothing)."""
    if name in (NO_PREDICTOR, CLAIRVOYANT):
        return None
    if name == MEAN_ORACLE:
        return ArrayPredictor(req.expected, name=name)
    if name == RANDOM:
        return ArrayPredictor(random_keys(len(source.output), req.idx, req.output, seed), name=name)
    if name.endswith("+online"):
        return OnlineScaledPredictor(source.preds[name[: -len("+online")]][req.idx], name=name)
    if name in source.tails:
        return QueueTIEPredictor(source.preds[name][req.idx], source.tails[name][req.idx], name=name)
    return ArrayPredictor(source.preds[name][req.idx], name=name)


def plot_latency_vs_load(summary: pd.DataFrame, path: str | Path) -> None:
    """Mean and p99 per-token latency against load, one line per policy × predictor, 95% interval bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    cmap = plt.get_cmap("tab20")
    for ax, metric in zip(axes, ("per_token_latency_mean", "per_token_latency_p99"), strict=True):
        sub = summary[summary["metric"] == metric]
        for k, ((pol, pred), g) in enumerate(sub.groupby(["policy", "predictor"])):
            g = g.sort_values("load")
            ax.plot(g["load"], g["value"], marker="o", ms=3, color=cmap(k % 20), label=f"{pol} / {pred}",
                    ls="-" if pred in (NO_PREDICTOR, CLAIRVOYANT, MEAN_ORACLE, RANDOM) else "--")
            if g["ci_low"].notna().any():
                lo = np.maximum(g["ci_low"], g["value"] * 0.5)  # a log axis cannot show a CI through zero
                ax.fill_between(g["load"], lo, g["ci_high"], color=cmap(k % 20), alpha=0.08)
        ax.set_xlabel("offered load (fraction of capacity)")
        ax.set_ylabel(f"{metric} (s/token)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
