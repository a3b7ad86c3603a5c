"""Refined schedulers on T5's workloads (issue 27 item 4): FCFS, prompt-only SJF/SRPT, refined SJF/SRPT over
sources of checkpoint predictions (`lengthpred.sched.core.refine`), and the clairvoyant oracles.

Each seed draws its requests and arrivals from the same random stream as `experiment.run_grid` (T5), so a seed
and load here serve the very requests T5 served. Predictor labels (the `source` of each row):

- ``none`` / ``clairvoyant``: FCFS / the oracle policies (T5's);
- ``prompt``: the prompt-only head's prediction (SJF: its total; refined rows: minus tokens generated);
- ``oracle-remaining``: the true remaining length at each checkpoint (source a);
- ``decode-cal``: true remaining × log-normal noise fitted per checkpoint to the decode head's measured Spearman
  (source c, a model of the head); ``prompt-cal``: the same noise model fitted to the prompt-only head's
  Spearman at t = 0 and frozen over the request's life (rho = 1): the baseline inside the noise model;
- ``decode:<label>``: a decode head's own predictions, per request and checkpoint, from a decode curve's
  `checkpoints.parquet` (`checkpoint_pool`): the pool is then the curve's test answers, each request replaying
  one answer at its own length, and ``prompt`` is the curve's prompt-only head on the same answers.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.artefacts import CHECKPOINT_PRED, PROMPT_ONLY
from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.core.metrics import summarize
from lengthpred.sched.core.policies import make_policy
from lengthpred.sched.core.predictors import ArrayPredictor
from lengthpred.sched.core.refine import (
    RefinedPredictor,
    calibrated_source,
    oracle_source,
    prompt_source,
    remaining_from_end,
)
from lengthpred.sched.core.simulator import OverloadWarning, simulate
from lengthpred.sched.core.workload import Workload, capacity
from lengthpred.sched.sweep.pool import CLAIRVOYANT, NO_PREDICTOR, LengthSource

SOURCES = (NO_PREDICTOR, CLAIRVOYANT, "prompt", "oracle-remaining", "decode-cal", "prompt-cal")
MEASURED = "decode:"  # prefix of a source read from checkpoints.parquet's `pred:<label>` column


@dataclass
class Entry:
    label: str  # the policy column of the runs frame
    policy: str  # registry name
    source: str  # one of SOURCES
    sim: dict[str, Any] = field(default_factory=dict)  # simulate() keywords for this row (max_preemptions, …)
    rho: float | None = None  # decode-cal only: this row's noise correlation between checkpoints (None: the run's)


def parse_entries(items: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """Config entries `{label, policy, source, <simulate keywords>}`; one line for a bad one."""
    out = []
    for it in items:
        d = dict(it)
        try:
            e = Entry(d.pop("label"), d.pop("policy"), d.pop("source"), rho=d.pop("rho", None), sim=d)
        except KeyError as k:
            raise ConfigError(f"refined entry {it} lacks {k}") from None
        measured = isinstance(e.source, str) and e.source.startswith(MEASURED) and len(e.source) > len(MEASURED)
        if e.source not in SOURCES and not measured:
            raise ConfigError(f"refined entry {e.label}: source {e.source!r}; valid: {', '.join(SOURCES)}, "
                              f"{MEASURED}<label>")
        make_policy(e.policy)
        out.append(e)
    return out


def pool_lengths(source: LengthSource) -> np.ndarray:
    """Every sampled length of the pool (the lengths requests draw), for fitting the noise model."""
    if source.samples is not None:
        return np.concatenate([np.asarray(s, dtype=float) for s in source.samples])
    return np.asarray(source.output, dtype=float)


def checkpoint_pool(frame: pd.DataFrame, every: int, name: str) -> tuple[LengthSource, dict[str, np.ndarray]]:
    """A decode curve's `checkpoints.parquet` as a pool of its test answers (output: the answer's length, so
    every request replays the answer its predictions were made on) and, per `pred:<label>` column, an [answers,
    C] table of remaining-length predictions at t = 0, k, 2k, … up to the longest answer. Past an answer's last
    stored checkpoint (a store cut at `decode.max_t`) the prediction made there stands: its predicted end E
    counts down, and a request that outlives E expects as many tokens again as it made beyond E, the rule the
    `prompt` source (`prompt_source`) applies over the whole life, so no source keys an outliving request as
    one token from its end. `prompt-only` at t = 0 is the prompt head's total: the pool's `prompt-only`
    predictor (prompt-only SJF)."""
    if every < 1:
        raise ConfigError(f"checkpoint interval every={every} must be >= 1")
    need = {"id", "t", "length", "prompt_tokens", CHECKPOINT_PRED + PROMPT_ONLY}
    if missing := sorted(need - set(frame.columns)):
        raise DataError(f"{name}: checkpoints lack columns {missing} (written by scripts/decode_curve.py)")
    if frame.empty:
        raise DataError(f"{name}: no checkpoints")
    frame = frame.assign(id=frame["id"].astype(str))
    if frame.duplicated(["id", "t"]).any():
        raise DataError(f"{name}: an (id, t) checkpoint appears twice")
    t = frame["t"].to_numpy(dtype=np.int64)
    if np.any(t % every):
        raise DataError(f"{name}: checkpoints at t={sorted(set(t[t % every != 0]))[:3]} are off the every={every} "
                        "grid: set sched.refined.every to the decode store's decode.every")
    ids, pos = np.unique(frame["id"].to_numpy(), return_inverse=True)
    first = frame[t == 0].set_index("id")
    if len(first) != len(ids):
        raise DataError(f"{name}: {len(ids) - len(first)} answers have no t = 0 checkpoint")
    first = first.loc[ids]
    length = np.maximum(first["length"].to_numpy(dtype=np.int64), 1)
    j = t // every
    width = max(int(j.max()), int((length.max() - 1) // every)) + 1
    grid = np.arange(width, dtype=float) * every
    tables = {}
    for col in (c for c in frame.columns if c.startswith(CHECKPOINT_PRED)):
        tab = np.full((len(ids), width), np.nan)
        tab[pos, j] = frame[col].to_numpy(dtype=float)
        stored = ~np.isnan(tab)
        last = width - 1 - np.argmax(stored[:, ::-1], axis=1)  # each answer's last stored checkpoint
        end = last * every + tab[np.arange(len(ids)), last]  # its predicted end there
        tail = ~stored & (np.arange(width)[None, :] > last[:, None])
        tab[tail] = remaining_from_end(end[:, None], grid[None, :])[tail]
        if np.isnan(tab).any():  # a gap between stored checkpoints: count down from the one before
            for c in range(1, width):
                gap = np.isnan(tab[:, c])
                tab[gap, c] = tab[gap, c - 1] - every
        tables[col.removeprefix(CHECKPOINT_PRED)] = tab
    src = LengthSource(name, output=length, prompt=first["prompt_tokens"].to_numpy(dtype=np.int64),
                       preds={PROMPT_ONLY: np.maximum(tables[PROMPT_ONLY][:, 0], 1.0)})
    return src, tables


def run_refined(source: LengthSource, profile: HardwareProfile, entries: Sequence[Entry], *, head: str,
                loads: Sequence[float], seeds: Sequence[int], n_requests: int, every: int,
                sigma_decode: Mapping[float, float] | None = None, sigma_prompt: float | None = None,
                rho: float = 0.9, sim: Mapping[str, Any] | None = None,
                accept_beta: tuple[float, float] = (7.0, 3.0),
                tables: Mapping[str, np.ndarray] | None = None) -> pd.DataFrame:
    """The runs frame (`experiment.run_grid`'s schema) of every entry × load × seed. `tables`: the
    `checkpoint_pool` tables of the `decode:<label>` sources (aligned with `source`'s entries)."""
    if head not in source.preds:
        raise ConfigError(f"head {head!r} not in {source.name}; present: {sorted(source.preds)}")
    for e in entries:
        label = e.source.removeprefix(MEASURED)
        if e.source.startswith(MEASURED) and label not in (tables or {}):
            raise ConfigError(f"refined entry {e.label}: source {e.source} needs a decode curve's checkpoints "
                              f"(sched.refined.checkpoints) with a pred:{label} column; have {sorted(tables or {})}")
        if (e.source == "decode-cal" and sigma_decode is None) or (e.source == "prompt-cal" and sigma_prompt is None):
            raise ConfigError(f"refined entry {e.label}: source {e.source} is the noise model, not fitted in this run")
    rows = []
    for seed in seeds:
        for load in loads:
            rng = np.random.default_rng(seed)  # run_grid's stream: T5's requests and arrivals
            req = source.draw(n_requests, rng)
            out, prm = req.output, req.prompt
            acc = rng.beta(*accept_beta, len(out))
            cap = capacity(profile, prm, out, acc, False)
            arr = np.cumsum(rng.exponential(1.0, len(out))) / (load * cap)
            wl = Workload(arr, prm, out, acc, None)
            p = source.preds[head][req.idx]
            for e in entries:
                if e.source.startswith(MEASURED):
                    tab = tables[e.source.removeprefix(MEASURED)][req.idx]
                    pr = (RefinedPredictor(tab, every, name=e.source) if e.policy.startswith("refined")
                          else ArrayPredictor(np.maximum(tab[:, 0], 1.0), name=e.source))
                else:
                    pr = _predictor(e.source, e.policy.startswith("refined"), p, out, every, seed, sigma_decode,
                                    sigma_prompt, rho if e.rho is None else e.rho)
                with warnings.catch_warnings():  # overload (load >= 1) is expected: runs stop at the horizon
                    warnings.simplefilter("ignore", OverloadWarning)
                    res = simulate(wl, profile, make_policy(e.policy), pr, seed=seed,
                                   **{**dict(sim or {}), **e.sim})
                for k, v in summarize(res).items():
                    rows.append((profile.name, source.name, e.label, e.source, float(load), seed, k, v))
    return pd.DataFrame(rows, columns=["hardware", "data", "policy", "predictor", "load", "seed", "metric", "value"])


def _predictor(src: str, refined: bool, p: np.ndarray, out: np.ndarray, every: int, seed: int,
               sigma_decode: Mapping[float, float] | None, sigma_prompt: float | None, rho: float) -> Any:
    if src in (NO_PREDICTOR, CLAIRVOYANT):
        return None
    if src == "prompt":
        return prompt_source(p, out, every) if refined else ArrayPredictor(p, name="prompt")
    if src == "oracle-remaining":
        return oracle_source(out, every)
    if src == "decode-cal":
        return calibrated_source(out, sigma_decode, every, np.random.default_rng([seed, 31]), rho, name=src)
    return calibrated_source(out, {0.0: sigma_prompt}, every, np.random.default_rng([seed, 37]), 1.0, name=src)


_METRICS = [("per_token_latency_mean", 1e3, "{:.1f}"), ("per_token_latency_p50", 1e3, "{:.1f}"),
            ("per_token_latency_p99", 1e3, "{:.0f}"), ("preemptions", 1.0, "{:.0f}")]


def markdown_table(summary: pd.DataFrame, gain: pd.DataFrame, load: float,
                   entries: Sequence[Entry] | None = None) -> str:
    """At `load`: per row, share of the oracle's gain and gain over FCFS (paired over seeds), per-token latency
    mean, median and p99 (ms/token) and preemptions per run, with 95% bootstrap intervals over seeds."""
    s = summary[summary["load"].astype(float) == float(load)]
    g = gain[gain["load"].astype(float) == float(load)]
    order = list(dict.fromkeys(zip(s["policy"], s["predictor"], strict=True)))
    if entries is not None:  # the config's order
        order = [(e.label, e.source) for e in entries if (e.label, e.source) in order]
    head = ["policy", "source", "share of oracle gain", "gain vs FCFS", "ptl mean (ms/tok)", "ptl median",
            "ptl p99", "preemptions/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pol, pred in order:
        cells = [pol, pred]
        for m in ("share_of_oracle", "gain_vs_fcfs"):
            r = g[(g["policy"] == pol) & (g["predictor"] == pred) & (g["metric"] == m)]
            cells.append(_pct(r.iloc[0]) if len(r) else "")
        for m, scale, fmt in _METRICS:
            r = s[(s["policy"] == pol) & (s["predictor"] == pred) & (s["metric"] == m)].iloc[0]
            cells.append(f"{fmt.format(scale * r.value)} [{fmt.format(scale * r.ci_low)}, {fmt.format(scale * r.ci_high)}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(r: Any) -> str:
    try:
        return f"{100 * float(r.value):.0f}% [{100 * float(r.ci_low):.0f}, {100 * float(r.ci_high):.0f}]"
    except (TypeError, ValueError):
        return str(r.value)
