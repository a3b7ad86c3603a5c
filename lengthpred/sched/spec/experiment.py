"""LAPS-SD and the other policies under speculative decoding, on measured n-gram acceptance and on Beta models.

Requests are drawn from the measured records (`spec_records`): each takes its answer's length as its true
output length, its prompt's token count and, by regime, its acceptance:

- ``measured``: the request's own measured rate, A_i = (L_i/steps_i − 1)/n_draft, so that it needs exactly its
  measured number of steps (`spec_acceptance.rate_acceptance`), and LAPS-SD's Â from its own first decode steps
  (`core.early.early_estimates`; the stderr rule on the running estimate);
- ``measured-rate``: the same rates, with LAPS-SD's Â drawn as the true rate plus binomial noise (the
  simulator's synthetic model): the difference from ``measured`` is what the real early estimate costs;
- ``beta-matched``: A ~ Beta with the measured rates' mean and variance, independent of length: against
  ``measured-rate`` the shape and the coupling of A with length, against ``beta-7-3`` the level and spread;
- ``beta-7-3``: A ~ Beta(7, 3), the simulator's default (`sched.accept_beta`).

Every regime serves the same requests and inter-arrival pattern per seed (Beta draws come from their own
stream), and loads are fractions of the capacity computed from each request's own steps
(`capacity(mean_steps=True)`), so a load means the same server utilisation in every regime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import ConfigError, DataError
from lengthpred.sched.core.hardware import HardwareProfile
from lengthpred.sched.spec.acceptance import beta_moments, rate_acceptance
from lengthpred.sched.spec.records import AcceptanceRecords
from lengthpred.sched.sweep.experiment import PolicySpec, run_grid
from lengthpred.sched.sweep.pool import LengthSource, Requests
from lengthpred.sched.sweep.summary import KEY, gains, summarize_runs

REGIMES = ("measured", "measured-rate", "beta-matched", "beta-7-3")
SYNTHETIC_BETA = (7.0, 3.0)


@dataclass
class MeasuredPool:
    """Pool entries (one per measured answer) aligned with their rates and acceptance sequences."""

    source: LengthSource
    accept: np.ndarray  # [m] the simulator's rate A_i
    seqs: list[np.ndarray]  # [m] accepted draft tokens per step (step 0: prefill)
    steps: np.ndarray  # [m] measured steps
    k: int  # the drafter's tokens per step


def measured_pool(records: AcceptanceRecords, preds: dict[str, dict[str, float]] | None = None) -> MeasuredPool:
    """The pool of a checked acceptance file; `preds` (head → prompt id → predicted length) adds heads."""
    f = records.frame
    L = np.maximum(f["output_tokens"].to_numpy(np.int64), 1)
    steps = np.array([len(x) for x in f["accepted"]], dtype=np.int64)
    arrays = {}
    for head, table in (preds or {}).items():
        missing = [i for i in f["id"] if i not in table]
        if missing:
            raise DataError(f"head {head}: no prediction for {len(missing)} of {len(f)} measured answers "
                            f"(e.g. prompt {missing[0]}); the predictions and the acceptance file cover different prompts")
        arrays[head] = np.maximum(np.array([table[i] for i in f["id"]], dtype=float), 1.0)
    name = f"spec:{records.meta.get('data', records.path.stem)}"
    src = LengthSource(name, L, f["prompt_tokens"].to_numpy(np.int64), arrays)
    return MeasuredPool(src, rate_acceptance(L, steps, records.k), list(f["accepted"]), steps, records.k)


def acceptance_for(regime: str, pool: MeasuredPool) -> Callable[[Requests, int], tuple[np.ndarray, list | None]]:
    """The `run_grid(acceptance=...)` hook of a regime (module docstring)."""
    if regime == "measured":
        return lambda req, seed: (pool.accept[req.idx], [pool.seqs[i] for i in req.idx])
    if regime == "measured-rate":
        return lambda req, seed: (pool.accept[req.idx], None)
    if regime in ("beta-matched", "beta-7-3"):
        ab = beta_moments(pool.accept) if regime == "beta-matched" else SYNTHETIC_BETA
        return lambda req, seed: (np.random.default_rng([int(seed), 7]).beta(*ab, len(req.idx)), None)
    raise ConfigError(f"acceptance regime {regime!r}; valid: {', '.join(REGIMES)}")


def spec_profile(profile: HardwareProfile, k: int, t_draft: float) -> HardwareProfile:
    """The profile with the drafter's k draft tokens per step and its draft cost (n-gram lookup: ~0 s)."""
    return profile.with_overrides(n_draft=int(k), t_draft=float(t_draft))


def run_spec_grid(pool: MeasuredPool, profile: HardwareProfile, policies: list[PolicySpec], *,
                  regimes: Sequence[str] = REGIMES, loads: Sequence[float], seeds: Sequence[int], n_requests: int,
                  sim: dict[str, Any] | None = None, random_predictor: bool = False,
                  progress: bool = True) -> pd.DataFrame:
    """Runs (`experiment.run_grid`'s tidy rows, plus ``regime``) of every regime on `profile`, whose n_draft
    must be the drafter's k. Without a horizon in `sim` every run serves all its requests."""
    if profile.n_draft != pool.k:
        raise ConfigError(f"profile {profile.name} drafts n_draft={profile.n_draft} tokens a step, the measured "
                          f"drafter {pool.k}: use spec_profile()")
    bad = [r for r in regimes if r not in REGIMES]
    if bad:
        raise ConfigError(f"acceptance regimes {bad}; valid: {', '.join(REGIMES)}")
    sim = {"horizon": float("inf"), **(sim or {})}
    if sim["horizon"] is None:
        sim["horizon"] = float("inf")
    frames = []
    for regime in regimes:
        runs, _ = run_grid(pool.source, profile, policies, loads=list(loads), seeds=list(seeds),
                           n_requests=n_requests, speculative=True, sim=sim, mean_oracle=False,
                           random_predictor=random_predictor, progress=progress,
                           acceptance=acceptance_for(regime, pool), capacity_mean_steps=True)
        frames.append(runs.assign(regime=regime))
    return pd.concat(frames, ignore_index=True)


def summarize_spec(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: means over seeds with bootstrap CIs per regime, gains: per regime the paired-over-seeds
    gain of mean per-token latency over FCFS and over MLFQ, `metric` = gain_vs_fcfs | gain_vs_mlfq)."""
    summ, gain = [], []
    for regime, r in runs.groupby("regime", sort=False):
        r = r.drop(columns="regime")
        summ.append(summarize_runs(r).assign(regime=regime))
        g = gains(r)
        gain.append(g[g["metric"] == "gain_vs_fcfs"].assign(regime=regime))
        if (r["policy"] == "mlfq").any():  # the same paired bootstrap with MLFQ in FCFS's place
            alt = r[r["policy"] != "fcfs"].replace({"policy": {"mlfq": "fcfs"}})
            g = gains(alt)
            g = g[(g["metric"] == "gain_vs_fcfs") & (g["policy"] != "fcfs")]
            gain.append(g.assign(metric="gain_vs_mlfq", regime=regime))
    return pd.concat(summ, ignore_index=True), pd.concat(gain, ignore_index=True)


def spec_table(summary: pd.DataFrame, gain: pd.DataFrame, metric: str = KEY) -> pd.DataFrame:
    """Tidy wide table: regime, load, policy, predictor, the metric's mean and CI (s), gains vs FCFS and MLFQ
    (fractions) with CIs, seeds."""
    s = summary[summary["metric"] == metric]
    t = s[["regime", "load", "policy", "predictor", "value", "ci_low", "ci_high", "n"]].rename(
        columns={"value": metric, "ci_low": f"{metric}_lo", "ci_high": f"{metric}_hi", "n": "seeds"})
    for m in ("gain_vs_fcfs", "gain_vs_mlfq"):
        g = gain[gain["metric"] == m][["regime", "load", "policy", "predictor", "value", "ci_low", "ci_high"]]
        g = g.rename(columns={"value": m, "ci_low": f"{m}_lo", "ci_high": f"{m}_hi"})
        t = t.merge(g, on=["regime", "load", "policy", "predictor"], how="left")
    order = {r: i for i, r in enumerate(REGIMES)}
    t = t.assign(_r=t["regime"].map(order)).sort_values(["load", "_r", metric], kind="stable")
    return t.drop(columns="_r").reset_index(drop=True)
